"""Text handling between the protocol and the engine: streaming segmentation."""

from voiceserver.text.segmenter import Segment, SegmenterConfig, TextSegmenter

__all__ = ["Segment", "SegmenterConfig", "TextSegmenter"]

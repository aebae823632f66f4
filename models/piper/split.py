"""Cut a Piper VITS ONNX graph in two at the decoder input.

The acoustic half (text encoder, duration predictor, flow) ends at the latent
``z * y_mask`` that feeds ``/dec/conv_pre/Conv``; the decoder half (HiFi-GAN)
starts there. Decoding the whole latent with the second half gives exactly
the one-shot output, so the split adds no error by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx.utils

DECODER_FIRST_NODE = "/dec/conv_pre/Conv"


@dataclass(frozen=True)
class SplitGraphs:
    acoustic: bytes
    decoder: bytes
    latent_name: str
    """Name of the tensor between the halves ([batch, channels, frames])."""
    output_name: str


def split_voice(model_path: Path) -> SplitGraphs:
    model = onnx.load(str(model_path))
    latent = _decoder_input(model)
    inputs = [i.name for i in model.graph.input]
    output = model.graph.output[0].name
    extractor = onnx.utils.Extractor(model)
    acoustic = extractor.extract_model(inputs, [latent])
    decoder = extractor.extract_model([latent], [output])
    return SplitGraphs(
        acoustic=acoustic.SerializeToString(),
        decoder=decoder.SerializeToString(),
        latent_name=latent,
        output_name=output,
    )


def _decoder_input(model: onnx.ModelProto) -> str:
    for node in model.graph.node:
        if node.name == DECODER_FIRST_NODE:
            return node.input[0]
    raise ValueError(
        f"{DECODER_FIRST_NODE!r} not found in the voice graph: not a Piper VITS export "
        "this server knows how to split"
    )

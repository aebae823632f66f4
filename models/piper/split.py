"""Cut a Piper VITS ONNX graph in two at the decoder input.

The acoustic half (text encoder, duration predictor, flow) ends at the latent
``z * y_mask`` that feeds ``/dec/conv_pre/Conv``; the decoder half (HiFi-GAN)
starts there. Decoding the whole latent with the second half gives exactly
the one-shot output, so the split adds no error by itself.

The acoustic half also returns the duration predictor's frames per phoneme id
(the top-level ``Ceil`` of ``exp(logw) * length_scale``, whose sum is the
latent's length), which word timing is read from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx.utils

DECODER_FIRST_NODE = "/dec/conv_pre/Conv"
DURATION_NODE = "/Ceil"


@dataclass(frozen=True)
class SplitGraphs:
    acoustic: bytes
    decoder: bytes
    latent_name: str
    """Name of the tensor between the halves ([batch, channels, frames])."""
    output_name: str
    durations_name: str | None = None
    """Second output of the acoustic half: latent frames per phoneme id
    ([batch, 1, ids], float, whole numbers); None when the graph has no such node."""


def split_voice(model_path: Path) -> SplitGraphs:
    model = onnx.load(str(model_path))
    latent = _decoder_input(model)
    inputs = [i.name for i in model.graph.input]
    output = model.graph.output[0].name
    durations = _durations(model)
    extractor = onnx.utils.Extractor(model)
    acoustic = extractor.extract_model(inputs, [latent] + ([durations] if durations else []))
    decoder = extractor.extract_model([latent], [output])
    return SplitGraphs(
        acoustic=acoustic.SerializeToString(),
        decoder=decoder.SerializeToString(),
        latent_name=latent,
        output_name=output,
        durations_name=durations,
    )


def _durations(model: onnx.ModelProto) -> str | None:
    for node in model.graph.node:
        if node.name == DURATION_NODE and node.op_type == "Ceil":
            return str(node.output[0])
    return None


def _decoder_input(model: onnx.ModelProto) -> str:
    for node in model.graph.node:
        if node.name == DECODER_FIRST_NODE:
            return node.input[0]
    raise ValueError(
        f"{DECODER_FIRST_NODE!r} not found in the voice graph: not a Piper VITS export "
        "this server knows how to split"
    )

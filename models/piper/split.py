"""Cut a Piper VITS ONNX graph in two at the decoder input, and its first half
once more at the phoneme durations.

The acoustic half (text encoder, duration predictor, flow) ends at the latent
``z * y_mask`` that feeds ``/dec/conv_pre/Conv``; the decoder half (HiFi-GAN)
starts there. Decoding the whole latent with the second half gives exactly
the one-shot output, so the split adds no error by itself.

The acoustic half is cut at the top-level ``Ceil`` of ``exp(logw) * length_scale``
(the latent frames each phoneme id gets, whose sum is the latent's length), so
the runner decides the frames per id itself (word timing reads them; speed
scales them): ``timing`` (ids -> the raw frames per id, and the text encoder's
tensors the rest needs) and ``expansion`` (those tensors and whole frames per
id -> the latent). Fed the ``Ceil`` of the raw durations, the two give exactly
the acoustic half's latent. A graph without that ``Ceil`` keeps its acoustic
half whole.

The latent's noise (``z_p = m_p + noise * exp(logs_p) * noise_scale``, drawn by a
``RandomNormalLike`` inside ``expansion``) becomes an input of ``expansion``, so
the runner draws it: a unit's first frames can then be expanded alone and the
whole unit later with the same draw, and the two agree where they overlap.
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
    acoustic: bytes | None
    """The acoustic half in one graph, when it has no ``Ceil`` to cut at (else
    ``timing`` and ``expansion`` are the acoustic half)."""
    decoder: bytes
    latent_name: str
    """Name of the tensor between the halves ([batch, channels, frames])."""
    output_name: str
    channels: int
    """Width of a latent frame (the decoder's first convolution's input channels)."""
    durations_name: str | None = None
    """The ``Ceil``'s output: latent frames per phoneme id ([batch, 1, ids], float,
    whole numbers), an input of ``expansion``; None when the graph has no such node."""
    timing: bytes | None = None
    """The acoustic half up to the ``Ceil``: outputs ``raw_durations_name``, then
    ``cut_names``. None when the graph has no such node."""
    expansion: bytes | None = None
    """The acoustic half from the ``Ceil``: inputs ``cut_names``, ``durations_name``
    (whole frames per id, float [batch, 1, ids]) and the graph inputs it still reads
    (``scales``: the latent's noise); outputs ``latent_name``."""
    raw_durations_name: str | None = None
    """The duration predictor's frames per id before rounding up (the ``Ceil``'s input)."""
    cut_names: tuple[str, ...] = ()
    """Tensors that ``timing`` hands to ``expansion`` (the text encoder's outputs)."""
    noise_name: str | None = None
    """An input of ``expansion``: the latent's standard normal noise, float32
    [batch, channels, frames] (None: the graph draws it itself)."""


def split_voice(model_path: Path) -> SplitGraphs:
    model = onnx.load(str(model_path))
    latent, channels = _decoder_input(model)
    inputs = [i.name for i in model.graph.input]
    output = model.graph.output[0].name
    extractor = onnx.utils.Extractor(model)
    decoder = extractor.extract_model([latent], [output]).SerializeToString()
    ceil = _durations(model)
    if ceil is None:
        acoustic = extractor.extract_model(inputs, [latent])
        return SplitGraphs(acoustic.SerializeToString(), decoder, latent, output, channels)
    raw, durations = str(ceil.input[0]), str(ceil.output[0])
    cut, read = _cut_at_durations(model.graph, inputs, raw, durations, latent)
    timing = extractor.extract_model(inputs, [raw, *cut])
    expansion = extractor.extract_model([*cut, durations, *read], [latent])
    noise = _noise_as_input(expansion)
    return SplitGraphs(
        acoustic=None,
        decoder=decoder,
        latent_name=latent,
        output_name=output,
        channels=channels,
        durations_name=durations,
        timing=timing.SerializeToString(),
        expansion=expansion.SerializeToString(),
        raw_durations_name=raw,
        cut_names=cut,
        noise_name=noise,
    )


def _noise_as_input(model: onnx.ModelProto) -> str | None:
    """Replace the graph's one standard normal draw by an input of the same name;
    its name, or None (left as it is) unless there is exactly one such draw."""
    draws = [node for node in model.graph.node if node.op_type == "RandomNormalLike"]
    if len(draws) != 1:
        return None
    (draw,) = draws
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in draw.attribute}
    if attributes.get("mean", 0.0) != 0.0 or attributes.get("scale", 1.0) != 1.0:
        return None
    if attributes.get("dtype", onnx.TensorProto.FLOAT) != onnx.TensorProto.FLOAT:
        return None
    name = str(draw.output[0])
    model.graph.node.remove(draw)
    model.graph.input.append(
        onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, ["batch", "channels", "frames"]
        )
    )
    return name


def _durations(model: onnx.ModelProto) -> onnx.NodeProto | None:
    for node in model.graph.node:
        if node.name == DURATION_NODE and node.op_type == "Ceil":
            return node
    return None


def _cut_at_durations(
    graph: onnx.GraphProto, inputs: list[str], raw: str, durations: str, latent: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Where ``timing`` hands over to ``expansion`` (see :class:`SplitGraphs`), and
    the graph inputs ``expansion`` still reads.

    Found from the graph itself: the tensors made by nodes that both the raw
    durations and the latent need (the text encoder) and read by nodes only the
    latent needs, so nothing runs twice."""
    before = _needed(graph, [raw], set(inputs))
    after = _needed(graph, [latent], {*inputs, durations})
    made = {out for i in after & before for out in graph.node[i].output}
    read = {name for i in after - before for name in graph.node[i].input}
    cut = tuple(sorted(read & made))
    rest = _needed(graph, [latent], {*inputs, *cut, durations})
    used = {name for i in rest for name in graph.node[i].input}
    return cut, tuple(name for name in inputs if name in used)


def _needed(graph: onnx.GraphProto, outputs: list[str], given: set[str]) -> set[int]:
    """Indices of the nodes that compute ``outputs`` from the ``given`` tensors."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output}
    needed: set[int] = set()
    todo = [name for name in outputs if name not in given]
    while todo:
        index = producer.get(todo.pop())
        if index is None or index in needed:
            continue  # an initializer, or a node already counted
        needed.add(index)
        todo.extend(name for name in graph.node[index].input if name and name not in given)
    return needed


def _decoder_input(model: onnx.ModelProto) -> tuple[str, int]:
    """The latent's name and its channels."""
    weights = {init.name: init for init in model.graph.initializer}
    for node in model.graph.node:
        if node.name == DECODER_FIRST_NODE:
            weight = weights.get(node.input[1])
            return node.input[0], int(weight.dims[1]) if weight is not None else 192
    raise ValueError(
        f"{DECODER_FIRST_NODE!r} not found in the voice graph: not a Piper VITS export "
        "this server knows how to split"
    )

"""Piper's acoustic stage for a burst of first clauses: current, batched and int8 paths.

Eight streams arriving together each need their first clause's acoustic call
(``timing`` then ``expansion``, ``models.piper.split``) before their first chunk
can decode. This times those eight calls on the bundled voice, on CPU:

- as the server runs them (the real ``AcousticGraphs`` from ``load``): one after
  another, and side by side on a 2-thread pool with single-threaded sessions;
- batched: one call of each graph for all eight units, padded to the longest
  (``input_lengths`` masks the padding), with 1 and 2 intra-op threads, and as
  two batches of four side by side on the pool;
- int8: ``quantize_dynamic`` (MatMul/Gemm, then Conv too) and, for comparison,
  static QDQ Conv (calibrated on other sentences), and the decoder dynamic int8;
- the first window only: ``timing`` whole, ``expansion`` of just the frames a
  first chunk's decode window needs plus the flow's reach.

Accuracy, with noise 0 (deterministic graphs): per unit, the batched latent
against the unbatched one; the waveform (int8 acoustic and/or int8 decoder)
against the all-fp32 one, itself checked against the unsplit voice graph
(Piper's own output):

    python -m bench.piper_acoustic --out bench/results/cpu-piper-2core/acoustic-paths.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

from bench.stats import summarize
from models.piper.acoustic import PiperRunner
from models.piper.durations import FLOW_REACH, AcousticGraphs
from models.piper.loader import load, voice_files
from models.piper.options import PiperOptions
from models.piper.split import SplitGraphs, split_voice

SENTENCES = (
    "Hello, thanks for calling the support line, how can I help?",
    "Your order has shipped and should arrive by Thursday afternoon.",
    "I found three restaurants nearby that are open right now.",
    "The meeting with the design team moved to half past two.",
    "Sure, I can set a reminder for tomorrow morning at nine.",
    "It looks like your flight is on time and boarding soon.",
    "Today will be sunny with a high of seventy two degrees.",
    "Let me check that account balance for you, one moment please.",
)
CALIBRATION = (
    "A quick test of the calibration data, with several words in it.",
    "Numbers like forty two and names like Alice appear here too.",
    "What time does the store close on Sunday evening?",
    "Please hold while I transfer you to the billing department.",
)
"""Static int8's calibration: not the sentences it is measured on."""
SCALES = np.array([0.0, 1.0, 0.0], np.float32)
"""noise 0, length 1, noise_w 0: the graphs are deterministic."""
POOL = 2
"""Acoustic workers of the 2-core server (``acoustic_workers``)."""
WINDOW = 8 + 16
"""configs/piper-joe.yaml: a first chunk of 8 frames is decoded with 16 frames of right
context (none on the left at a unit's start)."""
TARGET_MS = 100.0
SPECTRUM = (1024, 256)
"""FFT size and hop of the magnitude spectra compared besides the waveforms."""

Units = list[np.ndarray]
Made = list[tuple[np.ndarray, np.ndarray]]
"""Per unit: latent [frames, channels] and whole frames per id."""
Run = Callable[[list[float]], Any]
"""A timed path: appends each onnxruntime call's ms (or each pool task's) to the list."""


def session(graph: bytes | str, threads: int) -> ort.InferenceSession:
    """A CPU session as ``models.piper.loader`` builds them (0 threads: onnxruntime's
    choice, as the server's decoder)."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.enable_cpu_mem_arena = True
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def graphs(
    split: SplitGraphs, timing: bytes | str, expansion: bytes | str, threads: int
) -> AcousticGraphs:
    return AcousticGraphs(
        latent_name=split.latent_name,
        channels=split.channels,
        timing=session(timing, threads),
        expansion=session(expansion, threads),
        raw_durations_name=split.raw_durations_name,
        durations_name=split.durations_name,
        cut_names=split.cut_names,
        noise_name=split.noise_name,
    )


@dataclass(frozen=True)
class Acoustic:
    """One build of the acoustic graphs (fp32 or int8) in the sessions the paths use."""

    single: AcousticGraphs
    """Single-threaded sessions (the server's with ``acoustic_workers`` 2)."""
    double: AcousticGraphs
    """Two intra-op threads."""


def padded(units: Units) -> dict[str, np.ndarray]:
    """``timing``'s feeds for ``units`` as one batch, zero-padded to the longest."""
    lengths = np.array([len(unit) for unit in units], np.int64)
    ids = np.zeros((len(units), int(lengths.max())), np.int64)
    for row, unit in enumerate(units):
        ids[row, : len(unit)] = unit
    return {"input": ids, "input_lengths": lengths, "scales": SCALES}


def run_timing(g: AcousticGraphs, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    assert g.timing is not None and g.raw_durations_name is not None
    return g.timing.run([g.raw_durations_name, *g.cut_names], feeds)


def expansion_feeds(
    g: AcousticGraphs, cut: Sequence[np.ndarray], durations: np.ndarray
) -> dict[str, np.ndarray]:
    assert g.expansion is not None and g.durations_name is not None
    given = dict(zip(g.cut_names, cut, strict=True))
    given[g.durations_name] = durations
    wanted = {i.name for i in g.expansion.get_inputs()}
    if "scales" in wanted:
        given["scales"] = SCALES
    if g.noise_name is not None:  # noise 0: the draw is multiplied away
        frames = int(durations.sum(axis=-1).max())
        given[g.noise_name] = np.zeros((len(durations), g.channels, frames), np.float32)
    return given


def run_batch(g: AcousticGraphs, units: Units, durations: Units | None = None) -> Made:
    """All ``units`` in one call of each graph. ``durations``: whole frames per id to
    expand by instead of the graph's own (accuracy only)."""
    assert g.expansion is not None
    feeds = padded(units)
    raw, *cut = run_timing(g, feeds)
    # Padded ids come out of the duration predictor masked to 0 frames, so each row's
    # latent is as long as its own ids make it and the rest is masked padding.
    whole = np.ceil(raw)
    if durations is not None:
        whole = np.zeros_like(raw)
        for row, frames in enumerate(durations):
            whole[row, 0, : len(frames)] = frames
    (latent,) = g.expansion.run([g.latent_name], expansion_feeds(g, cut, whole))
    made: Made = []
    for row, length in enumerate(feeds["input_lengths"].tolist()):
        frames = whole[row, 0, :length].astype(np.int64)
        made.append((np.ascontiguousarray(latent[row, :, : int(frames.sum())].T), frames))
    return made


def first_window(g: AcousticGraphs, unit: np.ndarray, frames: int) -> np.ndarray:
    """The unit's first ``frames`` latent frames as the server makes a context's first
    window (``AcousticGraphs.expand`` with ``frames``): ``timing`` on the whole unit,
    ``expansion`` on just the ids that make those frames and the flow's reach."""
    return g.expand(g.time(unit, SCALES, 1.0), frames)


def timed(calls: list[float], fn: Callable[[], Any]) -> Any:
    start = time.perf_counter()
    out = fn()
    calls.append((time.perf_counter() - start) * 1e3)
    return out


def serial(g: AcousticGraphs, units: Units, calls: list[float]) -> Made:
    made: Made = []
    for unit in units:
        latent, frames = timed(calls, lambda unit=unit: g.run(unit, SCALES, 1.0))
        assert frames is not None
        made.append((latent, frames))
    return made


def pooled(pool: ThreadPoolExecutor, g: AcousticGraphs, units: Units, calls: list[float]) -> Made:
    """As ``PiperRunner._synthesize``: the step's calls mapped onto the pool."""

    def one(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        latent, frames = timed(calls, lambda: g.run(unit, SCALES, 1.0))
        assert frames is not None
        return latent, frames

    return list(pool.map(one, units))


def batched_pooled(
    pool: ThreadPoolExecutor, g: AcousticGraphs, units: Units, calls: list[float]
) -> Made:
    """The units in ``POOL`` padded batches, side by side on the pool."""
    size = -(-len(units) // POOL)
    parts = [units[i : i + size] for i in range(0, len(units), size)]
    made = pool.map(lambda part: timed(calls, lambda: run_batch(g, part)), parts)
    return [m for part in made for m in part]


def measure(paths: dict[str, Run], reps: int, warmup: int) -> dict[str, dict[str, Any]]:
    """Wall ms of each path over ``reps`` rounds, the paths taken in turn within a
    round so that a noisy neighbour on the shared machine hits them alike."""
    walls: dict[str, list[float]] = {name: [] for name in paths}
    calls: dict[str, list[float]] = {name: [] for name in paths}
    for rep in range(warmup + reps):
        for name, path in paths.items():
            these: list[float] = []
            start = time.perf_counter()
            path(these)
            wall = (time.perf_counter() - start) * 1e3
            if rep >= warmup:
                walls[name].append(wall)
                calls[name].extend(these)
        print(f"  round {rep + 1}/{warmup + reps}", flush=True)
    return {
        name: {
            "wall_ms": walls[name],
            "per_call_ms": calls[name],
            "calls_per_round": len(calls[name]) // max(1, reps),
            "wall": summarize(walls[name]),
            "per_call": summarize(calls[name]),
        }
        for name in paths
    }


def snr_db(reference: Sequence[np.ndarray], other: Sequence[np.ndarray]) -> dict[str, Any]:
    """Waveform SNR over all units together and per unit, each on the length both have
    (units whose lengths differ are counted), and the same on magnitude spectra, which
    a phase shift alone does not lower."""
    signal = noise = spec_signal = spec_noise = 0.0
    per_unit: list[float] = []
    differ = 0
    for ref, out in zip(reference, other, strict=True):
        n = min(len(ref), len(out))
        differ += len(ref) != len(out)
        a, b = ref[:n].astype(np.float64), out[:n].astype(np.float64)
        s, e = float(np.sum(a**2)), float(np.sum((a - b) ** 2))
        signal, noise = signal + s, noise + e
        per_unit.append(_db(s, e))
        sa, sb = _magnitudes(a), _magnitudes(b)
        spec_signal += float(np.sum(sa**2))
        spec_noise += float(np.sum((sa - sb) ** 2))
    return {
        "all": _db(signal, noise),
        "per_unit": per_unit,
        "length_differs": differ,
        "spectrum_all": _db(spec_signal, spec_noise),
    }


def _magnitudes(wave: np.ndarray) -> np.ndarray:
    size, hop = SPECTRUM
    frames = np.lib.stride_tricks.sliding_window_view(wave, size)[::hop]
    return np.abs(np.fft.rfft(frames * np.hanning(size), axis=1))


def _db(signal: float, noise: float) -> float:
    return float("inf") if noise == 0 else 10 * float(np.log10(signal / noise))


def decode(decoder: ort.InferenceSession, latent_name: str, made: Made) -> list[np.ndarray]:
    return [decoder.run(None, {latent_name: latent.T[None]})[0].reshape(-1) for latent, _ in made]


def compare_latents(reference: Made, other: Made) -> list[dict[str, Any]]:
    rows = []
    for (ref, ref_frames), (out, out_frames) in zip(reference, other, strict=True):
        n = min(len(ref), len(out))
        rows.append(
            {
                "frames": len(ref),
                "frames_other": len(out),
                "ids_with_other_durations": int(np.sum(ref_frames != out_frames)),
                "max_abs_diff": float(np.max(np.abs(ref[:n] - out[:n]))) if n else None,
                "latent_rms": float(np.sqrt(np.mean(ref**2))),
            }
        )
    return rows


def latent_snr(reference: Made, other: Made) -> float:
    signal = sum(float(np.sum(ref.astype(np.float64) ** 2)) for ref, _ in reference)
    noise = sum(
        float(np.sum((ref.astype(np.float64) - out) ** 2))
        for (ref, _), (out, _) in zip(reference, other, strict=True)
    )
    return _db(signal, noise)


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize(
    graph: bytes,
    folder: Path,
    name: str,
    ops: list[str],
    extra: dict[str, Any] | None = None,
    calibration: list[dict[str, np.ndarray]] | None = None,
) -> tuple[str | None, dict[str, Any]]:
    """The int8 graph's path (None when it failed) and what was quantized: dynamic, or
    static QDQ (per-channel weights) when ``calibration`` feeds are given."""
    source = folder / f"{name}.onnx"
    if not source.exists():
        source.write_bytes(graph)
    kind = "static" if calibration else "dynamic"
    target = folder / f"{name}-{kind}-{'-'.join(ops).lower()}{'-all' if extra else ''}.onnx"
    info: dict[str, Any] = {"kind": kind, "op_types": ops, "extra_options": extra or {}}
    try:
        if calibration:
            quantize_static(
                source,
                target,
                _Feeds(calibration),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=ops,
                per_channel=True,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
            )
        else:
            quantize_dynamic(
                source,
                target,
                op_types_to_quantize=ops,
                weight_type=QuantType.QInt8,
                extra_options=extra,
            )
        session(str(target), 1)
    except Exception as error:  # the finding is that it does not quantize or load
        info["error"] = f"{type(error).__name__}: {error}"[:2000]
        return None, info
    counts = collections.Counter(node.op_type for node in onnx.load(str(target)).graph.node)
    shown = ("MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QuantizeLinear")
    info["nodes"] = {op: counts[op] for op in (*shown, "MatMul", "Conv")}
    info["bytes"] = {"fp32": len(graph), "int8": target.stat().st_size}
    info["quantized_nodes"] = counts["MatMulInteger"] + counts["ConvInteger"] + _qdq(target)
    return str(target), info


def _qdq(path: Path) -> int:
    """Conv/MatMul nodes whose weights come through a DequantizeLinear (static QDQ keeps
    them as float nodes, which onnxruntime fuses with the Q/DQ pairs into int8 kernels)."""
    graph = onnx.load(str(path)).graph
    dequantized = {out for n in graph.node if n.op_type == "DequantizeLinear" for out in n.output}
    return sum(
        n.op_type in ("Conv", "MatMul") and len(n.input) > 1 and n.input[1] in dequantized
        for n in graph.node
    )


@dataclass
class Built:
    split: SplitGraphs
    units: Units
    server: AcousticGraphs
    """The real sessions of ``load`` with ``acoustic_workers`` 2 (single-threaded)."""
    server_two: AcousticGraphs
    """``load`` with ``acoustic_workers`` 1 (onnxruntime's threads, 2 here)."""
    sets: dict[str, Acoustic]
    decoder: ort.InferenceSession
    decoder_int8: ort.InferenceSession | None
    whole_voice: ort.InferenceSession
    quantized: dict[str, Any]


def build(folder: Path) -> Built:
    model_path, _ = voice_files(PiperOptions(), None)
    split = split_voice(model_path)
    assert split.timing is not None and split.expansion is not None
    runner = load({"acoustic_workers": POOL}).runner
    runner_two = load({"acoustic_workers": 1}).runner
    assert isinstance(runner, PiperRunner) and isinstance(runner_two, PiperRunner)
    server, server_two = runner._graphs, runner_two._graphs
    units = [u for text in SENTENCES for u in runner.encode_text(text)]

    sets = {"fp32": Acoustic(server, server_two)}
    quantized: dict[str, Any] = {}
    dynamic = {
        # Every MatMul in these graphs multiplies two activations (attention), which
        # quantize_dynamic leaves alone unless MatMulConstBOnly is off; the weights are
        # all in Convs.
        "int8-matmul": (["MatMul", "Gemm"], None),
        "int8-matmul-all": (["MatMul", "Gemm"], {"MatMulConstBOnly": False}),
        "int8-conv": (["MatMul", "Gemm", "Conv"], None),
    }
    for variant, (ops, extra) in dynamic.items():
        timing, t_info = quantize(split.timing, folder, "timing", ops, extra)
        expansion, e_info = quantize(split.expansion, folder, "expansion", ops, extra)
        quantized[variant] = {"timing": t_info, "expansion": e_info}
        if timing is None or expansion is None:
            continue
        if t_info["quantized_nodes"] + e_info["quantized_nodes"] == 0:
            quantized[variant]["skipped"] = "nothing quantized: the graphs are the fp32 ones"
            continue
        sets[variant] = Acoustic(
            graphs(split, timing, expansion, 1), graphs(split, timing, expansion, 2)
        )

    calibration = [u for text in CALIBRATION for u in runner.encode_text(text)]
    timing_feeds = [padded([unit]) for unit in calibration]
    expansion_calibration = []
    for feeds in timing_feeds:
        raw, *cut = run_timing(server, feeds)
        expansion_calibration.append(expansion_feeds(server, cut, np.ceil(raw)))
    timing, t_info = quantize(split.timing, folder, "timing", ["Conv"], None, timing_feeds)
    expansion, e_info = quantize(
        split.expansion, folder, "expansion", ["Conv"], None, expansion_calibration
    )
    quantized["int8-static-conv"] = {"timing": t_info, "expansion": e_info}
    if timing is not None and expansion is not None:
        sets["int8-static-conv"] = Acoustic(
            graphs(split, timing, expansion, 1), graphs(split, timing, expansion, 2)
        )

    decoder_path, decoder_info = quantize(
        split.decoder, folder, "decoder", ["MatMul", "Gemm", "Conv"]
    )
    quantized["decoder-int8-conv"] = decoder_info
    return Built(
        split=split,
        units=units,
        server=server,
        server_two=server_two,
        sets=sets,
        decoder=session(split.decoder, 0),
        decoder_int8=session(decoder_path, 0) if decoder_path else None,
        whole_voice=session(str(model_path), 0),
        quantized=quantized,
    )


def check(b: Built) -> tuple[dict[str, Any], dict[str, Any], Made]:
    """Batching's and each build's accuracy, and the fp32 reference latents."""
    latent_name = b.split.latent_name
    reference = serial(b.server, b.units, [])
    piper_own = [b.whole_voice.run(None, padded([unit]))[0].reshape(-1) for unit in b.units]
    wave = decode(b.decoder, latent_name, reference)
    accuracy: dict[str, Any] = {"split_fp32_vs_unsplit_voice": snr_db(piper_own, wave)}

    batching: dict[str, Any] = {}
    try:
        batching["units"] = compare_latents(reference, run_batch(b.server, b.units))
        batching["works"] = all(
            u["frames"] == u["frames_other"] and u["ids_with_other_durations"] == 0
            for u in batching["units"]
        )
    except Exception as error:  # onnxruntime's message names the node that refused it
        batching = {"works": False, "error": f"{type(error).__name__}: {error}"[:2000]}

    windows = [first_window(b.server, unit, WINDOW) for unit in b.units]
    accuracy["first_window_max_abs_diff"] = max(
        float(np.max(np.abs(window - ref[:WINDOW])))
        for window, (ref, _) in zip(windows, reference, strict=True)
    )

    durations = [frames for _, frames in reference]
    for name, acoustic in b.sets.items():
        if name == "fp32":
            continue
        made = serial(acoustic.single, b.units, [])
        forced = run_batch(acoustic.single, b.units, durations)
        entry: dict[str, Any] = {
            "latent": compare_latents(reference, made),
            "latent_snr_db_fp32_durations": latent_snr(reference, forced),
            "acoustic_int8_decoder_fp32": snr_db(wave, decode(b.decoder, latent_name, made)),
            "acoustic_int8_fp32_durations_decoder_fp32": snr_db(
                wave, decode(b.decoder, latent_name, forced)
            ),
        }
        if b.decoder_int8 is not None:
            entry["both_int8"] = snr_db(wave, decode(b.decoder_int8, latent_name, made))
        accuracy[name] = entry
    if b.decoder_int8 is not None:
        accuracy["decoder-int8-conv"] = {
            "acoustic_fp32_decoder_int8": snr_db(
                wave, decode(b.decoder_int8, latent_name, reference)
            )
        }
    return batching, accuracy, reference


def acoustic_paths(b: Built, pool: ThreadPoolExecutor, batches: bool) -> dict[str, Run]:
    units = b.units
    fp32 = b.server
    separate = [padded([unit]) for unit in units]
    handed = []
    for feeds in separate:
        raw, *cut = run_timing(fp32, feeds)
        handed.append(expansion_feeds(fp32, cut, np.ceil(raw)))
    assert fp32.expansion is not None
    expansion = fp32.expansion

    paths: dict[str, Run] = {
        "fp32 one after another, 2-thread sessions": lambda c: serial(b.server_two, units, c),
        "fp32 timing graph alone, one after another, 1-thread": lambda c: [
            timed(c, lambda f=f: run_timing(fp32, f)) for f in separate
        ],
        "fp32 expansion graph alone, one after another, 1-thread": lambda c: [
            timed(c, lambda f=f: expansion.run([fp32.latent_name], f)) for f in handed
        ],
    }
    for name, a in b.sets.items():
        full = name == "fp32"
        paths[f"{name} one after another, 1-thread sessions"] = lambda c, a=a: serial(
            a.single, units, c
        )
        paths[f"{name} side by side, pool of {POOL}, 1-thread sessions"] = lambda c, a=a: pooled(
            pool, a.single, units, c
        )
        if not batches:
            continue
        if full:  # the int8 builds get the batched path that did best in fp32 only
            paths[f"{name} batched 8, 1 thread"] = lambda c, a=a: timed(
                c, lambda: run_batch(a.single, units)
            )
        paths[f"{name} batched 8, 2 threads"] = lambda c, a=a: timed(
            c, lambda: run_batch(a.double, units)
        )
        if full:
            paths[f"{name} batched 4+4 side by side, 1-thread sessions"] = lambda c, a=a: (
                batched_pooled(pool, a.single, units, c)
            )
    paths[f"fp32 first {WINDOW} frames only (whole timing), pool of {POOL}"] = lambda c: list(
        pool.map(lambda unit: timed(c, lambda: first_window(fp32, unit, WINDOW)), units)
    )
    return paths


def decoder_paths(b: Built, reference: Made) -> dict[str, Run]:
    name = b.split.latent_name
    windows = np.stack([latent[:WINDOW].T for latent, _ in reference])
    decoders = {"fp32": b.decoder}
    if b.decoder_int8 is not None:
        decoders["int8-conv"] = b.decoder_int8
    paths: dict[str, Run] = {}
    for label, d in decoders.items():
        paths[f"decoder {label}: 8 first-chunk windows ({WINDOW} frames) batched"] = lambda c, d=d: (
            timed(c, lambda: d.run(None, {name: windows}))
        )
        paths[f"decoder {label}: 8 whole units one after another"] = lambda c, d=d: [
            timed(c, lambda latent=latent: d.run(None, {name: latent.T[None]}))
            for latent, _ in reference
        ]
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    parser.add_argument("--md", type=Path, help="markdown table (default: --out as .md)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="piper-int8-") as folder:
        b = build(Path(folder))
        print(f"loaded and quantized in {time.perf_counter() - t0:.1f} s", flush=True)
        batching, accuracy, reference = check(b)
        print(f"accuracy checked at {time.perf_counter() - t0:.1f} s", flush=True)
        with ThreadPoolExecutor(POOL, "acoustic") as pool:
            paths = acoustic_paths(b, pool, bool(batching.get("works")))
            print(f"acoustic: {len(paths)} paths", flush=True)
            acoustic_times = measure(paths, args.reps, args.warmup)
        decoding = decoder_paths(b, reference)
        print(f"decoder: {len(decoding)} paths", flush=True)
        decoder_times = measure(decoding, args.reps, 1)

    results = {
        "meta": {
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "numpy": np.__version__,
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "voice": Path(voice_files(PiperOptions(), None)[0]).name,
            "sentences": list(SENTENCES),
            "calibration_sentences": list(CALIBRATION),
            "unit_ids": [len(u) for u in b.units],
            "unit_frames": [len(latent) for latent, _ in reference],
            "scales": SCALES.tolist(),
            "reps": args.reps,
            "warmup": args.warmup,
            "pool": POOL,
            "first_chunk_window_frames": WINDOW,
            "flow_reach_frames": FLOW_REACH,
            "seconds": round(time.perf_counter() - t0, 1),
        },
        "batching": batching,
        "quantization": b.quantized,
        "accuracy_snr_db": accuracy,
        "acoustic": acoustic_times,
        "decoder": decoder_times,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    md = args.md or args.out.with_suffix(".md")
    md.write_text(markdown(results), encoding="utf-8")
    print(f"wrote {args.out} and {md} in {results['meta']['seconds']} s")


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pair(entry: dict[str, Any]) -> str:
    return f"{_f(entry['all'])} / {_f(entry['spectrum_all'])}"


def _snr_of(results: dict[str, Any], path: str) -> str:
    """How far a path's output is from fp32's: the waveform / magnitude-spectrum SNR
    (fp32 decoder) of the build it runs."""
    build = path.split(" ")[0]
    if path.startswith("fp32 first"):
        return f"max abs diff {results['accuracy_snr_db']['first_window_max_abs_diff']:.0e}"
    if build == "fp32":
        return "reference"
    return f"SNR {_pair(results['accuracy_snr_db'][build]['acoustic_int8_decoder_fp32'])} dB"


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    accuracy = results["accuracy_snr_db"]
    lines = [
        "# Piper acoustic paths for a burst of 8 first clauses",
        "",
        f"`python -m bench.piper_acoustic` on {meta['cpu_count']} CPUs, onnxruntime"
        f" {meta['onnxruntime']}, voice `{meta['voice']}`, noise 0; 8 clauses of"
        f" {min(meta['unit_ids'])}-{max(meta['unit_ids'])} phoneme ids"
        f" ({sum(meta['unit_frames'])} latent frames in all); {meta['reps']} rounds after"
        f" {meta['warmup']} warm-up, paths taken in turn each round. Raw lists and per-unit"
        " numbers: `acoustic-paths.json`. Times in ms (a call: one unit's timing + expansion,"
        " or one batch's); SNR in dB, waveform / magnitude spectrum, against the all-fp32"
        " output.",
        "",
        "| acoustic path (all 8 units) | wall p50 | p95 | min | per call p50 | accuracy |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in results["acoustic"].items():
        wall, call = row["wall"], row["per_call"]
        lines.append(
            f"| {name} | {_f(wall['p50'])} | {_f(wall['p95'])} | {_f(wall['min'])} |"
            f" {_f(call['p50'])} | {_snr_of(results, name)} |"
        )
    lines += [
        "",
        "| decoder path | wall p50 | p95 | min | per call p50 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in results["decoder"].items():
        wall, call = row["wall"], row["per_call"]
        lines.append(
            f"| {name} | {_f(wall['p50'])} | {_f(wall['p95'])} | {_f(wall['min'])} |"
            f" {_f(call['p50'])} |"
        )
    own = accuracy["split_fp32_vs_unsplit_voice"]
    lines += [
        "",
        "Accuracy (waveform / magnitude-spectrum SNR in dB against the all-fp32 split path,"
        f" which is {_f(own['all'])} dB from the unsplit voice graph, Piper's own output):",
        "",
        "| build | int8 acoustic + fp32 decoder | same on fp32 durations | latent SNR on"
        " fp32 durations | fp32 acoustic + int8 decoder | both int8 | units whose length"
        " changed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    decoder_only = accuracy.get("decoder-int8-conv", {}).get("acoustic_fp32_decoder_int8")
    if decoder_only:
        lines.append(f"| decoder dynamic int8 (Conv) | - | - | - | {_pair(decoder_only)} | - | 0 |")
    for name, entry in accuracy.items():
        if not name.startswith("int8-"):
            continue
        own_durations = entry["acoustic_int8_decoder_fp32"]
        forced = entry["acoustic_int8_fp32_durations_decoder_fp32"]
        both = entry.get("both_int8")
        lines.append(
            f"| acoustic {name} | {_pair(own_durations)} | {_pair(forced)} |"
            f" {_f(entry['latent_snr_db_fp32_durations'])} |"
            f" - | {_pair(both) if both else '-'} |"
            f" {own_durations['length_differs']} of 8 |"
        )
    batching = results["batching"]
    if batching.get("works"):
        worst = max(u["max_abs_diff"] for u in batching["units"])
        lines += [
            "",
            "Batching: the split graphs take batch 8 as they are; each unit's batched latent"
            " has its unbatched frames and durations, max abs diff"
            f" {worst:.0e} (float reassociation).",
        ]
    else:
        lines += ["", f"Batching failed: {batching.get('error') or batching.get('units')}"]
    lines += ["", "## Conclusion", "", conclusion(results), ""]
    return "\n".join(lines)


def conclusion(results: dict[str, Any]) -> str:
    rows = results["acoustic"]
    current = rows[f"fp32 side by side, pool of {POOL}, 1-thread sessions"]["wall"]["p50"]
    whole = {name: row for name, row in rows.items() if " alone" not in name}
    under = sorted(
        (row["wall"]["p50"], name) for name, row in whole.items() if row["wall"]["p50"] <= TARGET_MS
    )
    fastest = sorted((row["wall"]["p50"], name) for name, row in whole.items())[:3]
    listed = "; ".join(f"{name}: {p50:.0f} ms ({_snr_of(results, name)})" for p50, name in fastest)
    text = (
        f"The server's path takes {current:.0f} ms (p50) for the 8 first clauses on"
        f" {POOL} cores. Fastest three: {listed}."
    )
    if under:
        found = "; ".join(f"{n} {p:.0f} ms ({_snr_of(results, n)})" for p, n in under)
        text += f" Under {TARGET_MS:.0f} ms: {found}."
    else:
        text += f" No path measured brings the burst under {TARGET_MS:.0f} ms."
    one = rows["fp32 one after another, 1-thread sessions"]["wall"]["p50"]
    batch = rows.get("fp32 batched 8, 1 thread", {}).get("wall", {}).get("p50")
    timing = rows["fp32 timing graph alone, one after another, 1-thread"]["wall"]["p50"]
    if batch is not None:
        text += (
            f" Batching saves nothing: 8 units in one call take {batch:.0f} ms on one thread"
            f" against {one:.0f} ms one after another, as the time is in the Convs and grows"
            " with the units."
        )
    return text + (
        f" The timing graph alone (text encoder and duration predictor, which every first"
        f" frame depends on) takes {timing:.0f} ms for the 8 units on one core, so"
        f" ~{timing / POOL:.0f} ms on {POOL}: a floor for any fp32 path that runs whole"
        " clauses."
    )


if __name__ == "__main__":
    main()

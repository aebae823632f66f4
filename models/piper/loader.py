"""Load a Piper voice as the two streaming stages."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnxruntime as ort
from piper.config import PiperConfig

from models.base import Capabilities, LoadedModel, VoiceInfo, parse_options
from models.piper.acoustic import PiperRunner
from models.piper.durations import NATIVE_SPEEDS, AcousticGraphs
from models.piper.frontend import PiperFrontend
from models.piper.options import PiperOptions
from models.piper.split import split_voice
from models.piper.vocoder import PiperVocoder


def voice_files(options: PiperOptions, checkpoint: Path | None) -> tuple[Path, Path]:
    if checkpoint is not None or options.voice_path is not None:
        model = Path(checkpoint or options.voice_path)  # type: ignore[arg-type]
        if model.is_dir():
            candidates = sorted(model.glob("*.onnx"))
            if not candidates:
                raise FileNotFoundError(f"no .onnx voice in {model}")
            model = candidates[0]
        config = Path(f"{model}.json")
        for path in (model, config):
            if not path.is_file():
                raise FileNotFoundError(f"Piper voice file missing: {path}")
        return model, config
    package = importlib.import_module(options.voice_package)
    return Path(package.model_path()), Path(package.config_path())


def load(raw_options: Mapping[str, Any], checkpoint: Path | None = None) -> LoadedModel:
    options = parse_options(PiperOptions, raw_options, "model")
    model_path, config_path = voice_files(options, checkpoint)
    config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    graphs = split_voice(model_path)

    session_options = ort.SessionOptions()
    if options.threads:
        session_options.intra_op_num_threads = options.threads
    # The CPU arena keeps a session's largest call's memory for reuse. With units
    # capped by max_unit_ids that is ~20 MB for the acoustic stage (it was 2.9 GB
    # for one 6,600-id sentence), and the decoder's windows are bounded by the
    # engine's chunk and batch sizes. Measured alternatives did worse over mixed
    # text: without the arena, or shrinking it after each call, glibc fragments
    # and RSS wandered up to 30 and 70 MB higher, and the decoder ran 10-20% slower.
    session_options.enable_cpu_mem_arena = True
    if not options.spin_threads:
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]

    workers = options.acoustic_workers or min(4, os.cpu_count() or 1)
    if workers < 1:
        raise ValueError(
            f"model.acoustic_workers must be 0 or more, got {options.acoustic_workers}"
        )
    if options.first_window_frames < 0:
        raise ValueError(
            "model.first_window_frames must be 0 (whole units) or more, got "
            f"{options.first_window_frames}"
        )
    acoustic_options = session_options
    if workers > 1:  # the calls run side by side, a core each
        acoustic_options = ort.SessionOptions()
        acoustic_options.intra_op_num_threads = 1
        acoustic_options.enable_cpu_mem_arena = True

    def session(graph: bytes | None) -> ort.InferenceSession | None:
        if graph is None:
            return None
        return ort.InferenceSession(graph, acoustic_options, providers=providers)

    acoustic = AcousticGraphs(
        latent_name=graphs.latent_name,
        channels=graphs.channels,
        timing=session(graphs.timing),
        expansion=session(graphs.expansion),
        raw_durations_name=graphs.raw_durations_name,
        durations_name=graphs.durations_name,
        cut_names=graphs.cut_names,
        noise_name=graphs.noise_name,
        acoustic=session(graphs.acoustic),
    )
    decoder_session = ort.InferenceSession(graphs.decoder, session_options, providers=providers)

    language = (config.espeak_voice or "en").split("-")[0]
    capabilities = Capabilities(
        family="piper",
        sample_rate=config.sample_rate,
        samples_per_frame=config.hop_length,
        voices=(VoiceInfo(options.voice_name, language, f"Piper voice {model_path.stem}"),),
        languages=(language,),
        streaming_text=False,
        speed_range=NATIVE_SPEEDS,
    )
    scales = (
        config.noise_scale if options.noise_scale is None else options.noise_scale,
        config.length_scale if options.length_scale is None else options.length_scale,
        config.noise_w_scale if options.noise_w_scale is None else options.noise_w_scale,
    )
    runner = PiperRunner(
        acoustic,
        PiperFrontend(config, options.max_unit_ids),
        capabilities,
        scales,
        options.max_contexts,
        workers,
        options.first_window_frames,
    )
    vocoder = PiperVocoder(
        decoder_session,
        graphs.latent_name,
        config.sample_rate,
        config.hop_length,
        options.context_frames,
    )
    return LoadedModel(runner=runner, vocoder=vocoder)

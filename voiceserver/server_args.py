"""The server's command-line flags and the configs they make.

``voiceserver serve`` and ``voiceserver ray`` (:mod:`voiceserver.ray_serve`) take the
same flags for the model and the server; both build their ``ServerConfig`` and
``ModelConfig`` here, so a flag means one thing wherever it is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from voiceserver.config import EnginesConfig, ModelConfig, ServerConfig


def key_values(pairs: list[str], flag: str) -> dict[str, Any]:
    """``["k=v", ...]`` as a dict, each value read as YAML (``3`` is an int, ``true`` a bool)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} expects KEY=VALUE, got {pair!r}")
        out[key] = yaml.safe_load(value)
    return out


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of the model and the server (``--host`` ... ``--log-level``)."""
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s). Requests must name this server in"
        " their Host header: localhost, *.localhost, an IP address, this --host if it is a"
        " name, or an --allowed-host; with 0.0.0.0 behind a proxy that keeps the Host"
        " header, add the public name with --allowed-host",
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--config",
        default=None,
        help="model config name in configs/ or a YAML path (default: piper-joe)",
    )
    parser.add_argument("--model", type=Path, default=None, help="checkpoint directory")
    parser.add_argument(
        "--option", action="append", default=[], help="override a model option: KEY=VALUE"
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="model weights' dtype (same as --option dtype=...; float32 is the CPU default)",
    )
    parser.add_argument("--device", default=None, help="model device, e.g. cpu or cuda:0")
    parser.add_argument(
        "--gpus",
        default=None,
        help="one engine process per GPU behind the one port: 'all' or indices (0,1,3);"
        " sessions go to the engine with the most headroom",
    )
    parser.add_argument(
        "--engines",
        type=int,
        default=None,
        help="run N engine processes (each loads the model; on a CPU or one device);"
        " default: one engine, a thread of the server's process",
    )
    parser.add_argument("--api-key", action="append", default=[], help="accept this bearer key")
    parser.add_argument(
        "--voices-dir",
        type=Path,
        default=Path.home() / ".local" / "share" / "voiceserver" / "voices",
        help="where uploaded voices are kept, a folder per model (default: %(default)s)",
    )
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        help="override a server limit: KEY=VALUE (e.g. max_contexts=32, "
        "slow_reader_timeout_s=5; see voiceserver.config.Limits)",
    )
    parser.add_argument(
        "--engine",
        action="append",
        default=[],
        help="override an engine setting: KEY=VALUE (e.g. max_ar_batch=256 on a GPU; see "
        "voiceserver.engine.core.EngineConfig)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds running contexts may finish after SIGTERM before they are cut "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--no-demo",
        action="store_true",
        help="do not serve the demo page at / (the SDK at /sdk/voiceserver.js stays)",
    )
    parser.add_argument(
        "--cors-origin",
        "--allow-origin",
        dest="allow_origin",
        metavar="ORIGIN",
        action="append",
        default=[],
        help="a browser origin (https://app.example) allowed besides the server's own, "
        "with CORS headers on HTTP; repeatable; '*' allows any (default: none)",
    )
    parser.add_argument(
        "--allowed-host",
        dest="allowed_host",
        metavar="NAME",
        action="append",
        default=[],
        help="a Host name this server answers to besides localhost, *.localhost and IP"
        " addresses (a guard against DNS rebinding: other names get 421); repeatable;"
        " .example.com allows a domain and its subdomains, '*' any name (default: none)",
    )
    parser.add_argument(
        "--served-model-name",
        action="append",
        default=[],
        help="a name clients may pass as 'model' (repeatable; the first is listed first). "
        "The config name and the checkpoint folder's name always answer too",
    )
    parser.add_argument(
        "--allowed-local-media-path",
        type=Path,
        default=None,
        help="let ref_audio name a file (path or file:// URI) inside this folder "
        "(default: local files are refused)",
    )
    parser.add_argument(
        "--allow-url-fetch",
        action="store_true",
        help="fetch ref_audio given as an http(s) URL (public addresses only, see "
        "--allow-private-url-fetch)",
    )
    parser.add_argument(
        "--allow-private-url-fetch",
        action="store_true",
        help="with --allow-url-fetch, also fetch from loopback, private and link-local addresses",
    )
    parser.add_argument("--log-level", default="info")


def configs_from_args(args: argparse.Namespace) -> tuple[ServerConfig, ModelConfig]:
    """The configs the flags of :func:`add_server_arguments` describe; a bad value is a
    ``SystemExit`` that names its flag."""
    from models.base import parse_options
    from voiceserver.config import (
        DEFAULT_MODEL_CONFIG,
        Limits,
        MediaConfig,
        config_for_checkpoint,
        load_model_config,
        with_checkpoint,
        with_engine_overrides,
        with_served_names,
    )
    from voiceserver.transport.hosts import check_allowed_host

    overrides = key_values(args.option, "--option")
    for key in ("dtype", "device"):
        if getattr(args, key) is not None:
            overrides[key] = getattr(args, key)
    if args.config is None and args.model is not None:
        try:
            model_config = config_for_checkpoint(args.model, overrides)
        except ValueError as exc:
            raise SystemExit(f"--model: {exc}") from None
    else:
        try:
            model_config = load_model_config(args.config or DEFAULT_MODEL_CONFIG, overrides)
        except (FileNotFoundError, ValueError) as exc:
            raise SystemExit(f"--config: {exc}") from None
    model_config = with_checkpoint(model_config, args.model)
    model_config = with_served_names(model_config, tuple(args.served_model_name))
    if args.engine:
        try:
            model_config = with_engine_overrides(model_config, key_values(args.engine, "--engine"))
        except ValueError as exc:
            raise SystemExit(f"--engine: {exc}") from None
    if args.allow_private_url_fetch and not args.allow_url_fetch:
        raise SystemExit("--allow-private-url-fetch needs --allow-url-fetch")
    media = MediaConfig(
        allowed_local_media_path=args.allowed_local_media_path,
        allow_url_fetch=args.allow_url_fetch,
        allow_private_urls=args.allow_private_url_fetch,
    )
    if media.allowed_local_media_path is not None and not media.allowed_local_media_path.is_dir():
        raise SystemExit(
            f"--allowed-local-media-path: {media.allowed_local_media_path} is not a folder"
        )
    try:
        allowed_hosts = tuple(check_allowed_host(h) for h in args.allowed_host)
    except ValueError as exc:
        raise SystemExit(f"--allowed-host: {exc}") from None
    try:
        limits = parse_options(Limits, key_values(args.limit, "--limit"), "limit")
    except ValueError as exc:
        raise SystemExit(f"--limit: {exc}") from None
    try:
        engines = engines_config(args.gpus, args.engines)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    server = ServerConfig(
        host=args.host,
        limits=limits,
        port=args.port,
        api_keys=tuple(args.api_key),
        voices_dir=args.voices_dir,
        shutdown_timeout_s=args.shutdown_timeout,
        allowed_origins=tuple(args.allow_origin),
        allowed_hosts=allowed_hosts,
        demo_page=not args.no_demo,
        media=media,
        engines=engines,
    )
    return server, model_config


def engines_config(gpus: str | None, processes: int | None) -> EnginesConfig:
    """``--gpus`` / ``--engines`` as an EnginesConfig; ValueError naming the flag."""
    if gpus is None:
        if processes is None:
            return EnginesConfig()
        if processes < 1:
            raise ValueError(f"--engines: must be 1 or more, got {processes}")
        return EnginesConfig(processes=processes)
    if gpus.strip() == "all":
        import torch

        count = torch.cuda.device_count()
        if count == 0:
            raise ValueError("--gpus all: no CUDA GPU is visible")
        indices = tuple(range(count))
    else:
        try:
            indices = tuple(int(part) for part in gpus.split(",") if part.strip())
        except ValueError:
            raise ValueError(
                f"--gpus: 'all' or comma-separated indices (0,1), got {gpus!r}"
            ) from None
        if not indices:
            raise ValueError("--gpus: name at least one GPU (or 'all')")
    if processes is not None and processes != len(indices):
        raise ValueError(f"--engines {processes} and --gpus {gpus}: one engine per GPU")
    return EnginesConfig.on_gpus(indices)

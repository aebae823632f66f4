"""Typed configuration: the server's own settings and one deployable model's YAML.

Every field has a docstring; an unknown key in a YAML file is an error that
names the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from models.base import parse_options
from voiceserver.engine.core import EngineConfig
from voiceserver.text.segmenter import SegmenterConfig

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_MODEL_CONFIG = "piper-joe"


@dataclass(frozen=True)
class Limits:
    max_contexts: int = 16
    """Open contexts one session may hold at once."""
    max_text_chars: int = 100_000
    """Characters one context may receive in total."""
    idle_timeout_s: float = 300.0
    """A session that has received no message and sent no audio for this long is
    closed (4008); open contexts that speak nothing do not keep it alive."""
    context_idle_timeout_s: float = 60.0
    """A context that has received no text and sent no audio for this long is ended
    for the client (its buffered text is still spoken, then ``context.done``), with an
    ``idle_timeout`` warning."""
    max_client_share: float = 0.5
    """Share of the engine's context slots one client (an API key, a connect token or
    an address: ``voiceserver.clients``) may hold at once, over all its sockets and
    requests; more gets ``rate_limited`` (HTTP 429). 1 lets one client take it all
    (a single backend that carries every user's traffic under one key)."""
    max_messages_per_s: float = 500.0
    """Messages (socket messages, HTTP requests, socket upgrades) one client may send
    a second on average; 0 disables the limit. A message past the budget is refused
    with ``rate_limited``; a socket that goes on sending a second's worth past it is
    closed (1008), and its client's new requests get HTTP 429 until it is back
    within budget."""
    messages_burst: int = 1000
    """Messages one client may send at once above its per-second rate."""
    max_message_bytes: int = 1 << 20
    """Largest client message; bigger ones get a ``message_too_big`` error and
    close the socket with 1009."""

    @property
    def transport_max_bytes(self) -> int:
        """The WebSocket library's own frame cap: above the protocol limit, so
        the protocol can answer with an error before closing; far above it the
        transport drops the frame unread (also 1009)."""
        return 4 * self.max_message_bytes

    outbox_max_bytes: int = 32 << 20
    """Encoded audio a session may have queued for a slow reader."""
    max_batch_items: int = 32
    """Items one POST /v1/audio/speech/batch may hold (vllm-omni's default)."""
    max_batch_text_chars: int = 100_000
    """Characters of input one POST /v1/audio/speech/batch may hold, all its items
    together (each item also at most ``max_text_chars``); more: 400 ``text_too_long``."""
    max_batch_audio_bytes: int = 64 << 20
    """Audio one POST /v1/audio/speech/batch may make, all its items together,
    counted as 16-bit samples at the requested rate as they are made (a WAV or PCM
    file's size; compressed formats come out smaller, base64 a third larger); an
    item that would pass it is cut and fails alone with ``message_too_big``."""
    max_client_media_jobs: int = 8
    """Reference-audio work one client may have running at once: URL fetches, and
    the reads and clones of a batch's shared reference or of an uploaded voice; more
    get ``rate_limited`` (HTTP 429) naming ``ref_audio``."""
    max_voice_store_bytes: int = 256 << 20
    """Bytes the uploaded voices of the model may take together (arrays and
    records, on disk and in memory); an upload past it gets HTTP 413 until voices
    are deleted."""
    slow_reader_timeout_s: float = 10.0
    """Every send to a client must complete within this long; one that does not
    (the client stopped reading) drops the client: 1008 ``slow_reader``."""
    http_header_timeout_s: float = 10.0
    """An HTTP request's headers must arrive within this long (else 408, closed)."""
    http_body_timeout_s: float = 60.0
    """An HTTP request's body must arrive within this long (else 408 ``request_timeout``)."""
    max_header_bytes: int = 64 << 10
    """Largest request line plus headers of one HTTP request or WebSocket handshake
    (names, values and their separators); more gets HTTP 431 ``headers_too_large``
    and the connection is closed. Above nginx's (4 x 8 KiB) and Node's (16 KiB)
    defaults, for the cookies browsers collect on ``localhost`` (shared by every
    port)."""
    stream_ahead_s: float = 20.0
    """Audio an HTTP response (or a compatibility-socket sentence) may hold decoded
    beyond what its client has taken; the engine pauses that request above it."""


@dataclass(frozen=True)
class MediaConfig:
    """Where ``ref_audio`` given as a path or URL may come from (both off by default)."""

    allowed_local_media_path: Path | None = None
    """A folder whose files ``ref_audio`` may name (a path or ``file://`` URI);
    None: local paths are refused. Symlinks are resolved before the check."""
    allow_url_fetch: bool = False
    """Fetch ``ref_audio`` given as an ``http``/``https`` URL."""
    allow_private_urls: bool = False
    """Also fetch from loopback, private, link-local and other non-public
    addresses (only with ``allow_url_fetch``)."""
    max_bytes: int = 16 << 20
    """Largest file read or fetched."""
    fetch_timeout_s: float = 10.0
    """A fetch must complete (connect, redirects and body) within this long."""
    max_redirects: int = 3
    """Redirects a fetch follows, each target checked like the first."""


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()
    """Bearer keys accepted; empty means the server is open (logged loudly)."""
    limits: Limits = field(default_factory=Limits)
    encode_threads: int = 2
    """Threads that resample and encode audio off the event loop."""
    prepare_threads: int = 2
    """Threads that prepare contexts before their first step (reference audio,
    voice-clone encoders) off the event loop and the engine thread."""
    voices_dir: Path | None = None
    """Where uploaded voices are kept (a folder per model name); None: in memory
    only, lost at restart."""
    shutdown_timeout_s: float = 10.0
    """On SIGTERM/SIGINT: how long running contexts may finish before they are cut
    (``server_shutdown`` error, close 1012)."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins (``https://app.example``) allowed to call the server, besides
    its own origin; ``*`` allows any. Requests without an Origin header (non-browser
    clients) are always allowed. HTTP answers these origins with CORS headers
    (``--cors-origin``, alias ``--allow-origin``)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names the server answers to besides ``localhost``, ``*.localhost``, IP
    addresses and its own ``host`` (``--allowed-host``): ``tts.example.com``,
    ``.example.com`` (the domain and its subdomains), ``*.example.com`` (subdomains),
    ``*`` (any). Others get HTTP 421 ``host_not_allowed``: a guard against DNS
    rebinding (``voiceserver.transport.hosts``)."""
    media: MediaConfig = field(default_factory=MediaConfig)
    """Local files and URLs as ``ref_audio``."""
    demo_page: bool = True
    """Serve the demo page at ``/`` (``--no-demo`` turns it off); the browser SDK at
    ``/sdk/voiceserver.js`` is served either way."""
    engines: EnginesConfig = field(default_factory=lambda: EnginesConfig())
    """Where the engines run: a thread of this process, or processes of their own."""


@dataclass(frozen=True)
class EnginesConfig:
    """How many engines serve, and where (``--engines``, ``--gpus``)."""

    processes: int = 0
    """0: one engine, a thread of the server's process (the default: no hop between
    the front end and the model). N >= 1: N engine processes behind the one port,
    each loading the model; a session is placed on the one with the most headroom."""
    gpus: tuple[int, ...] = ()
    """GPU indices, one engine process each (each sees only its GPU); empty: no
    pinning. When set, ``processes`` is their number."""
    start_timeout_s: float = 900.0
    """How long an engine process may take to load its model before start-up fails."""

    def __post_init__(self) -> None:
        if self.processes < 0:
            raise ValueError(f"engines: processes must be 0 or more, got {self.processes}")
        if self.gpus and self.processes != len(self.gpus):
            raise ValueError(
                f"engines: {len(self.gpus)} GPUs ({self.gpus}) need as many processes, "
                f"got {self.processes}"
            )
        if len(set(self.gpus)) != len(self.gpus) or any(g < 0 for g in self.gpus):
            raise ValueError(f"engines: GPUs must be distinct indices from 0, got {self.gpus}")

    @classmethod
    def on_gpus(cls, gpus: tuple[int, ...]) -> EnginesConfig:
        return cls(processes=len(gpus), gpus=gpus)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    """Model id clients pass as ``model`` and /v1/models lists."""
    family: str
    """Registry name of the model family."""
    model: Mapping[str, Any] = field(default_factory=dict)
    """Family-specific options, validated by the family's own loader."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    segmenter: SegmenterConfig = field(default_factory=SegmenterConfig)
    checkpoint: Path | None = None
    """Checkpoint directory (None: the family's bundled default)."""
    served_model_names: tuple[str, ...] = ()
    """Extra names clients may pass as ``model`` (YAML ``served_model_name``, CLI
    ``--served-model-name``); the first is the id /v1/models lists first. The
    config name, the family and the checkpoint directory's name always answer."""
    openai_voices: Mapping[str, str] = field(default_factory=dict)
    """OpenAI voice name -> one of the model's voices, for the OpenAI endpoint
    (YAML ``openai_voices``); an OpenAI voice not listed speaks in the model's
    default voice."""
    sized_engine: tuple[str, ...] = ()
    """Engine settings the YAML leaves to start-up sizing (``auto``; among
    ``SIZED_ENGINE_KEYS``): from the GPU memory free after the weights, or the
    family's CPU defaults (``voiceserver.sizing``). Until then ``engine`` holds the
    family's CPU defaults for them."""


def load_model_config(
    name_or_path: str | Path, overrides: Mapping[str, Any] | None = None
) -> ModelConfig:
    """Read ``configs/<name>.yaml`` or a YAML path; ``overrides`` replace
    entries of the ``model:`` section (e.g. ``{"noise_scale": 0}``)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"model config {name_or_path!r} not found; known configs: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return model_config_from_mapping(data, str(path), overrides)


def model_config_from_mapping(
    data: Mapping[str, Any], where: str, overrides: Mapping[str, Any] | None = None
) -> ModelConfig:
    allowed = {
        "name",
        "family",
        "model",
        "engine",
        "segmenter",
        "checkpoint",
        "served_model_name",
        "openai_voices",
    }
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(sorted(allowed))}"
        )
    for key in ("name", "family"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"{where}: {key!r} is required and must be a string")
    model = dict(data.get("model") or {})
    model.update(overrides or {})
    checkpoint = data.get("checkpoint")
    return ModelConfig(
        name=data["name"],
        family=data["family"],
        model=model,
        engine=parse_options(EngineConfig, _fixed(data.get("engine"), data["family"]), "engine"),
        segmenter=parse_options(SegmenterConfig, data.get("segmenter"), "segmenter"),
        checkpoint=Path(checkpoint) if checkpoint else None,
        served_model_names=_names(data.get("served_model_name"), where),
        openai_voices=_voice_map(data.get("openai_voices"), where),
        sized_engine=_sized(data.get("engine")),
    )


SIZED_ENGINE_KEYS = ("max_ar_batch", "max_vocoder_batch")
"""Engine settings a model config may set to ``auto`` (sized at start-up)."""


def _sized(engine: Any) -> tuple[str, ...]:
    if not isinstance(engine, Mapping):
        return ()
    return tuple(k for k in SIZED_ENGINE_KEYS if engine.get(k) == "auto")


def _fixed(engine: Any, family: str) -> Any:
    """The engine section with the family's CPU defaults for its ``auto`` entries (what
    start-up sizing gives on a CPU), so code that builds an engine without sizing gets
    them too."""
    if not isinstance(engine, Mapping):
        return engine
    auto = [k for k in SIZED_ENGINE_KEYS if engine.get(k) == "auto"]
    if not auto:
        return engine
    from models.registry import FAMILIES, sizing_of

    sizing = sizing_of(family) if family in FAMILIES else None
    if sizing is None:
        raise ValueError(
            f"engine.{auto[0]}: auto needs a family that sizes itself "
            f"({', '.join(k for k, f in FAMILIES.items() if f.sizing)}); give a number"
        )
    return {**engine, **{k: getattr(sizing.CPU, k) for k in auto}}


def with_engine_overrides(config: ModelConfig, overrides: Mapping[str, Any]) -> ModelConfig:
    """``overrides`` (``--engine KEY=VALUE``) over the config's engine settings; a value
    given is no longer sized, and ``auto`` sizes one (ValueError names a bad key)."""
    merged = asdict(config.engine) | dict(overrides)
    sized = tuple(
        k
        for k in SIZED_ENGINE_KEYS
        if merged.get(k) == "auto" or (k in config.sized_engine and k not in overrides)
    )
    engine = parse_options(EngineConfig, _fixed(merged, config.family), "engine")
    return replace(config, engine=engine, sized_engine=sized)


def _names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError(f"{where}: 'served_model_name' must be a name or a list of names")
    return tuple(n.strip() for n in names)


def _voice_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(
            f"{where}: 'openai_voices' must map OpenAI voice names to the model's voices,"
            " e.g. {alloy: vivian}"
        )
    return {k.lower(): v for k, v in value.items()}


def with_served_names(config: ModelConfig, names: tuple[str, ...]) -> ModelConfig:
    """``names`` (the CLI's) first, then the YAML's."""
    if not names:
        return config
    merged = tuple(dict.fromkeys((*names, *config.served_model_names)))
    return replace(config, served_model_names=merged)


def with_checkpoint(config: ModelConfig, checkpoint: Path | None) -> ModelConfig:
    return replace(config, checkpoint=checkpoint) if checkpoint else config


def config_for_checkpoint(
    checkpoint: Path, overrides: Mapping[str, Any] | None = None
) -> ModelConfig:
    """Pick the model config that fits a checkpoint directory."""
    from models.registry import detect_config

    known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    return load_model_config(detect_config(checkpoint, known), overrides)

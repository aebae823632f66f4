"""Runtime: everything a request handler needs, built once at start-up."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from models.base import LoadedModel
from models.registry import resolve
from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineCore
from voiceserver.engine.door import Engine
from voiceserver.engine.fleet import EngineFleet
from voiceserver.engine.prepare import FairPreparer
from voiceserver.engine.process import EngineSpec
from voiceserver.engine.remote import RemoteEngine, RemoteModel
from voiceserver.lifecycle import Lifecycle
from voiceserver.media import MediaJobs
from voiceserver.metrics import Metrics
from voiceserver.names import OPENAI_VOICES, ModelNames
from voiceserver.quotas import RateLimiter
from voiceserver.sizing import memory_line, size_model
from voiceserver.tasks import VariantTasks
from voiceserver.voices import VoiceStore

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    server: ServerConfig
    model_config: ModelConfig
    model: LoadedModel | RemoteModel
    """The model as the front end sees it: its capabilities and host-side calls."""
    engines: list[Engine]
    """One engine thread, or one engine process per GPU (``ServerConfig.engines``)."""
    encode_pool: ThreadPoolExecutor
    metrics: Metrics
    voices: VoiceStore
    preparer: FairPreparer
    tasks: VariantTasks
    names: ModelNames
    rates: RateLimiter
    """Each client's message budget (``Limits.max_messages_per_s``), on the event loop."""
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    started_at: float = field(default_factory=time.time)
    sessions_open: int = 0
    _fleet: EngineFleet | None = None
    media: MediaJobs = field(init=False)
    """``ref_audio`` paths and URLs, and each client's running reference-audio work
    (``Limits.max_client_media_jobs``)."""

    def __post_init__(self) -> None:
        self.media = MediaJobs(self.server.media, self.server.limits.max_client_media_jobs)

    @classmethod
    def build(cls, server: ServerConfig, model_config: ModelConfig) -> Runtime:
        """Load the model and start the engines (blocking; call off the loop)."""
        t0 = time.monotonic()
        metrics = Metrics(model_config.name)
        if server.engines.processes:
            engines, model, model_config = _start_processes(server, model_config, metrics)
        else:
            engine, model, model_config = _start_thread(model_config, metrics)
            engines = [engine]
        metrics.add_engine_collector(
            lambda: [(str(i), None if e.lost else e.snapshot()) for i, e in enumerate(engines)]
        )
        builtin = [v.name for v in model.capabilities.voices]
        _check_openai_voices(model_config, builtin)
        tasks = VariantTasks.of(model)
        voices = VoiceStore(model_config.name, builtin, server.voices_dir)
        if server.voices_dir is None:
            log.warning("uploaded voices are kept in memory only; pass --voices-dir to keep them")
        names = ModelNames(model_config)
        log.info(
            "model %s (%s) loaded in %.1f s on %s; %d Hz, %.1f ms frames; tasks %s; answers to %s",
            model_config.name,
            model_config.family,
            time.monotonic() - t0,
            _engines_line(engines),
            model.capabilities.sample_rate,
            model.capabilities.frame_ms,
            ", ".join(tasks.tasks),
            ", ".join(names),
        )
        pool = ThreadPoolExecutor(max_workers=server.encode_threads, thread_name_prefix="encode")
        prepare = FairPreparer(server.prepare_threads)
        limits = server.limits
        rates = RateLimiter(limits.max_messages_per_s, limits.messages_burst)
        return cls(
            server,
            model_config,
            model,
            engines,
            pool,
            metrics,
            voices,
            prepare,
            tasks,
            names,
            rates,
        )

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the front end's engine clients on the loop that serves requests."""
        share = self.server.limits.max_client_share
        self._fleet = EngineFleet(
            [
                EngineClient(
                    engine, loop, self.preparer, max_client_share=share, audio_pool=self.encode_pool
                )
                for engine in self.engines
            ]
        )

    @property
    def fleet(self) -> EngineFleet:
        """The front end's doors to its engines (after ``attach``)."""
        assert self._fleet is not None, "Runtime.attach(loop) first"
        return self._fleet

    def place(self) -> EngineClient:
        """The engine a new session or request goes to (``EngineFleet.place``)."""
        return self.fleet.place()

    @property
    def client(self) -> EngineClient:
        """The first engine's client (a server with one engine has only it)."""
        return self.fleet.clients[0]

    @property
    def engine(self) -> Engine:
        """The first engine (a server with one engine has only it)."""
        return self.engines[0]

    @property
    def full(self) -> bool:
        """No engine would take a new context now."""
        return self.fleet.full

    def session_opened(self, endpoint: str) -> None:
        self.sessions_open += 1
        self.metrics.sessions.labels(self.model_config.name, endpoint).inc()

    def session_closed(self, endpoint: str) -> None:
        self.sessions_open -= 1
        self.metrics.sessions.labels(self.model_config.name, endpoint).dec()

    @property
    def model_names(self) -> ModelNames:
        """Names a client may pass as ``model`` (``voiceserver.names``)."""
        return self.names

    def close(self) -> None:
        for engine in self.engines:
            engine.stop()
        self.encode_pool.shutdown(wait=False, cancel_futures=True)
        self.preparer.shutdown()


def _start_thread(
    model_config: ModelConfig, metrics: Metrics
) -> tuple[EngineCore, LoadedModel, ModelConfig]:
    """The model in this process, its engine a thread."""
    sized = size_model(model_config)
    model_config = sized.config
    for line in sized.lines:
        log.info("%s", line)
    model = resolve(model_config.family)(model_config.model, model_config.checkpoint)
    engine = EngineCore(model, model_config.engine, metrics.engine_observer("0"))
    engine.start()
    if (line := memory_line(model_config)) is not None:
        log.info("%s", line)
    return engine, model, model_config


def _start_processes(
    server: ServerConfig, model_config: ModelConfig, metrics: Metrics
) -> tuple[list[Engine], RemoteModel, ModelConfig]:
    """One engine process per GPU (or ``processes`` of them), all loading at once."""
    setup = server.engines
    gpus: list[int | None] = list(setup.gpus) or [None] * setup.processes
    config = _for_pinned_gpu(model_config) if setup.gpus else model_config
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    started: list[RemoteEngine] = []
    try:
        for index, gpu in enumerate(gpus):
            spec = EngineSpec(config, index, gpu, server.prepare_threads, str(level))
            started.append(RemoteEngine(spec, metrics.engine_observer(str(index))))
        for engine in started:
            engine.wait_ready(setup.start_timeout_s)
    except BaseException:
        for engine in started:
            engine.stop(1.0)
        raise
    engines: list[Engine] = list(started)
    model = RemoteModel(started)
    return engines, model, replace(model_config, engine=started[0].config)


def _for_pinned_gpu(config: ModelConfig) -> ModelConfig:
    """An engine process sees only its own GPU, as ``cuda:0``."""
    device = str(config.model.get("device") or "cuda")
    if not device.startswith("cuda"):
        raise ValueError(f"--gpus: the model's device is {device!r}; GPUs need device cuda")
    return replace(config, model={**config.model, "device": "cuda"})


def _engines_line(engines: list[Engine]) -> str:
    if len(engines) == 1 and isinstance(engines[0], EngineCore):
        return "an engine thread"
    return ", ".join(
        f"engine {e.index} (pid {e.pid}, {e.device})"
        for e in engines
        if isinstance(e, RemoteEngine)
    )


def _check_openai_voices(config: ModelConfig, voices: list[str]) -> None:
    known = {v.lower() for v in voices}
    for alias, target in config.openai_voices.items():
        if alias not in OPENAI_VOICES:
            raise ValueError(
                f"openai_voices: {alias!r} is not an OpenAI voice; they are: "
                + ", ".join(OPENAI_VOICES)
            )
        if target.lower() not in known:
            raise ValueError(
                f"openai_voices: {alias} -> {target!r}, which is not a voice of this model;"
                f" its voices: {', '.join(voices)}"
            )

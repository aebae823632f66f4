"""Runtime: everything a request handler needs, built once at start-up."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from models.base import LoadedModel
from models.registry import resolve
from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineCore
from voiceserver.engine.prepare import FairPreparer
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
    model: LoadedModel
    engine: EngineCore
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
    _client: EngineClient | None = None
    media: MediaJobs = field(init=False)
    """``ref_audio`` paths and URLs, and each client's running reference-audio work
    (``Limits.max_client_media_jobs``)."""

    def __post_init__(self) -> None:
        self.media = MediaJobs(self.server.media, self.server.limits.max_client_media_jobs)

    @classmethod
    def build(cls, server: ServerConfig, model_config: ModelConfig) -> Runtime:
        """Load the model and start the engine thread (blocking; call off the loop)."""
        t0 = time.monotonic()
        sized = size_model(model_config)
        model_config = sized.config
        for line in sized.lines:
            log.info("%s", line)
        loader = resolve(model_config.family)
        model = loader(model_config.model, model_config.checkpoint)
        builtin = [v.name for v in model.capabilities.voices]
        _check_openai_voices(model_config, builtin)
        tasks = VariantTasks.of(model)
        voices = VoiceStore(model_config.name, builtin, server.voices_dir)
        if server.voices_dir is None:
            log.warning("uploaded voices are kept in memory only; pass --voices-dir to keep them")
        metrics = Metrics(model_config.name)
        engine = EngineCore(model, model_config.engine, metrics.engine_observer())
        metrics.add_queue_collector(engine.queue_depths)
        engine.start()
        if (line := memory_line(model_config)) is not None:
            log.info("%s", line)
        names = ModelNames(model_config)
        log.info(
            "model %s (%s) loaded in %.1f s; %d Hz, %.1f ms frames; tasks %s; answers to %s",
            model_config.name,
            model_config.family,
            time.monotonic() - t0,
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
            server, model_config, model, engine, pool, metrics, voices, prepare, tasks, names, rates
        )

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the front end's engine client on the loop that serves requests."""
        share = self.server.limits.max_client_share
        self._client = EngineClient(
            self.engine, loop, self.preparer, max_client_share=share, audio_pool=self.encode_pool
        )

    @property
    def client(self) -> EngineClient:
        """The front end's door to the engine (after ``attach``)."""
        assert self._client is not None, "Runtime.attach(loop) first"
        return self._client

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
        self.engine.stop()
        self.encode_pool.shutdown(wait=False, cancel_futures=True)
        self.preparer.shutdown()


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

"""Runtime: everything a request handler needs, built once at start-up."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from models.base import LoadedModel
from models.registry import resolve
from voiceserver.config import ModelConfig, ServerConfig
from voiceserver.engine.core import EngineCore

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    server: ServerConfig
    model_config: ModelConfig
    model: LoadedModel
    engine: EngineCore
    encode_pool: ThreadPoolExecutor
    started_at: float = field(default_factory=time.time)
    sessions_open: int = 0

    @classmethod
    def build(cls, server: ServerConfig, model_config: ModelConfig) -> Runtime:
        """Load the model and start the engine thread (blocking; call off the loop)."""
        t0 = time.monotonic()
        loader = resolve(model_config.family)
        model = loader(model_config.model, model_config.checkpoint)
        engine = EngineCore(model, model_config.engine)
        engine.start()
        log.info(
            "model %s (%s) loaded in %.1f s; %d Hz, %.1f ms frames",
            model_config.name,
            model_config.family,
            time.monotonic() - t0,
            model.capabilities.sample_rate,
            model.capabilities.frame_ms,
        )
        pool = ThreadPoolExecutor(max_workers=server.encode_threads, thread_name_prefix="encode")
        return cls(server, model_config, model, engine, pool)

    def close(self) -> None:
        self.engine.stop()
        self.encode_pool.shutdown(wait=False, cancel_futures=True)

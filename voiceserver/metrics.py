"""Prometheus metrics, one registry per server instance.

Labels are bounded: ``model`` is the served config name, ``endpoint`` one of
ENDPOINTS, ``code`` one of the protocol's error codes. Request metrics are fed
by RequestTracker, one per context or HTTP request; engine metrics by the
engine thread through EngineObserver (prometheus-client is thread-safe); an engine
in its own process records the same observations and ships them with its reports.
Every engine figure carries an ``engine`` label (``0``, ``1``...: one per engine).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from voiceserver.engine.snapshot import EngineSnapshot

ENDPOINTS = ("ws", "ws_compat", "http", "batch")
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_RTF_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1)


@dataclass(frozen=True)
class EngineObserver:
    """What the engine thread reports; plain callables, so the engine needs no prometheus."""

    ar_batch: Callable[[int], None]
    vocoder_batch: Callable[[int], None]
    ar_step: Callable[[float], None]
    """Wall time of one AR step, seconds."""


EngineFigures = Callable[[], list[tuple[str, EngineSnapshot | None]]]
"""Each engine's label and its latest snapshot (None: the engine is down)."""


class Metrics:
    def __init__(self, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        labels = ("model", "endpoint")
        r = self.registry
        self.request_duration = Histogram(
            "tts_request_duration_seconds",
            "Wall time from request (first text) to its last audio.",
            labels,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )
        self.ttfa = Histogram(
            "tts_time_to_first_audio_seconds",
            "Time from the first text of a request to its first audio.",
            labels,
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.rtf = Histogram(
            "tts_realtime_factor",
            "Synthesis wall time divided by audio duration.",
            labels,
            registry=r,
            buckets=_RTF_BUCKETS,
        )
        self.active = Gauge(
            "tts_active_requests", "Requests (contexts) in flight.", labels, registry=r
        )
        self.tokens_per_second = Summary(
            "tts_tokens_per_second",
            "Model frames generated per second of request wall time.",
            labels,
            registry=r,
        )
        self.sessions = Gauge(
            "tts_sessions_open", "Open WebSocket sessions.", ("model", "endpoint"), registry=r
        )
        self.cancelled = Counter(
            "tts_contexts_cancelled",
            "Contexts cancelled (barge-in or disconnect).",
            labels,
            registry=r,
        )
        self.underruns = Counter(
            "tts_underruns", "Audio chunks produced after their playout time.", labels, registry=r
        )
        self.errors = Counter(
            "tts_errors",
            "Errors sent to clients, by code.",
            ("model", "endpoint", "code"),
            registry=r,
        )
        engine = ("model", "engine")
        self.ar_batch = Histogram(
            "tts_engine_batch_size",
            "Contexts per AR step.",
            engine,
            registry=r,
            buckets=_BATCH_BUCKETS,
        )
        self.vocoder_batch = Histogram(
            "tts_vocoder_batch_size",
            "Chunks per vocoder call.",
            engine,
            registry=r,
            buckets=_BATCH_BUCKETS,
        )
        self.ar_step = Histogram(
            "tts_engine_step_seconds",
            "Wall time of one AR step.",
            engine,
            registry=r,
            buckets=_STEP_BUCKETS,
        )

    def engine_observer(self, engine: str = "0") -> EngineObserver:
        """Where engine ``engine`` reports its batches and step times."""
        ar = self.ar_batch.labels(self.model, engine)
        voc = self.vocoder_batch.labels(self.model, engine)
        step = self.ar_step.labels(self.model, engine)
        return EngineObserver(ar.observe, voc.observe, step.observe)

    def add_engine_collector(self, figures: EngineFigures) -> None:
        """Per-engine gauges (slots, KV blocks, queues, load, up) read at each scrape."""
        self.registry.register(_EngineCollector(self.model, figures))

    def track(self, endpoint: str) -> RequestTracker:
        return RequestTracker(self, endpoint)

    def error(self, endpoint: str, code: str) -> None:
        self.errors.labels(self.model, endpoint, code).inc()


class _EngineCollector(Collector):
    def __init__(self, model: str, figures: EngineFigures) -> None:
        self._model = model
        self._figures = figures

    def collect(self):  # type: ignore[no-untyped-def]
        labels = ["model", "engine"]
        up = GaugeMetricFamily(
            "tts_engine_up", "1 while the engine serves, 0 once it died.", labels=labels
        )
        queue = GaugeMetricFamily(
            "tts_queue_depth", "Items waiting, by queue.", labels=[*labels, "queue"]
        )
        slots = GaugeMetricFamily(
            "tts_engine_slots", "Model slots, by state.", labels=[*labels, "state"]
        )
        kv = GaugeMetricFamily(
            "tts_engine_kv_blocks", "Paged KV cache blocks, by state.", labels=[*labels, "state"]
        )
        contexts = GaugeMetricFamily(
            "tts_engine_contexts", "Contexts the engine holds.", labels=labels
        )
        load = GaugeMetricFamily(
            "tts_engine_load",
            "Step time per second of audio a stepped context gets (smoothed; 1 = real time).",
            labels=labels,
        )
        steps = CounterMetricFamily("tts_engine_steps", "AR steps run.", labels=labels)
        calls = CounterMetricFamily("tts_engine_vocoder_calls", "Vocoder calls run.", labels=labels)
        for engine, snap in self._figures():
            ids = [self._model, engine]
            up.add_metric(ids, 0 if snap is None else 1)
            if snap is None:
                continue
            queue.add_metric([*ids, "engine_inbox"], snap.inbox)
            queue.add_metric([*ids, "engine_waiting"], snap.waiting)
            slots.add_metric([*ids, "used"], snap.used_slots)
            slots.add_metric([*ids, "reserved"], snap.reserved)
            slots.add_metric([*ids, "free"], snap.free_slots)
            kv.add_metric([*ids, "used"], snap.kv_blocks_used)
            kv.add_metric([*ids, "free"], snap.kv_blocks_total - snap.kv_blocks_used)
            contexts.add_metric(ids, snap.active_contexts)
            load.add_metric(ids, snap.load)
            steps.add_metric(ids, snap.steps)
            calls.add_metric(ids, snap.vocoder_calls)
        yield from (up, queue, slots, kv, contexts, load, steps, calls)


class RequestTracker:
    """One request's life: text in -> first audio -> last audio (or cancel/error)."""

    def __init__(self, metrics: Metrics, endpoint: str) -> None:
        self._m = metrics
        self._labels = (metrics.model, endpoint)
        self.endpoint = endpoint
        self.started_at: float | None = None
        self.first_audio_at: float | None = None
        self.audio_s = 0.0
        self.frames = 0
        self._open = True
        metrics.active.labels(*self._labels).inc()

    def text_arrived(self) -> None:
        if self.started_at is None:
            self.started_at = time.monotonic()

    def audio(self, seconds: float, frames: int = 0) -> None:
        if seconds <= 0:
            return
        now = time.monotonic()
        if self.first_audio_at is None:
            self.first_audio_at = now
            self._m.ttfa.labels(*self._labels).observe(now - (self.started_at or now))
        elif now > self.first_audio_at + self.audio_s:
            self._m.underruns.labels(*self._labels).inc()
        self.audio_s += seconds
        self.frames += frames

    def done(self) -> None:
        if not self._close():
            return
        now = time.monotonic()
        wall = now - (self.started_at or now)
        self._m.request_duration.labels(*self._labels).observe(wall)
        if self.audio_s > 0:
            self._m.rtf.labels(*self._labels).observe(wall / self.audio_s)
        if wall > 0 and self.frames:
            self._m.tokens_per_second.labels(*self._labels).observe(self.frames / wall)

    def cancelled(self) -> None:
        if self._close():
            self._m.cancelled.labels(*self._labels).inc()

    def failed(self, code: str) -> None:
        if self._close():
            self._m.error(self.endpoint, code)

    def _close(self) -> bool:
        if not self._open:
            return False
        self._open = False
        self._m.active.labels(*self._labels).dec()
        return True

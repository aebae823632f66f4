"""RemoteEngine: an engine in a child process, behind the same door as EngineCore.

The engine client (``voiceserver.engine.client``) talks to it exactly as to an
engine thread: inbox messages go down the pipe as they are; the model's host-side
work (preparing a context, encoding text, validation, cloning) runs where the model
lives, through :class:`RemoteRunner`; events come back one batch per client per
engine step, delivered on the pipe's reader thread as an engine thread would.

Admission stays immediate: the engine reports its figures every few milliseconds
and the front end counts the contexts it registered since, so ``reserve`` decides
at once without a round trip (the engine refuses the rare one it cannot take).
An engine process that dies is noticed when its pipe closes: pending calls fail
with :class:`~voiceserver.engine.wire.EngineLost` and whoever watches it is told
(its contexts end with ``engine_failed``).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from models.base import (
    AlignedText,
    Capabilities,
    ClonedVoice,
    ModelRunner,
    Prepared,
    StepPlan,
    StepResult,
    SynthParams,
)
from voiceserver.engine.core import EngineConfig
from voiceserver.engine.messages import EngineBatch, InboxMessage, Shutdown
from voiceserver.engine.process import EngineSpec, engine_main
from voiceserver.engine.snapshot import EngineSnapshot
from voiceserver.engine.wire import (
    Call,
    Discard,
    EngineLost,
    Events,
    Hello,
    Reply,
    Report,
    StartFailed,
)
from voiceserver.metrics import EngineObserver

log = logging.getLogger(__name__)


class RemoteEngine:
    encodes_text = True
    """Text is encoded in the engine process, in the order sent (``AppendText``)."""

    def __init__(self, spec: EngineSpec, observer: EngineObserver | None = None) -> None:
        """Start the engine process (it loads the model meanwhile: :meth:`wait_ready`)."""
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked CUDA
        self._conn, child = ctx.Pipe()
        self.index = spec.index
        self.process = ctx.Process(
            target=engine_main, args=(child, spec), name=f"voiceserver-engine-{spec.index}"
        )
        self.process.start()
        child.close()
        self._observer = observer
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._calls: dict[int, Future[Any]] = {}
        self._call_ids = itertools.count(1)
        self._ids = itertools.count(1)
        self._clients: dict[int, Callable[[EngineBatch], None]] = {}
        self._watchers: list[Callable[[], None]] = []
        self._registers = 0
        """Register messages sent (the engine reports how many it has taken)."""
        self._stopping = False
        self.lost = False
        self.pid = self.process.pid or 0
        self.device = "?"

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for the model to load; RuntimeError naming why when it does not."""
        if not self._conn.poll(timeout_s):
            self.process.kill()
            raise RuntimeError(f"engine {self.index} did not start within {timeout_s:.0f} s")
        try:
            hello = self._conn.recv()
        except EOFError:
            self.process.join(5)
            raise RuntimeError(
                f"engine {self.index} exited while starting (exit code {self.process.exitcode})"
            ) from None
        if isinstance(hello, StartFailed):
            self.process.join(5)
            raise RuntimeError(f"engine {self.index} could not start: {hello.message}")
        assert isinstance(hello, Hello)
        self.capabilities: Capabilities = hello.capabilities
        self.config: EngineConfig = hello.config
        self._snapshot: EngineSnapshot = hello.snapshot
        self.pid, self.device = hello.pid, hello.device
        self.runner = RemoteRunner(lambda: self, hello.capabilities, hello.aligns)
        threading.Thread(target=self._read, name=f"engine{self.index}-pipe", daemon=True).start()

    # -- the door (as EngineCore) --------------------------------------------------

    @property
    def max_slots(self) -> int:
        return self._snapshot.max_slots

    def attach(self, deliver: Callable[[EngineBatch], None]) -> int:
        client = self.call("attach")
        self._clients[client] = deliver
        return client

    def new_id(self) -> int:
        return next(self._ids)

    def reserve(self, cid: int | None = None, check_load: bool = True) -> int | None:
        with self._lock:
            if self.lost or self._full(check_load):
                return None
            self._registers += 1
        return next(self._ids) if cid is None else cid

    def retract(self, cid: int) -> bool:
        return False  # the Register may be on its way: a Cancel follows it instead

    @property
    def full(self) -> bool:
        with self._lock:
            return self.lost or self._full(True)

    def _full(self, check_load: bool) -> bool:
        snap = self._snapshot
        unseen = self._registers - snap.registered
        if snap.used_slots + snap.reserved + unseen >= snap.max_slots:
            return True
        limit = self.config.admission_load
        return check_load and bool(limit) and snap.used_slots > 0 and snap.load > limit

    def submit(self, message: InboxMessage) -> None:
        if self.lost:
            return  # its contexts were ended when it was lost
        try:
            self._send(message)
        except (OSError, ValueError):
            pass  # dying: the reader notices and ends its contexts

    def prepare(self, cid: int, params: SynthParams) -> Prepared:
        """Context ``cid``'s inputs, made and kept in the engine process (a token here)."""
        return self.call("prepare", cid, params)

    def forget(self, cid: int) -> None:
        if not self.lost:
            self._send(Discard(cid))

    def snapshot(self) -> EngineSnapshot:
        return self._snapshot

    def queue_depths(self) -> dict[str, int]:
        snap = self._snapshot
        return {"engine_inbox": snap.inbox, "engine_waiting": snap.waiting}

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the pipe's reader thread) if the engine process dies."""
        self._watchers.append(callback)

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        try:
            self._send(Shutdown())
        except (OSError, ValueError):
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self._conn.close()

    # -- calls ------------------------------------------------------------------------

    def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Run ``method`` in the engine process and return what it returned (its
        ModelInputError raised here as it was raised there)."""
        future: Future[Any] = Future()
        with self._lock:
            if self.lost:
                raise EngineLost(f"engine {self.index} is gone")
            call_id = next(self._call_ids)
            self._calls[call_id] = future
        try:
            self._send(Call(call_id, method, args))
        except (OSError, ValueError) as exc:
            with self._lock:
                self._calls.pop(call_id, None)
            raise EngineLost(f"engine {self.index} is gone") from exc
        return future.result(timeout)

    def _send(self, message: object) -> None:
        with self._send_lock:
            self._conn.send(message)

    def _read(self) -> None:
        conn = self._conn
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(message, Events):
                if message.snapshot is not None:
                    self._take_snapshot(message.snapshot)
                deliver = self._clients.get(message.client)
                if deliver is not None:
                    deliver(message.batch)
            elif isinstance(message, Report):
                self._take_snapshot(message.snapshot)
                if self._observer is not None:
                    _replay(self._observer, message)
            elif isinstance(message, Reply):
                with self._lock:
                    future = self._calls.pop(message.id, None)
                if future is not None:
                    if message.failure is None:
                        future.set_result(message.value)
                    else:
                        future.set_exception(message.failure.exception())
        self._lose()

    def _take_snapshot(self, snapshot: EngineSnapshot) -> None:
        # The periodic report and a step's events race for the pipe: keep the newer.
        if snapshot.at >= self._snapshot.at:
            self._snapshot = snapshot

    def _lose(self) -> None:
        with self._lock:
            self.lost = True
            calls, self._calls = self._calls, {}
        for future in calls.values():
            future.set_exception(EngineLost(f"engine {self.index} is gone"))
        if self._stopping:
            return
        self.process.join(1)
        log.error(
            "engine %d (pid %d) stopped (exit code %s): its contexts end with engine_failed",
            self.index,
            self.pid,
            self.process.exitcode,
        )
        for watcher in self._watchers:
            watcher()


def _replay(observer: EngineObserver, report: Report) -> None:
    for size in report.ar_batches:
        observer.ar_batch(size)
    for size in report.vocoder_batches:
        observer.vocoder_batch(size)
    for seconds in report.ar_steps:
        observer.ar_step(seconds)


class RemoteRunner(ModelRunner):
    """The model's host-side calls, answered by an engine process."""

    prepares_inline = False
    encodes_inline = False

    def __init__(
        self, engine: Callable[[], RemoteEngine], capabilities: Capabilities, aligns: bool
    ) -> None:
        """``engine``: the engine to ask (for a fleet's runner: any live one)."""
        self._engine = engine
        self.capabilities = capabilities
        self.aligns = aligns
        """The family aligns words at all (else no context asks the engine)."""
        self.frame_dim = 0
        self.frame_dtype = np.float32

    @property
    def max_slots(self) -> int:
        return self._engine().max_slots

    def validate(self, params: SynthParams) -> None:
        self._engine().call("validate", params)

    def prepare(self, params: SynthParams) -> Prepared:
        raise RuntimeError("contexts are prepared through the engine (RemoteEngine.prepare)")

    def encode_text(self, text: str) -> list[np.ndarray]:
        return self._engine().call("encode_text", text)

    def aligns_words(self, params: SynthParams) -> bool:
        return self.aligns and self._engine().call("aligns_words", params)

    def encode_aligned(self, text: str) -> AlignedText:
        return self._engine().call("encode_aligned", text)

    def execute(self, plan: StepPlan) -> StepResult:
        raise RuntimeError("the model runs in the engine process")

    def clone_voice(self, ref_audio: bytes, options: Mapping[str, Any]) -> ClonedVoice:
        return self._engine().call("clone_voice", ref_audio, dict(options))

    def voice_settings(self, voice: ClonedVoice) -> tuple[str, dict[str, Any]]:
        return self._engine().call("voice_settings", voice)

    def kv_usage(self) -> tuple[int, int]:
        snap = self._engine().snapshot()
        return snap.kv_blocks_used, snap.kv_blocks_total


class RemoteModel:
    """The model as a front end with engine processes sees it: capabilities, and
    host-side calls answered by the first live engine."""

    def __init__(self, engines: list[RemoteEngine]) -> None:
        self._engines = engines
        self.capabilities: Capabilities = engines[0].capabilities
        self.runner = RemoteRunner(self._live, self.capabilities, engines[0].runner.aligns)

    def _live(self) -> RemoteEngine:
        for engine in self._engines:
            if not engine.lost:
                return engine
        return self._engines[0]  # all gone: its calls raise EngineLost

"""An engine in a process of its own: the child's side of the pipe.

``engine_main`` runs in a child started by :class:`~voiceserver.engine.remote.RemoteEngine`
(one per GPU, or several on a CPU): it pins the GPU it was given, loads the model,
starts the engine thread and serves the pipe until the front end closes it or
asks it to stop. The pipe's reader puts inbox messages straight into the engine's
inbox, answers cheap calls in place (validation), and runs the slow ones on
worker threads: preparing contexts (reference audio, clone encoders) on a pool,
encoding text on one thread so that a context's pieces stay in order. What a
context's preparation made stays here (it may hold device state) until its
``Ready`` arrives; the front end holds a :class:`~voiceserver.engine.wire.Staged`
token for it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from models.base import ModelInputError, ModelRunner, Prepared, SynthParams
from voiceserver.config import ModelConfig
from voiceserver.engine.core import EngineCore
from voiceserver.engine.messages import (
    AppendUnits,
    Cancel,
    CloseInput,
    ContextFailed,
    EngineBatch,
    EngineEvent,
    Ready,
    Register,
    Shutdown,
)
from voiceserver.engine.snapshot import EngineSnapshot
from voiceserver.engine.wire import (
    AppendText,
    Call,
    Discard,
    Events,
    Failure,
    Hello,
    Reply,
    Report,
    Staged,
    StartFailed,
    WordSpans,
)
from voiceserver.engine.words import renumbered
from voiceserver.metrics import EngineObserver

log = logging.getLogger(__name__)

REPORT_EVERY_S = 0.02
"""How often the engine process reports its figures (placement and admission read them)."""
SWITCH_INTERVAL_S = 0.001
"""The interpreter's thread switch interval in the engine process: the pipe's reader
gets the interpreter within this while the engine thread runs Python, so a call the
front end waits for (validation) is answered promptly."""


@dataclass(frozen=True)
class EngineSpec:
    """What an engine process is started with (picklable)."""

    model_config: ModelConfig
    index: int
    """The engine's number (its metrics label)."""
    gpu: int | None = None
    """The GPU it owns (it sees only this one, as ``cuda:0``); None: no pinning."""
    prepare_threads: int = 4
    log_level: str = "INFO"


def _failed(cid: int, exc: Exception) -> EngineEvent:
    if isinstance(exc, ModelInputError):
        return ContextFailed(cid, exc.code, str(exc), exc.param)
    return ContextFailed(cid, "internal_error", f"text frontend failed: {exc}")


def engine_main(conn: Connection, spec: EngineSpec) -> None:
    """The child process's body."""
    if spec.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(spec.gpu)  # before anything touches CUDA
    logging.basicConfig(
        level=spec.log_level.upper(),
        format=f"%(asctime)s %(levelname)s engine{spec.index} %(name)s: %(message)s",
    )
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        host = EngineHost.start(conn, spec)
    except BaseException as exc:  # noqa: BLE001 - told to the parent, which names it
        log.exception("the engine could not start")
        conn.send(StartFailed(f"{type(exc).__name__}: {exc}"))
        conn.close()
        return
    host.serve()


class _Recorder:
    """Observations of the engine thread, kept until the next report."""

    def __init__(self) -> None:
        self.ar: list[int] = []
        self.vocoder: list[int] = []
        self.steps: list[float] = []

    def observer(self) -> EngineObserver:
        return EngineObserver(self.ar.append, self.vocoder.append, self.steps.append)

    def take(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
        # The lists are emptied in place: the observer's bound appends keep working.
        ar, vocoder, steps = tuple(self.ar), tuple(self.vocoder), tuple(self.steps)
        del self.ar[: len(ar)], self.vocoder[: len(vocoder)], self.steps[: len(steps)]
        return ar, vocoder, steps


class EngineHost:
    def __init__(self, conn: Connection, core: EngineCore, spec: EngineSpec, recorder: _Recorder):
        self.conn = conn
        self.core = core
        self.runner: ModelRunner = core.runner
        self._recorder = recorder
        self._send_lock = threading.Lock()
        self._prepare_pool = ThreadPoolExecutor(spec.prepare_threads, thread_name_prefix="prepare")
        self._text_pool = ThreadPoolExecutor(1, thread_name_prefix="text")
        self._staged: dict[int, Prepared] = {}
        self._preparing: set[int] = set()
        self._dropped: set[int] = set()
        """Contexts dropped while their preparation ran: its result is thrown away."""
        self._staged_lock = threading.Lock()
        self._registered = 0
        self._stop = threading.Event()
        self._words: dict[int, int] = {}
        """Words of each word-timed context so far (its next piece's first word)."""

    @classmethod
    def start(cls, conn: Connection, spec: EngineSpec) -> EngineHost:
        from models.registry import resolve
        from voiceserver.sizing import memory_line, size_model

        sized = size_model(spec.model_config)
        config = sized.config
        for line in sized.lines:
            log.info("%s", line)
        model = resolve(config.family)(config.model, config.checkpoint)
        recorder = _Recorder()
        core = EngineCore(model, config.engine, recorder.observer())
        core.start()
        if (line := memory_line(config)) is not None:
            log.info("%s", line)
        host = cls(conn, core, spec, recorder)
        device = str(config.model.get("device", "cpu"))
        if spec.gpu is not None:
            device = f"{device} (GPU {spec.gpu})"
        aligns = type(model.runner).aligns_words is not ModelRunner.aligns_words
        conn.send(
            Hello(model.capabilities, core.config, core.snapshot(), os.getpid(), device, aligns)
        )
        return host

    # -- the pipe -----------------------------------------------------------------

    def send(self, message: object) -> None:
        with self._send_lock:
            self.conn.send(message)

    def serve(self) -> None:
        reporter = threading.Thread(target=self._report, name="engine-report", daemon=True)
        reporter.start()
        try:
            while True:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    break  # the front end is gone
                if isinstance(message, Shutdown):
                    break
                self._take(message)
        finally:
            self._stop.set()
            self.core.stop()
            self._prepare_pool.shutdown(wait=False, cancel_futures=True)
            self._text_pool.shutdown(wait=False, cancel_futures=True)

    def _take(self, message: Any) -> None:
        if isinstance(message, Call):
            self._call(message)
        elif isinstance(message, Register):
            self._register(message)
        elif isinstance(message, AppendText | CloseInput | Ready):
            # In the order sent, encoded text before what follows it.
            self._in_order(lambda: self._ordered(message))
        elif isinstance(message, Discard):
            self._drop(message.cid)
        else:
            if isinstance(message, Cancel):
                self._drop(message.cid)
                self._words.pop(message.cid, None)
            self.core.submit(message)

    def _in_order(self, job: Callable[[], None]) -> None:
        if self.runner.encodes_inline:
            job()
        else:
            self._text_pool.submit(job)

    def _ordered(self, message: AppendText | CloseInput | Ready) -> None:
        if isinstance(message, AppendText):
            self._append(message)
            return
        if isinstance(message, CloseInput):
            self._words.pop(message.cid, None)  # no more text comes
        if isinstance(message, Ready) and isinstance(message.prepared, Staged):
            with self._staged_lock:
                found = self._staged.pop(message.cid, None)
            if found is None:
                return  # dropped meanwhile: nothing to run
            message = Ready(message.cid, found)
        self.core.submit(message)

    def _append(self, piece: AppendText) -> None:
        cid, events = piece.cid, []
        located: tuple[Any, ...] = ()
        try:
            if not piece.text:
                units: tuple[Any, ...] = ()
            elif not piece.aligned:
                units = tuple(self.runner.encode_text(piece.text))
            else:
                aligned = self.runner.encode_aligned(piece.text)
                units = tuple(aligned.units)
                first = self._words.get(cid, 0)
                self._words[cid] = first + len(aligned.spans)
                located = tuple(renumbered(table, first) for table in aligned.words)
                spans = WordSpans(cid, piece.text, piece.offset, aligned.spans)
                events.append(spans)
        except Exception as exc:  # noqa: BLE001 - the context fails, the engine goes on
            if not isinstance(exc, ModelInputError):
                log.exception("encoding text failed")
            self.core.submit(Cancel(cid))
            self._tell(piece.client, [_failed(cid, exc)])
            return
        if events:
            self._tell(piece.client, events)  # before any timing that names these words
        if units or piece.flush_id is not None:
            self.core.submit(AppendUnits(cid, units, piece.flush_id, located))

    def _tell(self, client: int, events: list[Any]) -> None:
        try:
            self.send(Events(client, EngineBatch(events)))
        except (OSError, ValueError):
            pass  # the front end is gone

    def _register(self, message: Register) -> None:
        # The front end admitted it on figures a report old (never fewer contexts than
        # there are): should a slot still be busy, the context waits for it.
        self.core.reserve(message.cid, check_load=False, force=True)
        self._registered += 1
        self.core.submit(message)

    def _drop(self, cid: int) -> None:
        with self._staged_lock:
            self._staged.pop(cid, None)
            if cid in self._preparing:
                self._dropped.add(cid)

    def _snapshot(self) -> EngineSnapshot:
        registered = self._registered  # before the snapshot: never under-counts
        at = time.monotonic()  # before reading: a later stamp never holds older figures
        return replace(self.core.snapshot(), registered=registered, at=at)

    def _report(self) -> None:
        while not self._stop.wait(REPORT_EVERY_S):
            snapshot = self._snapshot()
            ar, vocoder, steps = self._recorder.take()
            try:
                self.send(Report(snapshot, ar, vocoder, steps))
            except (OSError, ValueError):
                return  # the pipe is closed

    # -- calls ----------------------------------------------------------------------

    def _call(self, call: Call) -> None:
        method = call.method
        if method in _INLINE:
            self._answer(call, lambda: _INLINE[method](self, *call.args))
        elif method == "prepare":
            cid = call.args[0]
            with self._staged_lock:
                self._preparing.add(cid)
            self._prepare_pool.submit(self._answer, call, lambda: self._prepare(*call.args))
        elif method == "clone_voice":
            self._prepare_pool.submit(
                self._answer, call, lambda: self.runner.clone_voice(*call.args)
            )
        elif method in ("encode_text", "encode_aligned"):
            fn = getattr(self.runner, method)
            self._text_pool.submit(self._answer, call, lambda: fn(*call.args))
        else:
            self.send(Reply(call.id, failure=Failure(f"no call {method!r}", kind="ValueError")))

    def _answer(self, call: Call, fn: Callable[[], Any]) -> None:
        try:
            reply = Reply(call.id, fn())
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller
            if not isinstance(exc, ValueError):
                log.exception("call %s failed", call.method)
            reply = Reply(call.id, failure=Failure.of(exc))
        try:
            self.send(reply)
        except (OSError, ValueError):
            pass  # the front end is gone

    def _prepare(self, cid: int, params: SynthParams) -> Staged:
        try:
            prepared = self.core.prepare(cid, params)
        finally:
            with self._staged_lock:
                self._preparing.discard(cid)
                dropped = cid in self._dropped
                self._dropped.discard(cid)
        if not dropped:
            with self._staged_lock:
                self._staged[cid] = prepared
        return Staged(cid=cid)

    def _attach(self) -> int:
        box: list[int] = []
        client = self.core.attach(lambda batch: self.send(Events(box[0], batch, self._snapshot())))
        box.append(client)
        return client


_INLINE: dict[str, Callable[..., Any]] = {
    "attach": EngineHost._attach,
    "validate": lambda host, params: host.runner.validate(params),
    "aligns_words": lambda host, params: host.runner.aligns_words(params),
    "voice_settings": lambda host, voice: host.runner.voice_settings(voice),
}
"""Calls answered on the pipe's reader: cheap and pure (the front end waits for them)."""

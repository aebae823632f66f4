"""FairPreparer: the worker threads that prepare contexts, shared fairly between clients.

Preparing a context (decoding reference audio, running a voice-clone encoder) can
take a second of CPU. With one first-come queue, a client that opens sixty cloned
contexts at once would put every other client's first audio behind all sixty. Here
each client has its own queue and the workers take turns between clients; one
client runs on at most ``threads - 1`` workers at once (when there are two or more),
so another client's preparation always finds a free worker within one job's time.
A job that has not started is dropped at once when its context is cancelled
(:meth:`PrepareJob.cancel`), with everything it holds (the reference audio).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)


class PrepareJob:
    __slots__ = ("_fn", "_done", "client", "_owner", "state")

    def __init__(
        self,
        owner: FairPreparer,
        client: Hashable,
        fn: Callable[[], Any],
        done: Callable[[Any], None],
    ) -> None:
        self._owner = owner
        self.client = client
        self._fn: Callable[[], Any] | None = fn
        self._done: Callable[[Any], None] | None = done
        self.state = "queued"
        """queued -> running -> finished, or queued -> cancelled."""

    def cancel(self) -> bool:
        """Drop the job if it has not started (True); a running job runs to its end."""
        return self._owner._cancel(self)

    def _run(self) -> None:
        fn, done = self._fn, self._done
        self._fn = self._done = None  # release what the job holds as soon as it ran
        assert fn is not None and done is not None
        done(fn())


class FairPreparer:
    def __init__(self, threads: int, name: str = "prepare") -> None:
        self.threads = max(1, threads)
        self.per_client = max(1, self.threads - 1)
        """Workers one client may occupy at once."""
        self._cond = threading.Condition()
        self._queues: OrderedDict[Hashable, deque[PrepareJob]] = OrderedDict()
        self._running: Counter[Hashable] = Counter()
        self._stopped = False
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for worker in self._workers:
            worker.start()

    def submit(
        self, client: Hashable, fn: Callable[[], Any], done: Callable[[Any], None]
    ) -> PrepareJob:
        """Run ``fn()`` on a worker, then ``done(result)`` on that worker (``fn`` must
        not raise: return the failure instead)."""
        job = PrepareJob(self, client, fn, done)
        with self._cond:
            if self._stopped:
                raise RuntimeError("the preparer is shut down")
            self._queues.setdefault(client, deque()).append(job)
            self._cond.notify()
        return job

    def queued(self, client: Hashable | None = None) -> int:
        """Jobs waiting (of one client, or of all)."""
        with self._cond:
            if client is not None:
                return len(self._queues.get(client, ()))
            return sum(len(q) for q in self._queues.values())

    def _cancel(self, job: PrepareJob) -> bool:
        with self._cond:
            if job.state != "queued":
                return False
            job.state = "cancelled"
            queue = self._queues.get(job.client)
            if queue is not None:
                queue.remove(job)
                if not queue:
                    del self._queues[job.client]
            job._fn = job._done = None
            return True

    def _next(self) -> PrepareJob | None:
        """The next job, taking clients in turn (call with the lock held)."""
        for client, queue in self._queues.items():
            if self._running[client] >= self.per_client:
                continue
            job = queue.popleft()
            if queue:
                self._queues.move_to_end(client)  # its next job waits for the others' turns
            else:
                del self._queues[client]
            job.state = "running"
            self._running[client] += 1
            return job
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                while job is None:
                    if self._stopped:
                        return
                    self._cond.wait()
                    job = self._next()
            try:
                job._run()
            except Exception:  # a worker must survive whatever one job does
                log.exception("a preparation job failed")
            finally:
                with self._cond:
                    job.state = "finished"
                    self._running[job.client] -= 1
                    if not self._running[job.client]:
                        del self._running[job.client]
                    self._cond.notify_all()

    def shutdown(self) -> None:
        """Drop queued jobs; workers end after the job they run."""
        with self._cond:
            self._stopped = True
            for queue in self._queues.values():
                for job in queue:
                    job.state = "cancelled"
                    job._fn = job._done = None
            self._queues.clear()
            self._cond.notify_all()

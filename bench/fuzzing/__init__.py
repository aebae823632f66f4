"""One protocol fuzzer for both WebSocket endpoints, over real sockets.

Used by ``tests/e2e/test_protocol_fuzz.py`` (CI-sized, derandomized) and by
``python -m bench.fuzz`` (10,000+ messages, seeded).

Hypothesis draws a plan: for each fuzz session a script of *steps*. A step is a
few messages sent back to back: one message with one field mutated (plus the
messages that give it something to act on, and a cleanup), a hostile but valid
sequence (bursts of create -> append -> cancel, too many contexts, ...), or raw
garbage (malformed JSON, binary frames, 100,000-deep nesting, oversized frames).
Every message carries a :class:`~bench.fuzzing.verdicts.Verdict`: the error codes that fit it, whether
an error is owed (the generator knows it is invalid), and the close codes it may
cause. The generator decides that from the protocol's documented rules, never by
asking the server's own code.

The driver plays the scripts concurrently, with a well-behaved *bystander*
session alongside, and checks:

1. the server never dies: ``/health`` answers and fresh sessions work after;
2. every message known to be invalid gets an ``error`` that echoes its
   ``event_id`` (or, where the id cannot be read, one whose code fits), or the
   socket closes with a code the message explains; 1011 never fits; no error
   echoes an ``event_id`` over :data:`~bench.fuzzing.rules.ECHO_MAX` or is over
   :data:`~bench.fuzzing.rules.ERROR_FRAME_MAX`;
3. the bystander's audio is byte-identical to the same session on an idle server;
4. ordering: ``context.created`` comes before anything else about a context, a
   stream number is not reused before its context was seen to end, and ``seq``
   counts up; on the vllm-omni socket, audio only inside ``audio.start`` ..
   ``audio.done``;
5. a session with ``idle_timeout_s: 1e-9`` and an open context does not make the
   server spin (its CPU share, when the caller can read the server's CPU time).

6. floods: a flooder client (its own address) floods one kind of message per barrage,
   reconnecting when closed; it must be limited (``rate_limited``, 1008, HTTP 429),
   never closed with 1011, while the bystander stays byte-identical (``flooder``).

Each barrage also sends front-door probes (``http_front``, played by ``http_wire``):
raw HTTP with drawn Host headers (served, 421, 400), pipelined requests and headers
around the size limit (431); each must get its answer, in order.

Findings are replayed on fresh sessions and cut down to the smallest message
sequence that still shows them.

On ``/v1/audio/speech/ws`` every step is followed by a barrier, an empty
``session.update`` whose ``session.updated`` is queued after every answer to the
step, so answers are attributed to their step exactly. The vllm-omni socket
``/v1/audio/speech/stream`` has no ids; there ``input.done`` and its
``session.done`` are the barrier and errors are counted per step.

Each step cleans up after itself (cancels every context it may have opened,
restores session settings), so every step starts from a known state and its
verdicts do not depend on what ran before.

Where things are: the protocol's rules (``rules``) and verdicts (``verdicts``); what a
step sends (``messages``) and how it becomes frames (``render``); the server's limits
(``facts``); hostile values (``values``, ``fields``); the step generators for the native
socket (``native``, ``sequences``, ``garbage``) and the compat socket (``compat``),
weighed into plans (``plans``, sized by ``config``); the connections (``sockets``,
``conn``, ``native_conn``, ``compat_conn``) and ordering oracles (``oracles``); the
bystander (``bystander``), the checks after the barrages (``liveness``, ``spin``), the
run loop with shrinking (``run``) and the report (``report``).
"""

from bench.fuzzing.config import FuzzConfig
from bench.fuzzing.facts import ServerFacts, discover
from bench.fuzzing.report import (
    BYSTANDER_KINDS,
    CLOSE_KINDS,
    FLOOD_KINDS,
    INPUT_KINDS,
    ORDERING_KINDS,
    SERVER_KINDS,
    SPIN_KINDS,
    Finding,
    FuzzReport,
)
from bench.fuzzing.run import Fuzzer, run_fuzz
from bench.fuzzing.spin import process_cpu_seconds

__all__ = [
    "BYSTANDER_KINDS",
    "CLOSE_KINDS",
    "FLOOD_KINDS",
    "INPUT_KINDS",
    "ORDERING_KINDS",
    "SERVER_KINDS",
    "SPIN_KINDS",
    "Finding",
    "FuzzConfig",
    "FuzzReport",
    "Fuzzer",
    "ServerFacts",
    "discover",
    "process_cpu_seconds",
    "run_fuzz",
]

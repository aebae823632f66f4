"""Stand-in for torchaudio where it cannot be installed (the lent GPU host): voxtream
imports it at module level; with the prompt cache its generation path never calls it."""

from torchaudio import functional, transforms  # noqa: F401


def load(*args, **kwargs):
    raise RuntimeError("torchaudio is stubbed: use a cached prompt (.prompt.npy)")

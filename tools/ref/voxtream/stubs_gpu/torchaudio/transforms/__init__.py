"""Stand-in: ``Resample`` is only used on prompt audio, never with a cached prompt."""


class Resample:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("torchaudio is stubbed: use a cached prompt (.prompt.npy)")

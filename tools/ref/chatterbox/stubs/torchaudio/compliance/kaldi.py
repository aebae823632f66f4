"""Stand-in for torchaudio.compliance.kaldi (the clone x-vector's filterbank)."""


def fbank(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    raise NotImplementedError("torchaudio stub: fbank is not available in the reference env")

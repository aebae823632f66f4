"""Stand-in for torchaudio.compliance.kaldi (25 Hz tokenizer only)."""


def fbank(*args, **kwargs):
    raise NotImplementedError("torchaudio stub: the 25 Hz tokenizer is not supported here")

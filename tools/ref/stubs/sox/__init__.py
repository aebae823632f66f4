"""Stand-in for pysox (25 Hz tokenizer only)."""


class Transformer:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("sox stub: the 25 Hz tokenizer is not supported here")

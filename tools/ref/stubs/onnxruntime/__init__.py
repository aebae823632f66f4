"""Stand-in for onnxruntime (25 Hz tokenizer only)."""


class SessionOptions:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("onnxruntime stub: the 25 Hz tokenizer is not supported here")


class GraphOptimizationLevel:
    ORT_ENABLE_ALL = 99


class InferenceSession(SessionOptions):
    pass

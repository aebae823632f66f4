"""Stand-in: prompt loudness normalisation is off in the configs the bench runs."""


class Meter:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("pyloudnorm is stubbed: keep normalize_prompt_loudness false")

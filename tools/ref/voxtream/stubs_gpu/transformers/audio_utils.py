"""Stand-in (see the package)."""


def mel_filter_bank(*args, **kwargs):
    raise RuntimeError("transformers is stubbed: keep enhance_prompt false")


def window_function(*args, **kwargs):
    raise RuntimeError("transformers is stubbed: keep enhance_prompt false")

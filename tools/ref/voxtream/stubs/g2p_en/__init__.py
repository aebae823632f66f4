"""Stand-in for g2p_en: voxtream imports it at module level (its English G2P, an
alternative phonemizer); the generator uses espeak-ng and never calls it."""


class G2p:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("g2p_en is stubbed in the reference env (voxtream uses espeak-ng)")

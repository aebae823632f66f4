"""Stand-in for resemble-perth: parity is taken before the watermark, so it passes audio through."""


class PerthImplicitWatermarker:
    def apply_watermark(self, wav, sample_rate):  # noqa: ANN001, ANN201 (the reference's call)
        return wav

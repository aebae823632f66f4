"""Audio output: resampling model PCM and encoding it into every wire format."""

from voiceserver.audio.encoders import Encoder, make_encoder
from voiceserver.audio.format import AudioFormat, AudioFormatError
from voiceserver.audio.pipeline import OutputStage, make_output
from voiceserver.audio.resample import StreamResampler
from voiceserver.audio.wav import wav_header

__all__ = [
    "AudioFormat",
    "AudioFormatError",
    "Encoder",
    "OutputStage",
    "StreamResampler",
    "make_encoder",
    "make_output",
    "wav_header",
]

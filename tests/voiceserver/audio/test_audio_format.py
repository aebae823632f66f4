import pytest

from voiceserver.audio.format import AudioFormat, AudioFormatError


def test_defaults_are_valid_s16_at_24k():
    fmt = AudioFormat()
    assert fmt.validate() is fmt
    assert (fmt.encoding, fmt.sample_rate, fmt.container) == ("pcm_s16le", 24000, "raw")
    assert fmt.normalized() == fmt


def test_normalized_fills_opus_defaults():
    fmt = AudioFormat("opus", 24000).normalized()
    assert (fmt.frame_ms, fmt.bitrate) == (20, 32000)
    kept = AudioFormat("opus", 48000, "ogg", bitrate=96000, frame_ms=60).normalized()
    assert (kept.frame_ms, kept.bitrate) == (60, 96000)


@pytest.mark.parametrize(
    ("fmt", "field", "hint"),
    [
        (AudioFormat(encoding="mp3"), "encoding", "pcm_s16le, pcm_f32le"),
        (AudioFormat(sample_rate=11025), "sample_rate", "8000, 16000, 22050"),
        (AudioFormat(sample_rate=12000), "sample_rate", "44100"),
        (AudioFormat("opus", 44100), "sample_rate", "8000, 12000, 16000, 24000, 48000"),
        (AudioFormat(sample_rate=True), "sample_rate", "allowed"),
        (AudioFormat(container="webm"), "container", "raw, ogg"),
        (AudioFormat("pcm_mulaw", 8000, "ogg"), "container", "needs encoding 'opus'"),
        (AudioFormat("opus", 24000, frame_ms=25), "frame_ms", "10, 20, 40, 60"),
        (AudioFormat("pcm_s16le", 22050, frame_ms=10), "frame_ms", "allowed: 20, 40, 60"),
        (AudioFormat(bitrate=64000), "bitrate", "only to encoding 'opus'"),
        (AudioFormat("opus", 24000, bitrate=1000), "bitrate", "6000 to 510000"),
    ],
)
def test_validate_names_the_field_and_the_allowed_values(fmt, field, hint):
    with pytest.raises(AudioFormatError) as info:
        fmt.validate()
    assert info.value.field == field
    assert f"output_format.{field}" in str(info.value)
    assert hint in str(info.value)
    assert isinstance(info.value, ValueError)


def test_format_is_frozen():
    with pytest.raises(AttributeError):
        AudioFormat().sample_rate = 8000  # type: ignore[misc]

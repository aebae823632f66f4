"""``voiceserver say`` in-process against the real server on loopback (tiny model).

The tiny model's own rate is 16 kHz, one 20 ms frame per byte of text plus 3 tail frames.
"""

from __future__ import annotations

import socket
import wave
from pathlib import Path

import pytest
from voiceclient.say import main, text_pieces

from tests.serving import RunningServer

TEXT = "Hello there, how are you today?"


def frames_of(text: str, sample_rate: int) -> int:
    return (len(text.encode()) + 3) * sample_rate // 50


def read_wav(path: Path) -> tuple[int, int, int, int]:
    with wave.open(str(path), "rb") as wav:
        return wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()


def test_say_writes_wav_at_the_models_rate(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.wav"
    main([TEXT, "-o", str(out), "--url", tiny_server.ws])
    assert read_wav(out) == (1, 2, 16000, frames_of(TEXT, 16000))
    summary = capsys.readouterr().out
    seconds = frames_of(TEXT, 16000) / 16000
    assert f"{seconds:.2f} s of audio at 16000 Hz" in summary
    assert "RTF" in summary and "time to first audio" not in summary


def test_say_requested_rate_whole_text_and_ttfa(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.wav"
    main(
        [TEXT, "-o", str(out), "--url", tiny_server.ws, "--sample-rate", "24000"]
        + ["--no-stream-input", "--stream", "--voice", "tiny-b"]
    )
    assert read_wav(out) == (1, 2, 24000, frames_of(TEXT, 24000))
    lines = capsys.readouterr().out.splitlines()
    ttfa = [line for line in lines if line.startswith("time to first audio:")]
    assert len(ttfa) == 1
    assert int(ttfa[0].split()[-2]) >= 0


def test_say_server_error_exits_nonzero(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.wav"
    with pytest.raises(SystemExit) as exited:
        main([TEXT, "-o", str(out), "--url", tiny_server.ws, "--voice", "nobody"])
    assert exited.value.code == 1
    assert "unknown_voice" in capsys.readouterr().err
    assert not out.exists()


def test_say_without_a_server_exits_nonzero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SystemExit) as exited:
        main(
            [
                TEXT,
                "-o",
                str(tmp_path / "x.wav"),
                "--url",
                f"ws://127.0.0.1:{port}/v1/audio/speech/ws",
            ]
        )
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "connect_failed" in err and "24000 Hz" in err


def test_text_pieces_join_back_exactly() -> None:
    text = "  Hi,  there!\nNew line. "
    pieces = text_pieces(text, stream_input=True)
    assert "".join(pieces) == text
    assert len(pieces) == 5
    assert text_pieces(text, stream_input=False) == [text]

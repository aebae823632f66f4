"""The LLM-to-speech bridge against a real SSE chat-completions server on loopback and
the real voice server (tiny model: one 20 ms frame per byte of text plus 3 tail
frames, 16 kHz native)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import pytest
from voiceclient.bridge import main
from voiceclient.chat_stream import chunk_text, sse_data

from tests.clients.llm_server import LLMScript, run_llm_server
from tests.serving import RunningServer

PIECES = ["Hello", " there", ",", " how", " are", " you", " today", "?", " I", " am", " fine", "."]
TEXT = "".join(PIECES)


def ms_after(lines: list[str], prefix: str) -> int:
    [line] = [line for line in lines if line.startswith(prefix)]
    return int(line.split(":", 1)[1].split()[0])


def test_speech_starts_before_the_llm_finishes_and_covers_the_text(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = tiny_server.runtime.engine
    steps_before = engine.stats.vocoder_calls
    # The last chunk waits until the voice server has made audio from the first ones.
    script = LLMScript(PIECES, hold_last=lambda: engine.stats.vocoder_calls > steps_before)
    out = tmp_path / "reply.wav"
    with run_llm_server(script) as llm_url:
        main(
            ["--llm-url", llm_url, "--model", "test-llm", "--prompt", "How are you?"]
            + ["--system", "Be brief.", "--server", tiny_server.ws, "-o", str(out)]
        )
    lines = capsys.readouterr().out.splitlines()
    assert ms_after(lines, "first token to first audio") < ms_after(lines, "LLM stream ended")

    [request] = script.requests
    assert request["stream"] is True and request["model"] == "test-llm"
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "How are you?"},
    ]
    with wave.open(str(out), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 16000)
        frames = wav.getnframes()
    # Every byte of the reply is spoken (20 ms each) plus a short tail per segment.
    assert len(TEXT) * 320 <= frames <= (len(TEXT) + 3 * 4) * 320
    assert f"{out}: {frames / 16000:.2f} s of audio at 16000 Hz" in lines


def test_requested_rate_and_voice(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reply.wav"
    with run_llm_server(LLMScript(["Short ", "reply."], delay_s=0.01)) as llm_url:
        main(
            ["--llm-url", f"{llm_url}/chat/completions", "--model", "test-llm"]
            + ["--prompt", "hi", "--server", tiny_server.ws, "-o", str(out)]
            + ["--voice", "tiny-b", "--sample-rate", "24000"]
        )
    with wave.open(str(out), "rb") as wav:
        assert wav.getframerate() == 24000
        assert wav.getnframes() >= len("Short reply.") * 480
    assert "first token to first audio" in capsys.readouterr().out


def test_llm_error_names_the_url_and_status(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_llm_server(LLMScript(["x"])) as llm_url, pytest.raises(SystemExit) as exited:
        main(
            ["--llm-url", llm_url, "--model", "nope", "--prompt", "hi"]
            + ["--server", tiny_server.ws, "-o", str(tmp_path / "x.wav")]
        )
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"{llm_url}/chat/completions answered HTTP 404" in err and "nope" in err
    assert not (tmp_path / "x.wav").exists()


def test_unknown_voice_is_reported(
    tiny_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with run_llm_server(LLMScript(["x"])) as llm_url, pytest.raises(SystemExit) as exited:
        main(
            ["--llm-url", llm_url, "--model", "test-llm", "--prompt", "hi", "--voice", "nobody"]
            + ["--server", tiny_server.ws, "-o", str(tmp_path / "x.wav")]
        )
    assert exited.value.code == 1
    assert "unknown_voice" in capsys.readouterr().err


def test_play_without_a_player_is_a_clear_error(
    tiny_server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    with run_llm_server(LLMScript(["x"])) as llm_url, pytest.raises(SystemExit) as exited:
        main(
            ["--llm-url", llm_url, "--model", "test-llm", "--prompt", "hi"]
            + ["--server", tiny_server.ws, "--play"]
        )
    assert exited.value.code == 1
    assert "--play: no audio player found" in capsys.readouterr().err


def test_output_or_play_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--llm-url", "http://x/v1", "--model", "m", "--prompt", "hi"])
    assert exited.value.code == 2
    assert "-o/--output" in capsys.readouterr().err


def test_ctrl_c_cancels_the_context(tiny_server: RunningServer, tmp_path: Path) -> None:
    engine = tiny_server.runtime.engine
    long_reply = ["word "] * 300 + ["end."]
    # The reply never finishes on its own: the last chunk waits forever.
    script = LLMScript(long_reply, delay_s=0.0, hold_last=lambda: False, hold_timeout_s=600)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with run_llm_server(script) as llm_url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "voiceclient.bridge", "--llm-url", llm_url]
            + ["--model", "test-llm", "--prompt", "go", "--server", tiny_server.ws]
            + ["-o", str(tmp_path / "x.wav")],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            deadline = time.monotonic() + 30
            while engine.stats.active_contexts == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert engine.stats.active_contexts == 1
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted; the context was cancelled" in err
    for _ in range(200):  # the engine frees the slot right after context.cancelled
        if engine.stats.active_contexts == 0:
            break
        time.sleep(0.025)
    assert engine.stats.active_contexts == 0
    assert not (tmp_path / "x.wav").exists()


def test_sse_parsing_follows_the_event_stream_format() -> None:
    raw = [
        b": keep-alive comment\n",
        b"event: message\n",
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\r\n',
        b"\n",
        b'data: {"choices":\n',
        b'data: [{"delta":{"content":"b"}}]}\n',
        b"\n",
        b"data: [DONE]\n",
    ]
    events = list(sse_data(raw))
    assert [chunk_text(e) for e in events[:2]] == ["a", "b"]
    assert events[2] == "[DONE]"
    assert chunk_text('{"choices":[{"delta":{"role":"assistant"}}]}') is None
    assert chunk_text('{"choices":[]}') is None

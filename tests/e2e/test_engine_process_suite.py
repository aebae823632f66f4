"""The suite runs with the engine as a thread of the server (the default); this job
runs the end-to-end tests of every endpoint and family again with the engine in a
process of its own (``VOICESERVER_TEST_ENGINES=1``: every test server starts one
engine process), so both modes pass the same tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.serving import ENGINES_ENV

ROOT = Path(__file__).resolve().parents[2]
FILES = (
    "test_piper_speech.py",
    "test_session_flow.py",
    "test_http_speech.py",
    "test_compat_vllm.py",
    "test_compat_elevenlabs.py",
    "test_compat_cartesia.py",
    "test_streaming.py",
    "test_word_timestamps.py",
    "test_voices.py",
    "test_prepare_cancel.py",
    "test_whole_text.py",
    "test_qwen3_serving.py",
    "test_fish_speech_serving.py",
    "test_chatterbox_serving.py",
)
"""Every endpoint (native socket, HTTP, vllm-omni, ElevenLabs, Cartesia), every family,
word timing, cloning and stored voices, cancels; kept to a few minutes of CI. Left
out besides: tests that reach into the model in the server's own process
(``test_engine_failure.py`` patches the runner), which an engine process keeps out
of reach."""


def test_end_to_end_tests_pass_with_the_engine_in_its_own_process() -> None:
    env = {**os.environ, ENGINES_ENV: "1"}
    paths = [str(ROOT / "tests" / "e2e" / name) for name in FILES]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *paths],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    tail = (run.stdout + run.stderr)[-6000:]
    assert run.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail

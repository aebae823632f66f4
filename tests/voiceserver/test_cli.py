"""The ``voiceserver`` command dispatches its subcommands."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voiceserver.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_bridge_is_a_subcommand() -> None:
    listed = run("--help")
    assert listed.returncode == 0 and "bridge" in listed.stdout
    helped = run("bridge", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "voiceserver bridge" in helped.stdout and "--llm-url" in helped.stdout


def test_unknown_subcommand_names_the_choices() -> None:
    wrong = run("brdge")
    assert wrong.returncode != 0 and "serve, ray, say or bridge" in wrong.stderr


def test_engine_flags_are_checked_before_anything_loads() -> None:
    bad = run("serve", "--gpus", "0,x")
    assert bad.returncode != 0 and "--gpus: 'all' or comma-separated indices" in bad.stderr
    none = run("serve", "--engines", "0")
    assert none.returncode != 0 and "--engines: must be 1 or more" in none.stderr
    both = run("serve", "--engines", "3", "--gpus", "0,1")
    assert both.returncode != 0 and "one engine per GPU" in both.stderr

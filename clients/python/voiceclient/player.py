"""Best-effort live playback of s16le mono PCM through a command-line player."""

from __future__ import annotations

import asyncio
import contextlib
import shutil


class PlayerError(Exception):
    """No player could be found or started, or it failed while playing."""


def player_command(sample_rate: int) -> list[str] | None:
    """The first installed player that reads raw PCM on stdin, as an argv."""
    candidates = [
        ["aplay", "-q", "-t", "raw", "-f", "S16_LE", "-c", "1", "-r", str(sample_rate)],
        ["paplay", "--raw", "--format=s16le", "--channels=1", f"--rate={sample_rate}"],
        ["pw-play", "--format=s16", "--channels=1", f"--rate={sample_rate}", "-"],
        ["ffplay", "-nodisp", "-autoexit", "-loglevel", "error", "-f", "s16le", "-ac", "1"]
        + ["-ar", str(sample_rate), "-i", "-"],
        ["play", "-q", "-t", "raw", "-e", "signed", "-b", "16", "-c", "1"]
        + ["-r", str(sample_rate), "-"],
    ]
    for argv in candidates:
        if shutil.which(argv[0]):
            return argv
    return None


class Player:
    """Feeds PCM to a player process as it arrives. Use :meth:`start` to make one."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self._process = process
        self._name = name

    @classmethod
    async def start(cls, sample_rate: int) -> Player:
        argv = player_command(sample_rate)
        if argv is None:
            raise PlayerError(
                "--play: no audio player found (looked for aplay, paplay, pw-play, ffplay, "
                "play); install one or write a file with -o out.wav"
            )
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise PlayerError(f"--play: cannot start {argv[0]}: {exc}") from exc
        return cls(process, argv[0])

    async def write(self, pcm: bytes) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(pcm)
            await self._process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise await self._failure() from exc

    async def finish(self) -> None:
        """Let the player play what it has, then wait for it to exit."""
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._process.stdin.close()
        if await self._process.wait() != 0:
            raise await self._failure()

    def stop(self) -> None:
        if self._process.returncode is None:
            self._process.kill()

    async def _failure(self) -> PlayerError:
        await self._process.wait()
        stderr = b""
        if self._process.stderr is not None:
            stderr = await self._process.stderr.read(2000)
        detail = stderr.decode("utf-8", "replace").strip() or "no message"
        return PlayerError(
            f"--play: {self._name} exited with {self._process.returncode} ({detail}); "
            "is there an audio device? Use -o out.wav to write a file instead"
        )

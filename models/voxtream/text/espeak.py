"""espeak-ng's IPA for a piece of text, byte for byte what VoXtream2's reference gets.

The reference runs ``espeak-ng -q -b 1 -v en-us --ipa=1 TEXT`` once per piece (stdout and
stderr together). That is ~7 ms of process start-up per call here, too slow for a word
that must be ready within a frame; so the same library the command wraps
(``libespeak-ng``, its package's dependency) is driven in-process, making the calls that
the command's ``main`` makes: data path and synchronous output initialised, voice set by
name, a phoneme trace in IPA mode with ``_`` between phonemes (``--ipa=1``), and
``espeak_Synth`` of the UTF-8 text with the command's flags (UTF-8 input, ``[[...]]``
phoneme input allowed, end-of-text pause). The trace that the command prints goes to an
in-memory stream here. ~0.5 ms a word; the parity tests compare both paths.

The library keeps global state (one voice, one trace stream), so calls are serialised by
a process-wide lock; a call is short. Text the command would read as an option (a leading
``-``) goes through the command itself, stdin closed, so even that is what the reference
gets. Where the library is missing (but the command is on PATH), every call uses the
command.

espeak-ng, at initialisation, sets the process's ``LC_CTYPE`` to a UTF-8 locale (it
needs one for its character classes), as it does inside the command.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
import threading

VOICE = "en-us"
COMMAND = "espeak-ng"
INSTALL_HINT = "install espeak-ng (Debian/Ubuntu: apt-get install espeak-ng; `make setup`)"

_SYNCHRONOUS = 0x0001  # espeak_ng_OUTPUT_MODE ENOUTPUT_MODE_SYNCHRONOUS
_IPA = 0x02  # espeakPHONEMES_IPA
_SEPARATOR = ord("_") << 8  # --ipa=1: "_" between the phonemes of a word
_POS_CHARACTER = 1
# The command's synth flags: espeakCHARS_AUTO | espeakPHONEMES | espeakENDPAUSE, and
# -b 1 -> espeakCHARS_UTF8.
_SYNTH_FLAGS = 0x0000 | 0x0100 | 0x1000 | 0x0001

_LOCK = threading.Lock()

_AUDIO_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


class EspeakError(RuntimeError):
    """espeak-ng is missing or failed."""


def _discard_audio(_samples: int | None, _count: int, _events: int | None) -> int:
    return 0  # as `espeak-ng -q`: the audio is synthesised and dropped


class _Library:
    """libespeak-ng, initialised as the ``espeak-ng`` command initialises it."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.open_memstream.restype = ctypes.c_void_p
        libc.open_memstream.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        libc.fclose.argtypes = [ctypes.c_void_p]
        libc.free.argtypes = [ctypes.c_void_p]
        lib.espeak_ng_InitializePath.argtypes = [ctypes.c_char_p]
        lib.espeak_ng_Initialize.argtypes = [ctypes.c_void_p]
        lib.espeak_ng_InitializeOutput.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p]
        lib.espeak_SetSynthCallback.argtypes = [_AUDIO_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetPhonemeTrace.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self._lib, self._libc = lib, libc
        self._callback = _AUDIO_CALLBACK(_discard_audio)  # kept alive with the library
        lib.espeak_ng_InitializePath(None)
        context = ctypes.c_void_p()
        status = lib.espeak_ng_Initialize(ctypes.byref(context))
        if status != 0:
            raise EspeakError(f"espeak-ng failed to initialise (status {status:#x})")
        status = lib.espeak_ng_InitializeOutput(_SYNCHRONOUS, 0, None)
        if status != 0:
            raise EspeakError(f"espeak-ng output failed to initialise (status {status:#x})")
        lib.espeak_SetSynthCallback(self._callback)
        if lib.espeak_SetVoiceByName(VOICE.encode()) != 0:
            raise EspeakError(f"espeak-ng has no voice {VOICE!r}")

    def trace(self, text: bytes) -> bytes:
        """What ``espeak-ng -q -b 1 -v en-us --ipa=1 TEXT`` prints; caller holds _LOCK."""
        buffer, size = ctypes.c_void_p(), ctypes.c_size_t()
        stream = self._libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
        if not stream:
            raise EspeakError("open_memstream failed")
        try:
            self._lib.espeak_SetPhonemeTrace(_IPA | _SEPARATOR, stream)
            status = self._lib.espeak_Synth(
                text, len(text) + 1, 0, _POS_CHARACTER, 0, _SYNTH_FLAGS, None, None
            )
        finally:
            self._lib.espeak_SetPhonemeTrace(0, None)
            self._libc.fclose(stream)  # sets buffer and size
        try:
            out = ctypes.string_at(buffer.value, size.value) if buffer.value else b""
        finally:
            self._libc.free(buffer)
        if status != 0:
            raise EspeakError(f"espeak_Synth failed (status {status:#x})")
        return out


@functools.cache
def _library() -> _Library | None:
    path = ctypes.util.find_library("espeak-ng")
    return _Library(path) if path else None


def _command(text: bytes) -> bytes:
    exe = shutil.which(COMMAND)
    if exe is None:
        raise EspeakError(f"{COMMAND} not found on PATH: {INSTALL_HINT}")
    # argv[0] as the reference spells it: the command's error messages start with it
    args = [COMMAND, "-q", "-b", "1", "-v", VOICE, "--ipa=1", text]
    done = subprocess.run(
        args,
        executable=exe,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return done.stdout


def check_available() -> None:
    """Raise :class:`EspeakError` (saying how to install it) when espeak-ng is missing."""
    with _LOCK:
        if _library() is None and shutil.which(COMMAND) is None:
            raise EspeakError(f"espeak-ng not found: {INSTALL_HINT}")


def espeak_ipa(text: str, *, command: bool = False) -> bytes:
    """espeak-ng's raw output for ``text`` (lines of ``_``-separated IPA phonemes, words
    split by spaces, one line per clause). ``command``: run the ``espeak-ng`` command
    instead of the library (the reference's way; for comparison). Thread-safe."""
    if "\0" in text:
        raise ValueError("text: NUL characters are not allowed")
    data = os.fsencode(text)  # the bytes the command gets as its argument
    if command or data.startswith(b"-"):
        return _command(data)
    with _LOCK:
        library = _library()
        if library is not None:
            return library.trace(data)
    return _command(data)

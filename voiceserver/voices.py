"""Uploaded voices: cloned once, kept on disk per model, served from memory.

Layout under the voices directory (``ServerConfig.voices_dir``)::

    <model name>/<voice name>/voice.json   record + the model's meta (JSON)
    <model name>/<voice name>/arrays.npz   the model's arrays (no pickles)

A voice is written into ``<model name>/.tmp-<random>/`` and renamed into place,
so a reader (or a restart after a crash) sees the whole voice or none of it;
deleting renames it to ``.trash-<random>`` first for the same reason. Leftover
``.tmp-``/``.trash-`` folders are removed when the store opens. Every voice of
the model is loaded into memory when the store opens (they are a few KiB each),
so request handlers on the event loop never touch the disk. A voice whose files
cannot be read is kept as a broken entry: it is listed with its error, a
request naming it gets an error naming it, and DELETE removes it.

Without a directory the store keeps uploads in memory only (lost at restart).

The store is bounded twice: ``max_voices`` voices, and a total size that the
caller passes to :meth:`VoiceStore.add` (``Limits.max_voice_store_bytes``): a
voice's size is its record's JSON plus its arrays, what it takes on disk and in
memory alike; voices loaded at start count with their files' sizes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import uuid
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from models.base import ClonedVoice, ModelInputError, ModelRunner, SynthParams
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 64
_NAME = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_NAME_CHARS}}}")
_FORMAT = 1
_META_FILE = "voice.json"
_ARRAYS_FILE = "arrays.npz"
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
# Request fields that bring their own reference: with one of these, a voice name
# the server does not know is a label, not an error (as in vllm-omni's Base task).
INLINE_VOICE_KEYS = ("ref_audio", "speaker_embedding", "voice_prompt")
CLONE_INPUTS = (
    "ref_audio",
    "ref_audio_sample_rate",
    "ref_text",
    "x_vector_only",
    "speaker_embedding",
)
"""Request settings a prepared voice (``voice_prompt``) replaces."""


class VoiceExists(ModelInputError):
    """The name is taken (an uploaded or a built-in voice): HTTP 409."""


class StoreFull(ModelInputError):
    """The voices take the store's whole size already: HTTP 413."""


@dataclass(frozen=True)
class VoiceRecord:
    """What the server keeps about one upload besides the model's arrays."""

    name: str
    created_at: int
    """Unix time in seconds."""
    consent: str | None = None
    description: str | None = None
    ref_text: str | None = None
    x_vector_only: bool = False
    mime_type: str | None = None
    file_size: int = 0
    """Bytes of the uploaded audio."""


@dataclass(frozen=True)
class StoredVoice:
    record: VoiceRecord
    voice: ClonedVoice | None
    """None when the files could not be read (``error`` says why)."""
    error: str | None = None
    size: int = 0
    """Bytes the voice takes (its record's JSON and its arrays)."""


def model_dir_name(model_name: str) -> str:
    """A folder name for a model name (config names are already safe)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", model_name).lstrip(".")
    return safe or "model"


class VoiceStore:
    """The uploaded voices of one model; thread-safe, blocking on disk writes."""

    def __init__(
        self,
        model_name: str,
        builtin_voices: Iterable[str],
        root: Path | None = None,
        max_voices: int = 1000,
    ) -> None:
        self.model_name = model_name
        self.builtin = {name.lower(): name for name in builtin_voices}
        self.directory = root / model_dir_name(model_name) if root is not None else None
        self.max_voices = max_voices
        self._voices: dict[str, StoredVoice] = {}
        self._busy: set[str] = set()
        """Names being written or deleted right now (checked under ``_lock``)."""
        self._bytes = 0
        """Bytes of the stored voices and of those being written (under ``_lock``)."""
        self._lock = threading.Lock()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load()

    @property
    def persistent(self) -> bool:
        return self.directory is not None

    # -- reading -----------------------------------------------------------------

    def is_builtin(self, name: str) -> bool:
        return name.lower() in self.builtin

    def find(self, name: str) -> StoredVoice | None:
        """The uploaded voice called ``name`` (any case), or None."""
        with self._lock:
            return self._voices.get(name.lower())

    def voice(self, name: str) -> ClonedVoice | None:
        """The uploaded voice's arrays, or None when no voice has that name;
        raises ModelInputError naming the voice when its files were unreadable."""
        stored = self.find(name)
        if stored is None:
            return None
        if stored.voice is None:
            shown = stored.record.name
            raise ModelInputError(
                f"voice: the stored voice {shown!r} cannot be read ({stored.error}); delete it"
                f" (DELETE /v1/audio/voices/{shown}) and upload it again",
                param="voice",
                code=ErrorCode.INTERNAL_ERROR,
            )
        return stored.voice

    def list(self) -> list[StoredVoice]:
        with self._lock:
            return sorted(self._voices.values(), key=lambda v: v.record.name.lower())

    def names(self) -> list[str]:
        return [v.record.name for v in self.list()]

    @property
    def size(self) -> int:
        """Bytes the voices take (and those being written)."""
        with self._lock:
            return self._bytes

    def check_room(self, max_bytes: int | None) -> None:
        """StoreFull when not even a small voice fits any more (a cheap check before
        the work of cloning one)."""
        with self._lock:
            self._check_room(0, max_bytes)

    # -- writing -----------------------------------------------------------------

    def check_name(self, name: object) -> str:
        """``name`` if a new voice may take it; else ModelInputError (400) or
        VoiceExists (409), both naming ``name``."""
        if not isinstance(name, str) or not name:
            raise ModelInputError("name: required", param="name", code=ErrorCode.MISSING_FIELD)
        if not _NAME.fullmatch(name) or name.startswith("."):
            raise ModelInputError(
                f"name: {name[:80]!r} is not allowed; use 1 to {MAX_NAME_CHARS} characters of"
                " A-Z a-z 0-9 _ . - (not starting with '.')",
                param="name",
                code=ErrorCode.INVALID_FIELD,
            )
        if self.is_builtin(name):
            raise VoiceExists(
                f"name: {name!r} is a built-in voice of this model; pick another name",
                param="name",
                code=ErrorCode.INVALID_FIELD,
            )
        with self._lock:
            self._check_free(name)
        return name

    def add(
        self, record: VoiceRecord, voice: ClonedVoice, max_bytes: int | None = None
    ) -> StoredVoice:
        """Store a new voice (written to disk before it is visible); raises
        VoiceExists when the name was taken meanwhile, StoreFull when the voices
        would take more than ``max_bytes`` (None: no bound) with it."""
        name = self.check_name(record.name)
        key = name.lower()
        text = _meta_text(self.model_name, record, voice)
        arrays = _arrays_of(record.name, voice)
        size = len(text.encode("utf-8")) + sum(a.nbytes for a in arrays.values())
        with self._lock:
            self._check_free(name)
            if len(self._voices) >= self.max_voices:
                raise ModelInputError(
                    f"name: this server keeps at most {self.max_voices} uploaded voices;"
                    " delete one first",
                    param="name",
                    code=ErrorCode.INVALID_FIELD,
                )
            self._check_room(size, max_bytes)
            self._busy.add(key)
            self._bytes += size
        stored = None
        try:
            if self.directory is not None:
                self._write(record.name, text, arrays)
            stored = StoredVoice(record, voice, size=size)
            with self._lock:
                self._voices[key] = stored
            return stored
        finally:
            with self._lock:
                self._busy.discard(key)
                if stored is None:
                    self._bytes -= size

    def _check_room(self, size: int, max_bytes: int | None) -> None:
        if max_bytes is None or self._bytes + max(size, 1) <= max_bytes:
            return
        raise StoreFull(
            f"the voice store is full: its voices take {self._bytes} bytes of"
            f" max_voice_store_bytes={max_bytes}"
            + (f" and this voice needs {size}" if size else "")
            + "; delete voices you no longer use (DELETE /v1/audio/voices/{name}) to make room",
            param=None,
            code=ErrorCode.MESSAGE_TOO_BIG,
        )

    def remove(self, name: str) -> StoredVoice | None:
        """Delete an uploaded voice (from disk first); None when there is none."""
        key = name.lower()
        with self._lock:
            stored = self._voices.get(key)
            if stored is None or key in self._busy:
                return None
            self._busy.add(key)
        try:
            if self.directory is not None:
                self._delete(stored.record.name)
            with self._lock:
                del self._voices[key]
                self._bytes -= stored.size
            return stored
        finally:
            with self._lock:
                self._busy.discard(key)

    def _check_free(self, name: str) -> None:
        key = name.lower()
        if key in self._voices or key in self._busy:
            taken = self._voices[key].record.name if key in self._voices else name
            raise VoiceExists(
                f"name: a voice called {taken!r} already exists; delete it first"
                f" (DELETE /v1/audio/voices/{taken}) or pick another name",
                param="name",
                code=ErrorCode.INVALID_FIELD,
            )

    # -- disk ----------------------------------------------------------------------

    def _write(self, name: str, text: str, arrays: dict[str, np.ndarray]) -> None:
        assert self.directory is not None
        tmp = self.directory / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            with open(tmp / _ARRAYS_FILE, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            with open(tmp / _META_FILE, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            # rename() of a folder onto an existing one fails: no silent overwrite
            # (nor a case-insensitive file system's silent merge).
            os.rename(tmp, self.directory / name)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_dir(self.directory)

    def _delete(self, name: str) -> None:
        assert self.directory is not None
        path = self.directory / name
        trash = self.directory / f"{_TRASH_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return  # removed behind our back: nothing left to delete
        _fsync_dir(self.directory)
        shutil.rmtree(trash, ignore_errors=True)

    def _load(self) -> None:
        assert self.directory is not None
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.startswith((_TMP_PREFIX, _TRASH_PREFIX)):
                log.info("removing an unfinished voice write/delete: %s", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            if not path.is_dir() or not _NAME.fullmatch(name) or name.startswith("."):
                log.warning("ignoring %s: not a stored voice", path)
                continue
            if name.lower() in self._voices:
                log.warning("ignoring %s: another voice differs only in case", path)
                continue
            stored = _read_voice(path)
            if stored.error is not None:
                log.error("stored voice %r cannot be read: %s", name, stored.error)
            self._voices[name.lower()] = stored
            self._bytes += stored.size
        log.info(
            "%d uploaded voice(s) of %s loaded from %s",
            len(self._voices),
            self.model_name,
            self.directory,
        )


def _meta_text(model_name: str, record: VoiceRecord, voice: ClonedVoice) -> str:
    meta = {"format": _FORMAT, "model": model_name, "record": asdict(record), "meta": voice.meta}
    return json.dumps(meta, ensure_ascii=False, indent=1)  # a TypeError here is a model bug


def _arrays_of(name: str, voice: ClonedVoice) -> dict[str, np.ndarray]:
    arrays = {key: np.asarray(value) for key, value in voice.arrays.items()}
    for key, array in arrays.items():
        if array.dtype.hasobject:  # would need a pickle, which loading refuses
            raise ValueError(f"array {key!r} of voice {name!r} holds Python objects")
    return arrays


def _folder_bytes(path: Path) -> int:
    try:
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    except OSError:
        return 0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_voice(path: Path) -> StoredVoice:
    """One voice folder -> a StoredVoice (a broken one when anything is wrong)."""
    name = path.name
    created = int(path.stat().st_mtime)
    size = _folder_bytes(path)
    try:
        data = json.loads((path / _META_FILE).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{_META_FILE} is not format {_FORMAT}")
        record = _record_from(data.get("record"), name)
        meta = data.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"{_META_FILE}: meta is not an object")
        with open(path / _ARRAYS_FILE, "rb"):
            pass  # a missing file is reported as such, not as "not a zip file"
        if not zipfile.is_zipfile(path / _ARRAYS_FILE):
            # np.load would try it as a pickle and say so, which misleads.
            raise ValueError(f"{_ARRAYS_FILE} is not an .npz (zip) file")
        with np.load(path / _ARRAYS_FILE, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except OSError as exc:  # the file name only: clients see this text, not server paths
        where = Path(exc.filename).name if exc.filename else "voice files"
        return StoredVoice(
            VoiceRecord(name, created), None, f"{where}: {exc.strerror or exc}", size
        )
    # A damaged file can fail in many ways (zip, npy header, JSON); every one of
    # them must become a broken entry, never a failed start.
    except Exception as exc:  # noqa: BLE001
        return StoredVoice(VoiceRecord(name, created), None, f"{type(exc).__name__}: {exc}", size)
    return StoredVoice(record, ClonedVoice(arrays, meta), size=size)


def _record_from(data: Any, folder: str) -> VoiceRecord:
    if not isinstance(data, dict):
        raise ValueError(f"{_META_FILE}: record is not an object")
    known = {f.name for f in fields(VoiceRecord)}
    record = VoiceRecord(**{k: v for k, v in data.items() if k in known})
    if record.name != folder:
        raise ValueError(f"{_META_FILE} names {record.name!r}, the folder {folder!r}")
    if not isinstance(record.created_at, int):
        raise ValueError(f"{_META_FILE}: created_at is not an integer")
    return record


def resolve_voice(
    store: VoiceStore, model: ModelRunner, voice: str | None, extra: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """The (voice, extra) a request really asks for.

    A built-in name passes through; an uploaded voice's name becomes the
    model's own settings for it (its entries win over the request's); any other
    name is an ``unknown_voice`` error listing what exists, unless the request
    brings its own reference audio or embedding (then the name is a label).
    """
    if voice is None or store.is_builtin(voice):
        return voice, extra
    cloned = store.voice(voice)
    if cloned is not None:
        try:
            name, settings = model.voice_settings(cloned)
        except ModelInputError as err:
            detail = str(err).removeprefix("voice: ")
            raise ModelInputError(
                f"voice: stored voice {voice!r}: {detail}", param="voice", code=err.code
            ) from None
        return name, {**extra, **settings}
    if any(extra.get(key) is not None for key in INLINE_VOICE_KEYS):
        return voice, extra
    available = [*store.builtin.values(), *store.names()]
    raise ModelInputError(
        f"unknown voice {voice!r}; available: {', '.join(available)}",
        param="voice",
        code=ErrorCode.UNKNOWN_VOICE,
    )


def speak_as(model: ModelRunner, params: SynthParams, cloned: ClonedVoice) -> SynthParams:
    """``params`` speaking with ``cloned`` as a stored voice does: the model's own
    settings for it (``voice_settings``) take the place of the request's reference
    inputs, so nothing is decoded or encoded again."""
    try:
        name, settings = model.voice_settings(cloned)
    except ModelInputError as err:
        detail = str(err).removeprefix("voice: ")
        raise ModelInputError(f"ref_audio: {detail}", param="ref_audio", code=err.code) from None
    extra = {k: v for k, v in params.extra.items() if k not in CLONE_INPUTS}
    return replace(params, voice=name, extra={**extra, **settings})

"""``ref_audio`` given as a local path, a ``file://`` URI or an http(s) URL -> its bytes.

vllm-omni's clients send local files as a path or ``file://`` URI and remote
ones as URLs. Both are off unless the operator turns them on:

- a path or ``file://`` URI is read only inside ``MediaConfig.allowed_local_media_path``
  (``--allowed-local-media-path DIR``), after resolving symlinks and ``..``, so
  a link inside the folder cannot reach a file outside it;
- a URL is fetched only with ``--allow-url-fetch`` (``voiceserver.fetch``): http and
  https only, at most ``max_bytes``, everything (connect, redirects, headers, body)
  within one deadline of ``fetch_timeout_s``, redirects followed (up to
  ``max_redirects``) and checked like the first URL. Loopback, private, link-local,
  multicast and other non-public addresses (IPv4 ones inside IPv6 forms included:
  ``voiceserver.public_ip``) are refused unless ``--allow-private-url-fetch``; the
  check is made on every address the name resolves to before it is dialled, and on
  the peer the socket actually reached.

A fetch runs on the event loop and is cancelled with the request that awaits it;
reading a local file runs in a worker thread. Each client (``voiceserver.clients``)
may have ``Limits.max_client_media_jobs`` of these (and of the clones the batch and
upload endpoints run) at once: :class:`MediaJobs`. Every error is a ModelInputError
naming the field.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from models.base import ModelInputError
from protocol.errors import ErrorCode
from voiceserver.clients import ClientId
from voiceserver.config import MediaConfig
from voiceserver.fetch import fetch_url, field_error, is_url
from voiceserver.quotas import ClientCounts

_PATH_PREFIXES = ("./", "../", "~/")
_SHORTEST_AUDIO_B64 = 1024
"""Base64 of a second of audio is longer than this, so a shorter '/'-string is a path."""
MAX_PATH_CHARS = 4096
"""Longest path (Linux's PATH_MAX)."""


def is_local_path(value: str) -> bool:
    """A path or ``file://`` URI, as opposed to base64 audio or a data: URI."""
    if value[:7].lower() == "file://" or value.startswith(_PATH_PREFIXES):
        return True
    if not value.startswith("/"):
        return False
    if len(value) < _SHORTEST_AUDIO_B64:
        return True
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return True
    return False


def needs_loading(value: object) -> bool:
    return isinstance(value, str) and (is_url(value) or is_local_path(value))


def check_shape(value: object, field: str = "ref_audio") -> None:
    """Refuse a value no endpoint could take as reference audio, before any work:
    only a string (base64, a ``data:`` URI, a path, a URL) or an array of samples."""
    if value is None or isinstance(value, str | list):
        return
    raise field_error(
        field,
        "must be a string (base64 audio, a data: URI, a path or a URL) or an array of"
        f" samples, got {_kind(value)}",
    )


class MediaJobs:
    """What each client has running of reference-audio work, against its bound."""

    def __init__(self, policy: MediaConfig, per_client: int) -> None:
        self.policy = policy
        self.counts = ClientCounts(per_client)

    @contextlib.contextmanager
    def hold(self, client: ClientId | None, field: str = "ref_audio") -> Iterator[None]:
        """Count one job for ``client`` while the block runs; a ``rate_limited``
        ModelInputError naming ``field`` when it already holds its bound."""
        if client is not None and not self.counts.take(client):
            raise ModelInputError(
                f"{field}: this client already has {self.counts.cap} reference-audio"
                " fetches, reads or clones running (max_client_media_jobs); wait for one"
                " to finish",
                param=field,
                code=ErrorCode.RATE_LIMITED,
            )
        try:
            yield
        finally:
            if client is not None:
                self.counts.give(client)

    async def load(
        self, value: object, client: ClientId | None, accepted: bool, field: str = "ref_audio"
    ) -> object:
        """``value`` itself, or the bytes it names when it is a path, ``file://`` URI
        or URL and the model takes ``field`` at all (``accepted``)."""
        check_shape(value, field)
        if not accepted or not needs_loading(value):
            return value
        assert isinstance(value, str)
        with self.hold(client, field):
            return await load_media(value, self.policy, field)


async def load_media(value: str, policy: MediaConfig, field: str = "ref_audio") -> bytes:
    """The bytes a path, ``file://`` URI or URL names, within the policy."""
    if is_url(value):
        return await fetch_url(value, policy, field)
    path = local_path(value, policy, field)
    return await asyncio.to_thread(read_file, path, policy.max_bytes, field)


def local_path(value: str, policy: MediaConfig, field: str) -> Path:
    """The file a path or ``file://`` URI names, inside the allowed folder."""
    root = policy.allowed_local_media_path
    if root is None:
        raise field_error(
            field,
            "local files are not read by this server; send the audio as base64, or start"
            " the server with --allowed-local-media-path DIR",
            "unsupported_value",
        )
    if value[:7].lower() == "file://":
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise field_error(field, "a file:// URI must name a local file (file:///path)")
        raw = unquote(parts.path)
    else:
        raw = value
    if "\x00" in raw:
        raise field_error(field, "a path must not contain NUL characters")
    if len(raw) > MAX_PATH_CHARS:
        raise field_error(field, f"a path may hold at most {MAX_PATH_CHARS} characters")
    try:
        allowed = Path(root).expanduser().resolve(strict=True)
        path = Path(raw).expanduser().resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        raise field_error(field, "no such file in the allowed media folder") from None
    if not path.is_relative_to(allowed):
        raise field_error(
            field,
            "the file is outside the allowed media folder (symlinks are followed before"
            " this check); put it under the folder given with --allowed-local-media-path",
            "unsupported_value",
        )
    if not path.is_file():
        raise field_error(field, "no such file in the allowed media folder")
    return path


def read_file(path: Path, max_bytes: int, field: str) -> bytes:
    """A file's bytes, at most ``max_bytes`` (blocking)."""
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError:
        raise field_error(field, "the file in the allowed media folder cannot be read") from None
    if len(data) > max_bytes:
        raise field_error(field, f"the file is larger than {max_bytes} bytes")
    return data


def _kind(value: object) -> str:
    names = {dict: "an object", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)

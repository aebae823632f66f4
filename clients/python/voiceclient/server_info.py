"""What a server offers, over plain HTTP (stdlib only): GET /v1/models and /health."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One entry of ``GET /v1/models``."""

    id: str
    family: str | None
    sample_rate: int | None
    voices: tuple[str, ...]
    languages: tuple[str, ...]


def http_base(url: str) -> str:
    """``ws://host:port/any/path?q`` -> ``http://host:port`` (wss -> https)."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "", "", ""))


def get_json(url: str, api_key: str | None = None, timeout: float = 5.0) -> Any:
    """GET a JSON document; raises OSError (URLError, HTTPError) or ValueError."""
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def list_models(ws_url: str, api_key: str | None = None, timeout: float = 5.0) -> list[ModelInfo]:
    """The models of the server behind a WebSocket URL."""
    data = get_json(f"{http_base(ws_url)}/v1/models", api_key, timeout)
    return [
        ModelInfo(
            id=str(entry["id"]),
            family=entry.get("family"),
            sample_rate=entry.get("sample_rate"),
            voices=tuple(entry.get("voices") or ()),
            languages=tuple(entry.get("languages") or ()),
        )
        for entry in data.get("data", [])
    ]


def native_sample_rate(
    ws_url: str, allowed: tuple[int, ...], api_key: str | None = None
) -> int | None:
    """The first model's own sample rate when it is one of ``allowed``; None when the
    server cannot be asked or the rate is not allowed."""
    try:
        models = list_models(ws_url, api_key)
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    if models and models[0].sample_rate in allowed:
        return models[0].sample_rate
    return None

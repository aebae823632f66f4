from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serving import RunningServer, run_server
from voiceserver.config import ServerConfig, load_model_config


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig()) as server:
        yield server

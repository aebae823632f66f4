from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serving import RunningServer, run_server
from voiceserver.config import Limits, ServerConfig, load_model_config

TEST_LIMITS = Limits(max_contexts=4, max_text_chars=2000, max_message_bytes=64 * 1024)


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[RunningServer]:
    with run_server(load_model_config("tiny"), ServerConfig(limits=TEST_LIMITS)) as server:
        yield server

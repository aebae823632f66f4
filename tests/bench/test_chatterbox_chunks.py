"""bench.chatterbox_chunks: chunked flow decoding against the whole clause."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import chatterbox_chunks
from tests.models.chatterbox.ckpt_full import build_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("chunks") / "turbo", seed=2)


def test_one_chunk_is_the_whole_clause_and_smaller_ones_differ(checkpoint: Path) -> None:
    report = chatterbox_chunks.main(
        ["--model", str(checkpoint), "--tokens", "10", "--first", "2", "10", "--lookahead", "3"]
    )
    rows = {row["first_chunk_tokens"]: row for row in report["levels"]}
    # A first chunk holding the whole clause is the whole-clause decode, exactly.
    assert math.isinf(rows[10]["mel_snr_db"]) and math.isinf(rows[10]["audio_snr_db"])
    # Chunks that see only part of the clause differ (the flow attends over all of it).
    assert 0 < rows[2]["mel_snr_db"] < 60


def test_chunks_cover_the_clause_doubling() -> None:
    assert chatterbox_chunks.chunks(20, 2, 8) == [(0, 2), (2, 6), (6, 14), (14, 20)]

"""The numbers the load generator reports, on inputs with known answers."""

from __future__ import annotations

import re

import pytest

from bench.measure import Arrival, RequestResult, count_underruns
from bench.stats import summarize
from bench.texts import FIRST_CLAUSE_WORDS, SENTENCES, word_pieces


def test_no_underrun_when_every_chunk_is_in_time() -> None:
    arrivals = [Arrival(10.0, 0.5), Arrival(10.2, 0.5), Arrival(10.9, 0.5), Arrival(11.5, 0.1)]
    assert count_underruns(arrivals).count == 0
    assert count_underruns(arrivals).stall_ms == 0


def test_late_chunk_stalls_and_moves_later_deadlines() -> None:
    # Playout: 0.0-0.5, chunk 2 due at 0.5 arrives at 0.8 (300 ms stall), plays 0.8-1.3;
    # chunk 3 arriving at 1.2 is in time only because the stall moved its deadline.
    arrivals = [Arrival(0.0, 0.5), Arrival(0.8, 0.5), Arrival(1.2, 0.5), Arrival(2.0, 0.2)]
    under = count_underruns(arrivals)
    assert under.count == 2  # chunk 2 and chunk 4 (due 1.8, came 2.0)
    assert under.stall_ms == pytest.approx(500.0)


def test_empty_chunks_do_not_play_or_count() -> None:
    assert count_underruns([]).count == 0
    assert count_underruns([Arrival(0.0, 0.1), Arrival(5.0, 0.0)]).count == 0


def test_request_result_ttfa_and_rtf() -> None:
    result = RequestResult(
        index=0,
        concurrency=1,
        words=20,
        chars=100,
        started_at=100.0,
        flush_at=100.5,
        first_audio_at=100.62,
        last_audio_at=102.0,
        audio_s=4.0,
        chunks=5,
        underruns=0,
        stall_ms=0.0,
    )
    assert result.ok
    assert result.ttfa_ms == pytest.approx(120.0)
    assert result.rtf == pytest.approx(0.5)
    as_json = result.to_json(origin=100.0)
    assert as_json["flush_at"] == pytest.approx(0.5) and as_json["rtf"] == pytest.approx(0.5)


def test_summarize_percentiles() -> None:
    stats = summarize([float(v) for v in range(1, 101)])
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["p95"] == pytest.approx(95.05)
    assert stats["p99"] == pytest.approx(99.01)
    assert stats["mean"] == pytest.approx(50.5)
    assert (stats["min"], stats["max"]) == (1.0, 100.0)
    assert summarize([]) == dict.fromkeys(("p50", "p95", "p99", "mean", "min", "max"))


@pytest.mark.parametrize("sentence", SENTENCES)
def test_first_clause_is_ten_words_ending_in_a_comma(sentence: str) -> None:
    pieces = word_pieces(sentence)
    assert "".join(pieces) == sentence
    clause = pieces[:FIRST_CLAUSE_WORDS]
    assert clause[-1].rstrip().endswith(",")
    # No mark the segmenter could cut at before the flush.
    assert not re.search(r"[,;:.!?\u2014\u2013]", "".join(clause).rstrip()[:-1])
    assert len(pieces) >= FIRST_CLAUSE_WORDS + 8

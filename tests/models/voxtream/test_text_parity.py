"""VoXtream2's text front end equals the reference's (voxtream 0.2.5 in .venv-ref-voxtream):
normalised text, phonemes, phone ids, punctuation positions and word spans, for whole
texts and streamed pieces, and espeak-ng's output through the library against the
command the reference runs."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.voxtream.text import IncrementalText, PhoneTokens, TextTokens, VoxtreamText
from models.voxtream.text.espeak import espeak_ipa
from tests.models.reference_env import outputs, run_script
from tests.models.voxtream.text_corpus import PIECES, RAW_ESPEAK, RAW_PHONEMIZE, SENTENCES

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = REPO / ".venv-ref-voxtream" / "bin" / "python"
SCRIPT = REPO / "tools" / "ref" / "voxtream" / "ref_text.py"
SETUP = "tools/ref/voxtream/make_venv.sh"

PUNCT_IDS = {".": 117, ",": 118, "?": 119, "!": 121, "unk": 122}
SPAN_LIMITS = {0: 7, 3: 5, 30: 12}
"""Sentence index -> max_phone_tokens for extra span runs (the metadata's cut-off)."""


def corpus_table() -> dict[str, int]:
    """Phone ids as the checkpoint's table gives them: the phones espeak-ng makes of the
    corpus, ids 0.. in sorted order, every sixth left out (read as ``unk``), plus the
    reference's punctuation and ``unk`` ids."""
    probe = VoxtreamText(PUNCT_IDS)
    phones: set[str] = set()
    for text in SENTENCES:
        phones.update(probe.encode(text).tokens.phones)
        for word in text.split():
            phones.update(probe.encode_piece(word).tokens.phones)
    for piece in PIECES:
        phones.update(probe.encode_piece(piece).tokens.phones)
    ids = {p: i for i, p in enumerate(sorted(phones)) if i % 6 != 5}
    return {**ids, **PUNCT_IDS}


def ref_tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for i, text in enumerate(SENTENCES):
        tasks.append({"kind": "whole", "id": f"whole{i}", "text": text})
        tasks.append({"kind": "stream", "id": f"stream{i}", "text": text})
    for i, limit in SPAN_LIMITS.items():
        tasks.append({"kind": "whole", "id": f"cut{i}", "text": SENTENCES[i], "max_phones": limit})
    for i, text in enumerate(SENTENCES[:20]):
        tasks.append({"kind": "whole", "id": f"raw{i}", "text": text, "normalize": False})
    for i, text in enumerate(PIECES):
        tasks.append({"kind": "piece", "id": f"piece{i}", "text": text})
    for i, text in enumerate(RAW_PHONEMIZE):
        tasks.append({"kind": "phonemize", "id": f"phon{i}", "text": text})
    for i, text in enumerate(RAW_ESPEAK):
        tasks.append({"kind": "espeak", "id": f"espeak{i}", "text": text})
    return tasks


@pytest.fixture(scope="module")
def table() -> dict[str, int]:
    return corpus_table()


@pytest.fixture(scope="module")
def frontend(table: dict[str, int]) -> VoxtreamText:
    return VoxtreamText(table)


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory, table: dict[str, int]) -> dict[str, Any]:
    ckpt = tmp_path_factory.mktemp("voxtream_ckpt")
    (ckpt / "phoneme_to_token.json").write_text(json.dumps(table, ensure_ascii=False))
    out = tmp_path_factory.mktemp("voxtream_ref_text")
    report = run_script(REF_PYTHON, SCRIPT, ckpt, {"tasks": ref_tasks()}, out, SETUP)
    found = outputs(report, out)
    failed = {k: v for k, v in found.items() if k.endswith(".error")}
    assert not failed, f"the reference failed on corpus text: {failed}"
    return found


def assert_tokens(ours: PhoneTokens, ref: dict[str, Any], prefix: str, what: str) -> None:
    assert list(ours.phones) == ref[f"{prefix}.phones"], what
    np.testing.assert_array_equal(ours.ids, np.array(ref[f"{prefix}.ids"], np.int64), what)
    np.testing.assert_array_equal(ours.punct_insert, ref[f"{prefix}.punct_ins"], what)
    np.testing.assert_array_equal(ours.punct_delete, ref[f"{prefix}.punct_del"], what)
    np.testing.assert_array_equal(ours.punct_ids, ref[f"{prefix}.punct_ids"], what)
    for array in (ours.ids, ours.punct_insert, ours.punct_delete, ours.punct_ids):
        assert array.dtype == np.int64


def piece_dict(encoded: TextTokens) -> dict[str, Any]:
    t = encoded.tokens
    return {
        "p.normalized": encoded.normalized,
        "p.ids": t.ids.tolist(),
        "p.punct_ins": t.punct_insert.tolist(),
        "p.punct_del": t.punct_delete.tolist(),
        "p.punct_ids": t.punct_ids.tolist(),
        "p.phones": list(t.phones),
    }


def ref_piece(piece: dict[str, Any]) -> dict[str, Any]:
    return {f"p.{k}": v for k, v in piece.items() if k != "text"}


def test_whole_text_equals_the_reference(frontend: VoxtreamText, ref: dict[str, Any]) -> None:
    unknown = frontend.table.unknown
    saw_unknown = saw_punct = False
    for i, text in enumerate(SENTENCES):
        ours = frontend.encode(text)
        assert ours.normalized == ref[f"whole{i}.normalized"], text
        assert ours.phonemes == ref[f"whole{i}.phonemes"], text
        assert_tokens(ours.tokens, ref, f"whole{i}", text)
        spans = [[s.text, s.start, s.end] for s in ours.spans]
        assert spans == ref[f"whole{i}.spans"], text
        saw_unknown |= bool((ours.tokens.ids == unknown).any())
        saw_punct |= len(ours.tokens.punct_ids) > 0
    assert saw_unknown and saw_punct  # the corpus exercises both


def test_unnormalized_text_equals_the_reference(
    frontend: VoxtreamText, ref: dict[str, Any]
) -> None:
    for i, text in enumerate(SENTENCES[:20]):
        ours = frontend.encode(text, normalize=False)
        assert ours.phonemes == ref[f"raw{i}.phonemes"], text
        assert_tokens(ours.tokens, ref, f"raw{i}", text)
        assert [[s.text, s.start, s.end] for s in ours.spans] == ref[f"raw{i}.spans"], text


def test_span_cut_off_equals_the_reference(frontend: VoxtreamText, ref: dict[str, Any]) -> None:
    for i, limit in SPAN_LIMITS.items():
        ours = frontend.encode(SENTENCES[i], max_phones=limit)
        assert [[s.text, s.start, s.end] for s in ours.spans] == ref[f"cut{i}.spans"]
        assert ours.spans[-1].end <= limit


def test_streamed_pieces_equal_the_reference(frontend: VoxtreamText, ref: dict[str, Any]) -> None:
    for i, piece in enumerate(PIECES):
        ours = frontend.encode_piece(piece)
        assert ours.normalized == ref[f"piece{i}.normalized"], piece
        assert_tokens(ours.tokens, ref, f"piece{i}", piece)


def test_any_split_of_a_stream_gives_the_reference_pieces(
    frontend: VoxtreamText, ref: dict[str, Any]
) -> None:
    """However the client cuts the text into deltas (LLM tokens that split words, one
    character at a time, all at once), the released words are the reference
    ``text_generator``'s and each one's tokens are the reference's for that word."""
    rng = random.Random(25)
    for i, text in enumerate(SENTENCES):
        expected = ref[f"stream{i}.pieces"]
        for attempt in range(3):
            if attempt == 0:
                deltas = list(text)
            elif attempt == 1:
                deltas = [text]
            else:
                cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), 6)))
                deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
            stream = IncrementalText(frontend)
            pieces = [p for d in deltas for p in stream.push(d)] + stream.flush()
            assert [p.text for p in pieces] == [r["text"] for r in expected], (text, deltas)
            for piece, want in zip(pieces, expected, strict=True):
                assert text[piece.char_start : piece.char_end] == piece.text
                assert piece_dict(piece.encoded) == ref_piece(want), (text, piece.text)
            joined = PhoneTokens.concat([p.encoded.tokens for p in pieces])
            assert joined.ids.tolist() == [x for r in expected for x in r["ids"]]


def test_phonemizer_cut_and_paste_equals_the_reference(
    frontend: VoxtreamText, ref: dict[str, Any]
) -> None:
    for i, text in enumerate(RAW_PHONEMIZE):
        assert frontend.phonemize(text) == ref[f"phon{i}.phonemes"], text


def test_espeak_library_prints_what_the_command_prints(ref: dict[str, Any]) -> None:
    """The in-process library path gives the command's output byte for byte (the command
    is what the reference runs), also for text the command reads as options."""
    for i, text in enumerate(RAW_ESPEAK):
        expected = "".join(ref[f"espeak{i}.lines"]).encode()
        assert espeak_ipa(text) == expected, text
        assert espeak_ipa(text, command=True) == expected, text

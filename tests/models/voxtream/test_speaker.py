"""VoXtream's speaker encoder from a ReDimNet ``.pt`` file in IDRnD's format: the file
is read weights-only and strictly (a missing, unexpected or misshapen tensor, a
config the network cannot run, a file of another kind are errors naming what is
wrong), the network is the one its ``model_config`` describes and uses the file's
own front-end buffers, and ``embed`` gives a unit-length float32 [192] that is
deterministic, tells clips apart, ignores the clip's gain (the features are
normalised over time), and stays close in bfloat16 (front end and ``bn`` kept in
float32, as the reference keeps them).

The network itself equals IDRnD's ``ReDimNetWrap`` (checked outside CI, where their
code can be fetched: see the report of issue 25); CI checks its front end against
torchaudio (test_speaker_features.py) and everything else here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from models.blocks.redimnet import ReDimNet, ReDimNetConfig
from models.checkpoint import CheckpointError
from models.voxtream.speaker import (
    EMBED_DIM,
    SpeakerEncoder,
    build_speaker_encoder,
    load_speaker_encoder,
    normalize_embedding,
    read_redimnet_file,
)
from tests.models.chatterbox.ckpt_campplus import speechlike
from tests.models.voxtream.ckpt_redimnet import TINY, redimnet_state, write_redimnet


class NotAWeight:
    """An object a weights-only load must refuse (pickled by reference to this class)."""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_redimnet(tmp_path_factory.mktemp("redimnet") / "M-vb2+vox2+cnc-ft_mix.pt", seed=3)


@pytest.fixture(scope="module")
def encoder(ckpt: Path) -> SpeakerEncoder:
    return load_speaker_encoder(ckpt)


@pytest.fixture(scope="module")
def clips() -> dict[str, np.ndarray]:
    return {name: speechlike(2.0 + i * 0.7, 40 + i, 16_000) for i, name in enumerate("abc")}


def test_the_file_holds_the_release_format(ckpt: Path) -> None:
    raw = torch.load(ckpt, weights_only=True)
    assert sorted(raw) == ["model_config", "state_dict"]
    config, state = read_redimnet_file(ckpt)
    assert config == raw["model_config"] and config["stages_setup"][0] == (1, 1, 1, [(3, 3)], 4)
    assert "spec.torchfbank.2.mel_scale.fb" in state and "bn.num_batches_tracked" in state
    assert ReDimNetConfig.from_model_config(config) == TINY


def test_embed_gives_a_unit_float32_embedding(
    encoder: SpeakerEncoder, clips: dict[str, np.ndarray]
) -> None:
    for wav in clips.values():
        embedding = encoder.embed(wav)
        assert embedding.shape == (EMBED_DIM,) and embedding.dtype == np.float32
        assert np.isfinite(embedding).all()
        assert abs(float(np.linalg.norm(embedding)) - 1.0) < 1e-6
    a = encoder.embed(clips["a"])
    assert np.array_equal(a, encoder.embed(clips["a"].copy()))  # deterministic
    assert np.array_equal(a, encoder.embed(torch.from_numpy(clips["a"])))  # tensor in
    assert float(a @ encoder.embed(clips["c"])) < 0.999  # other clips, other embeddings


def test_embed_ignores_the_clips_gain(
    encoder: SpeakerEncoder, clips: dict[str, np.ndarray]
) -> None:
    a = encoder.embed(clips["b"])
    # Only the clip's pause (log floor) and rounding see the gain.
    assert float(a @ encoder.embed(clips["b"] * 0.5)) > 0.999


def test_the_network_matches_the_config_at_real_size() -> None:
    cfg = ReDimNetConfig()  # ReDimNetWrap's defaults: its M setup
    net = ReDimNet(cfg).eval()
    assert sum(p.numel() for p in net.parameters()) > 4_000_000
    state = net.state_dict()
    assert tuple(state["backbone.fin_wght1d.w"].shape) == (1, 7, 72 * 16, 1)
    assert tuple(state["linear.weight"].shape) == (192, 2 * 72 * 16)
    encoder = build_speaker_encoder(cfg.model_config(), state)
    assert encoder.embed(speechlike(1.0, 1, 16_000)).shape == (192,)


def test_the_files_front_end_buffers_are_the_ones_used(
    ckpt: Path, encoder: SpeakerEncoder, clips: dict[str, np.ndarray]
) -> None:
    config, state = read_redimnet_file(ckpt)
    fb = state["spec.torchfbank.2.mel_scale.fb"]
    state["spec.torchfbank.2.mel_scale.fb"] = fb.flip(1)  # the bins in reverse order
    flipped = build_speaker_encoder(config, state)
    assert float(encoder.embed(clips["a"]) @ flipped.embed(clips["a"])) < 0.999


def test_bfloat16_keeps_the_front_end_and_bn_in_float32(
    ckpt: Path, encoder: SpeakerEncoder, clips: dict[str, np.ndarray]
) -> None:
    half = load_speaker_encoder(ckpt, dtype=torch.bfloat16)
    net = half.net
    assert net.linear.weight.dtype == torch.bfloat16
    assert net.backbone.stem[0].weight.dtype == torch.bfloat16
    assert net.bn.weight.dtype == net.bn.running_var.dtype == torch.float32
    assert all(b.dtype == torch.float32 for b in net.spec.buffers())
    embedding = half.embed(clips["a"])
    assert embedding.dtype == np.float32 and abs(float(np.linalg.norm(embedding)) - 1) < 1e-2
    assert float(embedding @ encoder.embed(clips["a"])) > 0.99


def test_normalisation_is_over_the_whole_tensor() -> None:
    x = torch.tensor([[3.0, 4.0], [0.0, 12.0]])
    assert torch.allclose(normalize_embedding(x), x / 13.0)
    half = normalize_embedding(torch.tensor([[0.6, 0.8]], dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16


def test_a_clip_too_short_or_not_finite_is_refused(encoder: SpeakerEncoder) -> None:
    with pytest.raises(ValueError, match="too short"):
        encoder.embed(np.zeros(100, dtype=np.float32))
    wav = speechlike(1.0, 2, 16_000)
    wav[10] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        encoder.embed(wav)


# -- files that are not a ReDimNet encoder -------------------------------------------


def _write(path: Path, data: Any) -> Path:
    torch.save(data, path)
    return path


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"nothere\.pt.*speaker encoder file missing"):
        load_speaker_encoder(tmp_path / "nothere.pt")


def test_a_file_of_another_kind_is_refused(tmp_path: Path, ckpt: Path) -> None:
    text = tmp_path / "text.pt"
    text.write_text("this is not a checkpoint\n")
    with pytest.raises(CheckpointError, match=r"text\.pt: not a"):
        load_speaker_encoder(text)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\xff\x00" + bytes(range(256)))
    with pytest.raises(CheckpointError, match=r"garbage\.pt: not a readable torch file"):
        load_speaker_encoder(garbage)
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(ckpt.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"cut\.pt: not a"):
        load_speaker_encoder(truncated)
    state = redimnet_state(TINY, 0)
    with pytest.raises(
        CheckpointError, match="expected a dict with 'model_config' and 'state_dict'"
    ):
        load_speaker_encoder(_write(tmp_path / "bare.pt", state))
    with pytest.raises(CheckpointError, match="'state_dict' is not a dict of named tensors"):
        load_speaker_encoder(
            _write(tmp_path / "list.pt", {"model_config": TINY.model_config(), "state_dict": [1]})
        )


def test_objects_other_than_weights_are_refused_not_run(tmp_path: Path) -> None:
    data = {"model_config": TINY.model_config(), "state_dict": redimnet_state(TINY, 0)}
    data["extra"] = NotAWeight()
    with pytest.raises(
        CheckpointError, match=r"objects other than tensors and plain values \(.*NotAWeight\)"
    ):
        load_speaker_encoder(_write(tmp_path / "pickled.pt", data))


def test_missing_unexpected_and_misshapen_tensors_are_named(tmp_path: Path) -> None:
    config = TINY.model_config()
    state = redimnet_state(TINY, 0)

    missing = dict(state)
    del missing["backbone.stage2.4.1.running_var"]
    del missing["pool.linear1.weight"]
    with pytest.raises(
        CheckpointError, match=r"2 missing tensors 'backbone\.stage2.*pool\.linear1"
    ):
        build_speaker_encoder(config, missing, file="m.pt")

    extra = dict(state)
    extra["cls_head.2.weight"] = torch.zeros(10, 192)
    with pytest.raises(
        CheckpointError, match=r"m\.pt: .*1 unexpected tensor 'cls_head\.2\.weight'"
    ):
        build_speaker_encoder(config, extra, file="m.pt")

    wrong = dict(state)
    wrong["linear.weight"] = torch.zeros(192, 10)
    with pytest.raises(CheckpointError, match=r"wrong shape: 'linear\.weight' is \(192, 10\)"):
        build_speaker_encoder(config, wrong)

    other = dataclasses.replace(TINY, channels=8)  # a file of another size
    with pytest.raises(CheckpointError, match="wrong shape"):
        build_speaker_encoder(other.model_config(), state)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_classes": 5994}, "num_classes"),
        ({"feat_type": "tf"}, "feat_type"),
        ({"pooling_func": "MQMHASTP"}, "pooling_func"),
        ({"tf_optimized_arch": True}, "tf_optimized_arch"),
        ({"block_2d_type": "bogus"}, "block_2d_type"),
        ({"not_a_setting": 1}, "not_a_setting"),
        ({"C": 0}, "'C'"),
        ({"stages_setup": [(5, 1, 1, [(3, 3)], None)]}, r"stages_setup\[0\]"),
        ({"stages_setup": [(3, 1, 1, [(3, 3)], None), (3, 1, 1, [(3, 3)], None)]}, "divide"),
        ({"spec_params": {"spec_norm": "pcen"}}, "spec_norm"),
        ({"spec_params": {"n_mels": 80}}, "n_mels"),
        ({"embed_dim": 256}, "embed_dim"),
    ],
)
def test_configs_the_network_cannot_run_are_named(change: dict[str, Any], named: str) -> None:
    config = {**TINY.model_config(), **change}
    with pytest.raises(CheckpointError, match=named):
        build_speaker_encoder(config, redimnet_state(TINY, 0), file="x.pt")


def test_another_embedding_width_loads_when_asked_for() -> None:
    cfg = dataclasses.replace(TINY, embed_dim=64)
    encoder = build_speaker_encoder(cfg.model_config(), redimnet_state(cfg, 1), embed_dim=64)
    assert encoder.embed(speechlike(1.0, 3, 16_000)).shape == (64,)

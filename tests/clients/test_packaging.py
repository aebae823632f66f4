"""The Python client as a user installs it: `pip wheel ./clients/python`, then that wheel
in a fresh virtual environment holding nothing of this checkout.

The environments get their third-party packages from .venv by symlink (no network, no
downloads), and only those the wheel declares (its Requires-Dist, followed through each
package's own requirements): an import the wheel does not declare fails here as it would
for a user. The wheel is built from a copy of clients/python and protocol/ laid out as in
the repository (linked/protocol stays a symlink), so the build follows the symlink the way
it does in the checkout, and no stale build/ folder of the checkout leaks in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import wave
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.serving import RunningServer

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "python"
PLUGINS = {"voiceclient.livekit_tts": "livekit", "voiceclient.pipecat_tts": "pipecat"}
SKIP_COPY = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc")
TEXT = "Hello from the wheel."
JS = REPO / "clients" / "js"
SERVED_SDK = REPO / "voiceserver" / "web" / "sdk" / "voiceserver.js"
NODE = shutil.which("node")


@dataclass(frozen=True)
class Wheel:
    path: Path
    names: list[str]
    meta: dict[str, list[str]]

    @property
    def modules(self) -> list[str]:
        return sorted(
            n[:-3].replace("/", ".").removesuffix(".__init__")
            for n in self.names
            if n.endswith(".py")
        )

    def requires(self, extra: str | None = None) -> list[str]:
        """Requirement strings for the base install, or those an extra adds."""
        out = []
        for spec in self.meta.get("Requires-Dist", []):
            marker = Requirement(spec).marker
            wanted = marker is None if extra is None else marker == Marker(f'extra == "{extra}"')
            if wanted:
                out.append(spec)
        return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    root = tmp_path_factory.mktemp("src")
    shutil.copytree(CLIENT, root / "clients" / "python", symlinks=True, ignore=SKIP_COPY)
    shutil.copytree(REPO / "protocol", root / "protocol", ignore=SKIP_COPY)
    assert (root / "clients" / "python" / "linked" / "protocol").is_symlink()
    out = tmp_path_factory.mktemp("wheel")
    isolation = ["--no-build-isolation"] if build_requirements_installed() else []
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation]
        + ["-w", str(out), str(root / "clients" / "python")],
        cwd=root,
    )
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = HeaderParser().parsestr(zf.read(meta_name).decode())
    meta = {key: headers.get_all(key) or [] for key in set(headers.keys())}
    return Wheel(path, names, meta)


def build_requirements_installed() -> bool:
    """Whether .venv has the client's build backend, so the wheel builds offline; otherwise
    pip fetches it from the package index into an isolated build environment."""
    with open(CLIENT / "pyproject.toml", "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    for spec in requires:
        req = Requirement(spec)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(version, prereleases=True):
            return False
    return True


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def dependency_closure(
    requirements: Iterable[str], extras: Iterable[str] = ()
) -> dict[str, metadata.Distribution]:
    """The installed distributions that installing with these requirements and extras pulls
    in, recursively, markers evaluated as pip does."""
    found: dict[str, metadata.Distribution] = {}
    extras_seen: dict[str, set[str]] = {}
    todo = [(Requirement(spec), e) for spec in requirements for e in ("", *extras)]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(req.name)
        dist = found.get(key) or metadata.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        new = {""} | set(req.extras)
        if key in found and new <= extras_seen[key]:
            continue
        found[key] = dist
        extras_seen.setdefault(key, set()).update(new)
        todo.extend((Requirement(spec), e) for spec in dist.requires or [] for e in new)
    return found


def top_level_entries(dist: metadata.Distribution) -> set[Path]:
    """What a distribution put at the top of site-packages (packages, modules, dist-info)."""
    files = dist.files
    assert files, f"{dist.metadata['Name']} has no RECORD: cannot tell what it installed"
    entries = set()
    for f in files:
        first = f.parts[0]
        if first in ("..", "__pycache__") or first.endswith(".pyc"):
            continue
        entries.add(Path(dist.locate_file(first)))
    return entries


def make_env(root: Path, wheel: Wheel, extras: Iterable[str] = ()) -> Path:
    """A fresh venv with the wheel installed and its declared dependencies linked in."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    env_python = root / "bin" / "python"
    site = Path(
        run(
            [str(env_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root
        ).strip()
    )
    for dist in dependency_closure(wheel.meta.get("Requires-Dist", []), extras).values():
        for entry in top_level_entries(dist):
            link = site / entry.name
            if not link.exists():
                link.symlink_to(entry)
    run(
        [sys.executable, "-m", "pip", "--python", str(env_python), "install", "-q", "--no-deps"]
        + ["--no-index", str(wheel.path)],
        cwd=root,
    )
    return root


def clean_env() -> dict[str, str]:
    """The test's environment without anything that would put this checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.fixture(scope="module")
def core_env(wheel: Wheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_env(tmp_path_factory.mktemp("core") / "venv", wheel)


def test_wheel_holds_voiceclient_and_protocol_and_declares_dependencies(wheel: Wheel) -> None:
    with open(CLIENT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    top = {name.split("/")[0] for name in wheel.names}
    assert top == {"voiceclient", "protocol", f"voiceserver_client-{version}.dist-info"}
    source = {
        f"{pkg}.{p.stem}".removesuffix(".__init__")
        for pkg, folder in (
            ("voiceclient", CLIENT / "voiceclient"),
            ("protocol", REPO / "protocol"),
        )
        for p in folder.glob("*.py")
    }
    assert source <= set(wheel.modules)
    assert wheel.meta["Name"] == ["voiceserver-client"]
    assert {Requirement(r).name for r in wheel.requires()} == {"websockets", "msgspec"}
    assert {Requirement(r).name for r in wheel.requires("livekit")} == {"livekit-agents"}
    assert {Requirement(r).name for r in wheel.requires("pipecat")} == {"pipecat-ai", "loguru"}
    with zipfile.ZipFile(wheel.path) as zf:
        (entry_points,) = [n for n in wheel.names if n.endswith(".dist-info/entry_points.txt")]
        scripts = zf.read(entry_points).decode()
    assert "voiceclient-say = voiceclient.say:main" in scripts
    assert "voiceclient-bridge = voiceclient.bridge:main" in scripts


def test_installed_client_imports_from_its_own_environment(
    wheel: Wheel, core_env: Path, tmp_path: Path
) -> None:
    core = [m for m in wheel.modules if m not in PLUGINS]
    script = (
        "import importlib, sys\n"
        f"for name in {core!r}:\n"
        "    print(name, importlib.import_module(name).__file__)\n"
        "for name in ('voiceserver', 'models', 'livekit', 'pipecat'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    sys.exit(f'{name} is importable: the environment is not isolated')\n"
    )
    out = run([str(core_env / "bin" / "python"), "-c", script], cwd=tmp_path, env=clean_env())
    files = dict(line.split(" ", 1) for line in out.splitlines())
    assert sorted(files) == core
    site = (core_env / "lib").resolve()
    assert all(Path(f).resolve().is_relative_to(site) for f in files.values()), files


def test_installed_say_speaks_through_a_real_server(
    core_env: Path, tiny_server: RunningServer, tmp_path: Path
) -> None:
    out = tmp_path / "hello.wav"
    cmd = [str(core_env / "bin" / "voiceclient-say"), TEXT, "-o", str(out)]
    printed = run(cmd + ["--url", tiny_server.ws, "--sample-rate", "24000"], tmp_path, clean_env())
    assert printed.startswith(f"{out}: ")
    with wave.open(str(out), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        frames = w.getnframes()
    # The tiny model speaks one 20 ms frame per byte of text and 3 tail frames.
    assert frames == (len(TEXT.encode()) + 3) * 480


@pytest.mark.parametrize("module", sorted(PLUGINS))
def test_each_plugin_imports_with_its_extra_alone(
    module: str, wheel: Wheel, tmp_path: Path
) -> None:
    env_root = make_env(tmp_path / "venv", wheel, extras=[PLUGINS[module]])
    other = next(m for m in PLUGINS if m != module)
    script = (
        "import importlib\n"
        f"mod = importlib.import_module({module!r})\n"
        "print(mod.__file__)\n"
        "try:\n"
        f"    importlib.import_module({other!r})\n"
        "except ImportError:\n"
        "    print('other plugin: not importable')\n"
    )
    out = run([str(env_root / "bin" / "python"), "-c", script], cwd=tmp_path, env=clean_env())
    lines = out.splitlines()
    assert Path(lines[0]).resolve().is_relative_to((env_root / "lib").resolve())
    assert lines[-1] == "other plugin: not importable"


def readme_code(path: Path, first_line: str) -> str:
    """The fenced code block of a README that starts with ``first_line``."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", path.read_text(), flags=re.S | re.M)
    (code,) = [b for b in blocks if b.startswith(first_line)]
    return code


# `make test` installs node; a bare pytest without it skips, except in CI.
@pytest.mark.skipif(
    not os.environ.get("CI") and NODE is None, reason="needs node (make test installs it)"
)
def test_js_package_runs_the_readme_node_example_against_a_real_server(
    tiny_server: RunningServer, tmp_path: Path
) -> None:
    assert NODE is not None
    # The package as npm lays it out: its manifest, and the module `npm run build` writes
    # (the same bytes as the served copy: `npm run check` fails when they differ).
    package = tmp_path / "node_modules" / json.loads((JS / "package.json").read_text())["name"]
    (package / "dist").mkdir(parents=True)
    shutil.copy(JS / "package.json", package)
    shutil.copy(SERVED_SDK, package / "dist" / "voiceserver.js")
    (tmp_path / "speak.mjs").write_text(readme_code(JS / "README.md", "// speak.mjs"))
    has_websocket = run([NODE, "-p", "typeof WebSocket"], tmp_path).strip() == "function"
    flags = [] if has_websocket else ["--experimental-websocket"]
    env = clean_env() | {"VOICESERVER_URL": f"ws://{tiny_server.host}:{tiny_server.port}"}
    audio_ms = (len(TEXT.encode()) + 3) * 20
    printed = run([NODE, *flags, "speak.mjs", TEXT, "hello.wav"], tmp_path, env)
    assert printed == f"hello.wav: {audio_ms} ms of audio\n"
    with wave.open(str(tmp_path / "hello.wav"), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        assert w.getnframes() == audio_ms * 24

"""Reading checkpoint directories, for every family: one error, one strict loader.

- :class:`CheckpointError`: what every loader raises for a checkpoint it cannot
  read; the message names the directory or file and what is wrong.
- :func:`read_header`: a safetensors file's tensor names, dtypes and shapes from its
  header alone (no tensor is read), for reports and memory estimates.
- :func:`compare` / :class:`WeightReport`: the tensors a model expects against the
  ones a file holds: missing, unexpected and misshapen keys, named as the file
  spells them.
- :func:`load_weights`: the strict loader: the report must be clean, then the
  tensors are copied in.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
    "BOOL": 1,
}
MAX_HEADER_BYTES = 100 << 20
"""A header larger than this is not a safetensors file (the format caps it at 100 MB)."""
LISTED = 5
"""Keys of each kind a message names (then how many more)."""


class CheckpointError(ValueError):
    """A checkpoint this server cannot read: a file or key missing, a tensor of the
    wrong shape, a config value out of range. ``path`` is the directory or file at
    fault (when known); the message starts with it and says what to fix."""

    def __init__(self, problem: str, path: Path | str | None = None) -> None:
        self.problem = problem
        self.path = Path(path) if path is not None else None
        super().__init__(f"{path}: {problem}" if path is not None else problem)


# -- files ---------------------------------------------------------------------------


def checkpoint_root(given: Path | str | None, option: str | None) -> Path:
    """A loader's checkpoint directory: the one it was handed, else its
    ``model.checkpoint`` option; it must exist."""
    if given is None and option is None:
        raise CheckpointError("no checkpoint directory: set model.checkpoint or pass one")
    root = Path(given if given is not None else option)  # type: ignore[arg-type]
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {root}")
    return root


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    """A JSON object file; {} when it is absent and not ``required``."""
    if not path.is_file():
        if required:
            raise CheckpointError("checkpoint file missing", path)
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"not valid JSON: {exc}", path) from exc
    if not isinstance(data, dict):
        raise CheckpointError("must hold a JSON object", path)
    return data


def safetensors_files(directory: Path, stem: str = "model") -> list[Path]:
    """``<stem>.safetensors``, or the shards ``<stem>.safetensors.index.json`` lists."""
    single = directory / f"{stem}.safetensors"
    if single.is_file():
        return [single]
    index_path = directory / f"{stem}.safetensors.index.json"
    if not index_path.is_file():
        raise CheckpointError(
            f"checkpoint file missing: {single} (or the sharded {index_path.name})"
        )
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError("missing key 'weight_map'", index_path)
    files = []
    for name in sorted(set(weight_map.values())):
        path = directory / str(name)
        if not path.is_file():
            raise CheckpointError(f"checkpoint shard missing: {path} (listed in {index_path.name})")
        files.append(path)
    return files


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as a safetensors header declares it."""

    dtype: str
    """The file's dtype name (``BF16``, ``F32``...)."""
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * SAFETENSORS_DTYPE_BYTES.get(self.dtype, 4)


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Every tensor of a safetensors file, from its header (the tensors stay unread)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise CheckpointError("not a safetensors file (shorter than its header)", path)
            (size,) = struct.unpack("<Q", raw)
            if size > MAX_HEADER_BYTES:
                raise CheckpointError(f"not a safetensors file (header of {size} bytes)", path)
            header = json.loads(handle.read(size))
    except OSError as exc:
        raise CheckpointError(f"cannot be read ({exc.strerror or exc})", path) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"not a safetensors file (bad header: {exc})", path) from exc
    if not isinstance(header, dict):
        raise CheckpointError("not a safetensors file (header is not an object)", path)
    out: dict[str, TensorInfo] = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        try:
            out[key] = TensorInfo(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"not a safetensors file (entry {key!r}: {exc})", path) from exc
    return out


def read_headers(files: Iterable[Path]) -> dict[str, TensorInfo]:
    """The tensors of several files (shards) together."""
    out: dict[str, TensorInfo] = {}
    for path in files:
        out.update(read_header(path))
    return out


def load_tensors(
    files: Iterable[Path], prefixes: tuple[str, ...] = ("",)
) -> dict[str, torch.Tensor]:
    """The tensors of ``files`` whose key starts with one of ``prefixes``."""
    from safetensors import SafetensorError, safe_open

    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    if key.startswith(prefixes):
                        tensors[key] = handle.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"not a readable safetensors file ({exc})", path) from exc
    return tensors


# -- the strict check ----------------------------------------------------------------


@dataclass(frozen=True)
class WeightReport:
    """The tensors a model (or one part of it) expects against a file's, with keys
    spelled as the file spells them."""

    what: str
    """The part checked (``T3``, ``talker``...)."""
    file: str = ""
    """The file (or files) the tensors come from, for messages."""
    matched: int = 0
    """Tensors present with the expected shape."""
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    misshapen: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()
    """``(key, shape in the file, shape the model expects)``."""
    problems: tuple[str, ...] = field(default=())
    """Other findings (a part that could not be checked, and why)."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.misshapen or self.problems)

    def describe(self) -> str:
        """One line: ``what: N tensors match`` or what differs."""
        if self.ok:
            return f"{self.what}: {self.matched} tensors match"
        return f"{self.what} does not match the checkpoint: {self.differences()}"

    def differences(self) -> str:
        parts: list[str] = []
        if self.missing:
            parts.append(_listed(len(self.missing), "missing tensor", self.missing))
        if self.unexpected:
            parts.append(_listed(len(self.unexpected), "unexpected tensor", self.unexpected))
        if self.misshapen:
            shown = [
                f"'{k}' is {_shape(got)} in the file, the model expects {_shape(want)}"
                for k, got, want in self.misshapen[:LISTED]
            ]
            more = len(self.misshapen) - len(shown)
            parts.append(
                "wrong shape: " + "; ".join(shown) + (f" (and {more} more)" if more else "")
            )
        parts.extend(self.problems)
        return "; ".join(parts)

    def raise_if_bad(self) -> None:
        if not self.ok:
            raise CheckpointError(self.describe(), self.file or None)


def _listed(count: int, noun: str, keys: tuple[str, ...]) -> str:
    shown = ", ".join(f"'{k}'" for k in keys[:LISTED])
    more = f" (and {count - LISTED} more)" if count > LISTED else ""
    return f"{count} {noun}{'s' if count > 1 else ''} {shown}{more}"


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def compare(
    expected: Mapping[str, tuple[int, ...]],
    found: Mapping[str, tuple[int, ...]],
    what: str,
    *,
    file: str = "",
    prefix: str = "",
    optional: Collection[str] = (),
) -> WeightReport:
    """``expected`` (the model's keys and shapes) against ``found`` (the file's, with
    ``prefix`` already taken off); ``optional`` keys may be absent (the model keeps
    its own values). Keys in the report carry ``prefix`` back."""
    missing = sorted(set(expected) - set(found) - set(optional))
    unexpected = sorted(set(found) - set(expected))
    misshapen = [
        (prefix + key, tuple(found[key]), tuple(shape))
        for key, shape in sorted(expected.items())
        if key in found and tuple(found[key]) != tuple(shape)
    ]
    matched = sum(1 for k in expected if k in found) - len(misshapen)
    return WeightReport(
        what,
        file,
        matched,
        tuple(prefix + k for k in missing),
        tuple(prefix + k for k in unexpected),
        tuple(misshapen),
    )


def module_shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """The keys and shapes of ``module``'s state (build it on the meta device to check a
    checkpoint without allocating it)."""
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def header_shapes(header: Mapping[str, TensorInfo], prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The header's tensors under ``prefix``, keyed without it."""
    return {k[len(prefix) :]: v.shape for k, v in header.items() if k.startswith(prefix)}


def load_weights(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    what: str,
    prefix: str = "",
    optional: Collection[str] = (),
    *,
    file: Path | str | None = None,
) -> None:
    """Load ``state`` into ``model`` strictly: every tensor the model has must be there
    (but the ``optional`` ones, which keep their own values), none extra, each of its
    shape; else a :class:`CheckpointError` naming those that differ as the file spells
    them (``state``'s keys are the file's without ``prefix``; ``file`` is named first
    when given)."""
    report = compare(
        module_shapes(model),
        {k: tuple(v.shape) for k, v in state.items()},
        what,
        file=str(file) if file is not None else "",
        prefix=prefix,
        optional=optional,
    )
    report.raise_if_bad()
    model.load_state_dict(dict(state), strict=not optional)

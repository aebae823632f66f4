"""Load a module strictly from a test checkpoint's ``model.safetensors`` (the tensors under
``prefix``, keys checked and named before loading)."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from models.checkpoint import compare, header_shapes, load_tensors, read_headers


def load_prefix(module: nn.Module, ckpt: Path, prefix: str, what: str) -> nn.Module:
    files = [ckpt / "model.safetensors"]
    found = header_shapes(read_headers(files), prefix)
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    compare(expected, found, what, prefix=prefix).raise_if_bad()
    state = {k[len(prefix) :]: v.float() for k, v in load_tensors(files, (prefix,)).items()}
    module.load_state_dict(state, strict=True)
    return module.eval()

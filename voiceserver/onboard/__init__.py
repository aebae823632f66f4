"""``voiceserver onboard DIR``: from a checkpoint directory to a config that serves it.

A checkpoint a family recognises gets its family and variant, the strict weight
check, its memory and the streams that fit on a device (``--device cuda`` measures
this machine's GPU, ``--gpu-memory GIB`` plans for another), a config written to
``configs/<name>.yaml`` (``--write-config PATH``) and the ``serve`` command. Any other
gets a report a person can act on: its architecture and sizes, tensor groups, the
shared blocks recognised and the stage layout they suggest; ``--scaffold NAME``
writes a new family's files to fill in. docs/onboarding.md has examples.

Exit status: 0 served (config written), 1 weights that do not match, 2 a usage or
file error, 3 an unknown architecture (the report printed, a scaffold written if
asked).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_BAD_WEIGHTS, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="voiceserver onboard",
        description="Recognise a checkpoint, check its weights, size it for a device and write "
        "a config that serves it; or report what an unknown checkpoint holds.",
    )
    p.add_argument("checkpoint", type=Path, help="checkpoint directory (or a Piper .onnx voice)")
    p.add_argument(
        "--device",
        default=None,
        help="plan for this device: cpu (default) or cuda[:N] (measures this machine's GPU "
        "unless --gpu-memory is given)",
    )
    p.add_argument(
        "--gpu-memory",
        type=float,
        default=None,
        metavar="GIB",
        help="plan for a GPU of this many GiB (e.g. 139 for an H200, 24); implies --device cuda",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="weights' dtype (default: bfloat16 on a GPU, the config's on a CPU)",
    )
    p.add_argument("--name", default=None, help="the config's name (default: from the folder)")
    p.add_argument(
        "--write-config",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write the config (default: configs/<name>.yaml)",
    )
    p.add_argument("--no-write", action="store_true", help="report only, write no config")
    p.add_argument("--force", action="store_true", help="replace files that exist")
    p.add_argument(
        "--scaffold",
        default=None,
        metavar="NAME",
        help="write a new family's files (models/NAME/, configs/NAME.yaml, tests/models/NAME/)",
    )
    p.add_argument(
        "--reference",
        default=None,
        metavar="PACKAGE",
        help="with --scaffold: the package the parity tests compare with",
    )
    p.add_argument(
        "--into",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --scaffold: the folder to write under (default: this repository)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from models.checkpoint import CheckpointError
    from models.sizing import SizingError

    try:
        return run(args)
    except (CheckpointError, SizingError, FileExistsError, ValueError) as exc:
        print(f"voiceserver onboard: {exc}", file=sys.stderr)
        return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    from models.registry import looks_for, recognize

    path: Path = args.checkpoint
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    device = args.device or ("cuda" if args.gpu_memory is not None else "cpu")
    if args.gpu_memory is not None and not device.startswith("cuda"):
        raise ValueError("--gpu-memory plans for a GPU: leave --device out or make it cuda")
    if args.gpu_memory is not None and not args.gpu_memory > 0:
        raise ValueError(f"--gpu-memory must be above 0 GiB, got {args.gpu_memory:g}")
    print(f"checkpoint  {path.resolve()}")
    found = recognize(path)
    if found is None:
        return _unknown(args, path, looks_for())
    return _known(args, found, device)


def _known(args: argparse.Namespace, found, device: str) -> int:  # type: ignore[no-untyped-def]
    from voiceserver.config import CONFIG_DIR
    from voiceserver.onboard.known import (
        Target,
        config_text,
        default_name,
        report_known,
        write_config,
    )

    if args.scaffold:
        raise ValueError(f"--scaffold: {found.path} is already served by the {found.family} family")
    target = Target(device, args.dtype, args.gpu_memory)
    name = args.name or default_name(found)
    report = report_known(found, target, name)
    for line in report.lines:
        print(line)
    if not report.ok or report.config is None:
        return EXIT_BAD_WEIGHTS
    path = args.write_config or CONFIG_DIR / f"{name}.yaml"
    if args.no_write:
        print("config      not written (--no-write)")
    else:
        write_config(path, config_text(report, found, target), args.force)
        print(f"config      wrote {path}")
    print(f"serve       voiceserver serve --config {path}")
    return EXIT_OK


def _unknown(args: argparse.Namespace, path: Path, looked_for: list[str]) -> int:
    from voiceserver.config import CONFIG_DIR
    from voiceserver.onboard.inspect import inspect_checkpoint
    from voiceserver.onboard.scaffold import check_name, scaffold
    from voiceserver.onboard.unknown import report_unknown

    if args.scaffold:
        check_name(args.scaffold)
    print("family      none recognised; looked for " + "; ".join(looked_for))
    inspection = inspect_checkpoint(path)
    report = report_unknown(inspection)
    for line in report.lines:
        print(line)
    if args.scaffold:
        into = args.into or CONFIG_DIR.parent
        written = scaffold(
            args.scaffold,
            inspection,
            report.blocks,
            report.layout,
            into,
            args.reference,
            args.force,
        )
        print(f"scaffold    wrote {len(written)} files under {into}:")
        for file in written:
            print(f"  {file.relative_to(into)}")
        print(
            f"next        fill in models/{args.scaffold}/ (start with loader.py's KEY_MAP), "
            f"register it in models/registry.py, run tests/models/{args.scaffold}/"
        )
    else:
        print(
            f"next        voiceserver onboard {path} --scaffold NAME [--reference PACKAGE] "
            "writes a new family's files to fill in (docs/onboarding.md)"
        )
    return EXIT_UNKNOWN

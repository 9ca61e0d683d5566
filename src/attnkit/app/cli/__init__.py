"""The ``attnkit`` command line: ``attnkit demo``, ``bench``, ``viz``, ``verify`` and
``explain``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from attnkit import __version__, backends

from ..tables import not_installed, table
from . import bench as cli_bench
from . import explain as cli_explain
from . import verify as cli_verify
from . import viz as cli_viz
from .arguments import positive_int

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    names = tuple(args.backend) if args.backend else backends.NAMES
    rows, missing, trace = run_demo(names, dtype=args.dtype, repeats=args.repeats)
    print(f"attnkit {__version__}: the same code on every installed backend ({args.dtype})\n")
    print("Multi-head shape walk-through (d_model 512, 8 heads):")
    print("\n".join(f"  {step}" for step in trace))
    print()
    table_rows = [
        (r.backend, r.example, str(r.shape), f"{r.max_error:.2e}", f"{r.milliseconds:.2f}")
        for r in rows
    ]
    headers = ("backend", "example", "output shape", "max error vs float64", "time (ms)")
    print(table(headers, table_rows))
    not_installed(missing, gap=True)
    if not rows:
        print("\nerror: no backend could run the demo.", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnkit",
        description="Scaled dot-product attention written once for NumPy, PyTorch and JAX.",
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    demo = commands.add_parser(
        "demo",
        help="run the worked example on every installed backend",
        description="Run the worked example (batch 4, length 10, d_k 64, d_v 128) and the "
        "multi-head walk-through on every installed backend and compare with float64.",
    )
    demo.add_argument(
        "--backend",
        action="append",
        choices=backends.NAMES,
        help="run only this backend (repeatable; default: all installed)",
    )
    demo.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    demo.add_argument("--repeats", type=positive_int, default=5, help="timed runs (median)")
    demo.set_defaults(run=_demo)
    cli_bench.add_parser(commands)
    cli_viz.add_parser(commands)
    cli_verify.add_parser(commands)
    cli_explain.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``attnkit`` command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # the output was piped into a reader that stopped (head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

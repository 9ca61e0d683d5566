"""``attnkit verify``: the golden vectors on every installed backend, and the frameworks.

Prints one agreement table (per backend and dtype: the largest error against the
float64 oracle, the worst vector and its error as a fraction of the allowed error) and
one table of PyTorch SDPA and ``jax.nn.dot_product_attention`` on the same vectors,
with every place they differ. Exit status 1 if attnkit exceeds a tolerance anywhere.
The work is in :mod:`attnkit.app.verify` (attnkit on every backend) and
:mod:`attnkit.app.verify_frameworks` (the frameworks' own attention, called through
``attnkit.backends.torch.peers`` and ``attnkit.backends.jax.peers``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnkit import backends

from .progress import Progress
from .tables import table

__all__ = ["add_parser"]

_ALL_DTYPES = ("float64", "float32", "float16", "bfloat16")


def add_parser(commands: Any) -> None:
    """Add ``verify`` to the ``attnkit`` subcommands."""
    verify = commands.add_parser(
        "verify",
        help="check every installed backend against the golden vectors (float64 oracle)",
        description="Run the golden vectors (float64 inputs and the independent float64 "
        "oracle's output, weights and log-sum-exp; shipped with attnkit) through "
        "attnkit on every installed backend in every dtype it has, and print the largest "
        "error against the oracle per backend and dtype; then run them through PyTorch "
        "SDPA and jax.nn.dot_product_attention and report where those differ. Exit "
        "status 1 if attnkit exceeds its tolerance anywhere.",
    )
    verify.add_argument(
        "--backend",
        action="append",
        choices=backends.NAMES,
        help="check only this backend (repeatable; default: all installed)",
    )
    verify.add_argument(
        "--dtype",
        action="append",
        choices=_ALL_DTYPES,
        help="check only this dtype (repeatable; default: every dtype each backend has)",
    )
    verify.add_argument(
        "--no-frameworks",
        action="store_true",
        help="skip the PyTorch SDPA and jax.nn comparison",
    )
    verify.add_argument("--plain", action="store_true", help="plain progress lines, no rich bar")
    verify.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from . import verify as work  # NumPy: imported when verify runs, not for --help
    from . import verify_frameworks as others

    wanted = tuple(dict.fromkeys(args.backend or backends.NAMES))
    names = tuple(n for n in wanted if backends.load(n).available())
    missing = [f"{n} ({backends.load(n).install_hint})" for n in wanted if n not in names]
    vectors = work.load_vectors()
    plan = [(n, d) for n in names for d in work.DTYPES[n] if not args.dtype or d in args.dtype]
    frameworks = () if args.no_frameworks else tuple(n for n in ("torch", "jax") if n in names)
    total = len(vectors) * (len(plan) + len(frameworks))
    print(f"attnkit verify: {len(vectors)} golden vectors, oracle float64\n")
    agreements, compared = [], []
    with Progress(max(1, total), "verify", args.plain) as progress:

        def step(description: str) -> None:
            progress.step(description, quiet=True)

        for name, dtype in plan:
            if not progress.fancy:
                print(f"  {name} {dtype} ...", file=sys.stderr, flush=True)
            agreements.append(work.check_backend(name, dtype, vectors, step))
        if frameworks:
            compared = others.check_frameworks(vectors, frameworks, step)
    rows = [
        (
            a.backend,
            a.dtype,
            str(a.vectors),
            f"{a.max_error:.2e}",
            f"{a.worst_ratio:.3f}",
            a.worst,
            "ok" if not a.failures else f"FAILED ({len(a.failures)})",
        )
        for a in agreements
    ]
    headers = ("backend", "dtype", "vectors", "max error", "/ allowed", "worst", "result")
    print(table(headers, rows))
    if compared:
        _print_frameworks(compared)
    if missing:
        print("\nNot installed (install to include them):")
        print("\n".join(f"  {m}" for m in missing))
    failures = [f"{a.backend} {a.dtype} {f}" for a in agreements for f in a.failures]
    if failures:
        print(
            f"\nerror: attnkit exceeded its tolerance in {len(failures)} place(s):", file=sys.stderr
        )
        print("\n".join(f"  {f}" for f in failures), file=sys.stderr)
        return 1
    if not agreements:
        print("error: no selected backend and dtype is installed.", file=sys.stderr)
        return 1
    return 0


def _print_frameworks(compared: list[Any]) -> None:
    """A summary per framework, then each difference and each adaptation of a vector."""
    names = dict.fromkeys(r.framework for r in compared)
    precision = {"torch SDPA": "torch SDPA in float64", "jax.nn": "jax.nn in float32"}
    done = ", ".join(precision[n] for n in names)
    print(f"\nThe frameworks' own attention on the same vectors, against the oracle ({done}):\n")
    rows = []
    for framework in names:
        mine = [r for r in compared if r.framework == framework]
        agreeing = [r.max_error for r in mine if r.agrees]
        top = f"{max(agreeing):.2e}" if agreeing else "-"
        rows.append((framework, str(len(mine)), str(len(agreeing)), top))
    print(table(("framework", "vectors", "agree", "max error where they agree"), rows))
    differ = [r for r in compared if not r.agrees]
    if differ:
        print("\nWhere they differ:")
        print("\n".join(f"  {r.framework}  {r.vector}: {r.difference}" for r in differ))
    adapted = [r for r in compared if r.adaptation]
    if adapted:
        print("\nHow vectors were given to them (what they cannot take as they are):")
        print("\n".join(f"  {r.framework}  {r.vector}: {r.adaptation}" for r in adapted))

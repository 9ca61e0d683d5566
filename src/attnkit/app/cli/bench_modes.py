"""The modes of ``attnkit bench`` that run their own fixed cases: ``--hf`` (a transformers
model), ``--distributed`` (ring attention over processes or devices), ``--viz`` (the
interactive page's timings) and ``--backward`` (forward+backward with the gradient
targets' verdict lines). Each refuses the options it does not take, naming them."""

from __future__ import annotations

import argparse
import sys

from attnkit import backends

from ..tables import not_installed

__all__ = ["run_backward", "run_distributed", "run_forms", "run_hf", "run_viz"]


def run_hf(args: argparse.Namespace) -> int:
    """``attnkit bench --hf``: MiniLM's forward and a tiny Llama's generate() under
    attnkit, eager and sdpa."""
    given = [f"--{n.replace('_', '-')}" for n in _HF_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--hf times one model on PyTorch; drop {', '.join(given)}")
    from ..bench import hf as bench_hf

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


_DISTRIBUTED_EXCLUDES = (
    "targets", "window", "window_lengths", "flex", "plot", "hf", "backend", "rounds", "isolate",
    "tuned_env",
)  # fmt: skip


def run_distributed(args: argparse.Namespace) -> int:
    """``attnkit bench --devices N`` / ``--procs N``: ring attention over P = 1, 2, 4 ...
    N JAX devices / torch processes, per-device peak memory, time, outputs checked."""
    given = [f"--{n.replace('_', '-')}" for n in _DISTRIBUTED_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--devices/--procs run their own cases; drop {', '.join(given)}")
    if args.lengths and len(args.lengths) != 1:
        args.parser.error("--devices/--procs take one length: --lengths L")
    from ..bench import distributed
    from ..bench.settings import installed

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


def run_viz(args: argparse.Namespace) -> int:
    """``attnkit bench --viz``: the interactive page's drawing times in headless Chromium."""
    from ..bench import viz_page

    why = viz_page.missing_requirements()
    if why:
        print(f"error: attnkit bench --viz cannot run: {why}", file=sys.stderr)
        return 1
    size = viz_page.QUICK if args.quick else viz_page.FULL
    print(viz_page.format_timing(viz_page.run(size, repeats=args.repeats or 3)))
    return 0


def run_backward(args: argparse.Namespace) -> int:
    """``attnkit bench --backward``: forward+backward against the frameworks' own, with
    the gradient targets' verdict lines."""
    given = [f"--{n.replace('_', '-')}" for n in _BACKWARD_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--backward runs its own fixed cases; drop {', '.join(given)}")
    from ..bench import backward, backward_report
    from ..bench.settings import installed

    names, missing = installed(tuple(dict.fromkeys(args.backend or ("numpy", "torch", "jax"))))
    not_installed(missing, sys.stderr)
    sizes = backward.QUICK if args.quick else backward.FULL
    results, verdicts = backward_report.run(
        sizes,
        names,
        judged=not args.quick,
        repeats=args.repeats or 3,
        progress=lambda what: print(f"measuring {what}", file=sys.stderr, flush=True),
    )
    print(backward_report.format_results(results))
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


_BACKWARD_EXCLUDES = (
    "targets", "lengths", "window", "window_lengths", "flex", "plot", "hf", "rounds", "isolate",
    "tuned_env",
)  # fmt: skip


def run_forms(args: argparse.Namespace) -> int:
    """``attnkit bench --forms``: every call form as one loop (JAX programs' compile
    times, run times against jax.nn and tokamax, dense at 32K, torch.compile of a
    window), with its targets' verdict lines."""
    given = [f"--{n.replace('_', '-')}" for n in _BACKWARD_EXCLUDES if getattr(args, n)]
    if given:
        args.parser.error(f"--forms runs its own fixed cases; drop {', '.join(given)}")
    from ..bench import forms
    from ..bench.settings import installed

    names, missing = installed(tuple(dict.fromkeys(args.backend or ("jax", "torch"))))
    not_installed(missing, sys.stderr)
    sizes = forms.QUICK if args.quick else forms.FULL
    results = forms.run(
        sizes, names, progress=lambda what: print(f"measuring {what}", file=sys.stderr, flush=True)
    )
    print(forms.format_results(results))
    print()
    print("\n".join(forms.verdicts(results, sizes, judged=not args.quick)))
    if args.quick:
        print("\nSmoke run at tiny sizes: the targets are not judged.")
    broken = [r for r in results if r.job.impl == "attnkit" and r.error]
    for r in broken:
        print(f"error: attnkit failed: {r.job}: {r.error}", file=sys.stderr)
    return 1 if broken else 0


_HF_EXCLUDES = (
    "backend",
    "targets",
    "lengths",
    "window",
    "window_lengths",
    "flex",
    "json",
    "plot",
    "rounds",
    "isolate",
    "tuned_env",
)

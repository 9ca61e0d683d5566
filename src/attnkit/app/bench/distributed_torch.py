"""Benchmark ring attention over N gloo processes: per-process peak memory, median time,
and the output checked against one process.

    python -m attnkit.app.bench.distributed_torch --procs 4 --length 32768 --backward --json

starts N processes (``file://`` rendezvous in a temporary folder), each holding its
zigzag shard (1, H, L/N, E) of q, k, v (built chunk by chunk from a fixed seed), runs
:func:`ring_attention` (forward, or forward + backward of ``sum(out * w)``)
``--repeats`` times and writes its output shard; the parent compares the gathered output
with ``attnkit.scaled_dot_product_attention`` on the whole sequence. A process's peak
memory is the resident memory its first timed call added at its peak (``VmHWM`` after a
reset through ``/proc/self/clear_refs``; ``ru_maxrss`` where that cannot be written).

``--json`` prints one object: the settings, ``per_process`` (rank, ``peak_mib``,
``median_s``), the maxima over ranks, ``max_abs_error`` and ``ok``; without it, a short
table. Exit status 1 when the check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "run_bench"]

METHOD = ("VmHWM after the first timed call minus VmRSS before it, the high-water mark "
          "reset through /proc/self/clear_refs; MALLOC_MMAP_THRESHOLD_=65536")  # fmt: skip


def _status_kib(field: str) -> int:
    """``field`` (VmRSS, VmHWM) of /proc/self/status in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def _reset_peak() -> int | None:
    """Reset the high-water mark; the resident KiB now, or None where /proc refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _status_kib("VmRSS")
    except OSError:
        return None


def _peak_kib(base: int | None, maxrss_before: int) -> float:
    """KiB the call added at its peak (see the module docstring)."""
    if base is not None:
        return float(_status_kib("VmHWM") - base)
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before)


def _chunks(args: Any, which: int, chunk_ids: list[int], dtype: Any) -> Any:
    """Tensor ``which`` (0 q, 1 k, 2 v, 3 cotangent) of the chunks ``chunk_ids`` of 2N
    equal chunks, each drawn from its own seed: (1, H, len(chunk_ids) * c, E)."""
    import torch

    c = args.length // (2 * args.procs)
    parts = []
    for cid in chunk_ids:
        g = torch.Generator().manual_seed(1000 * which + cid)
        parts.append(torch.randn(1, args.heads, c, args.dim, generator=g, dtype=dtype))
    return torch.cat(parts, dim=-2)  # (1, H, n, E)


def _worker(args: Any) -> None:
    import torch
    import torch.distributed as dist

    from attnkit.backends.torch.distributed import ring_attention

    r, P = args.worker, args.procs
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // P))
    dist.init_process_group("gloo", init_method=args.init, rank=r, world_size=P)
    dtype = getattr(torch, args.dtype)
    mine = [r, 2 * P - 1 - r]  # zigzag: chunks r and 2P-1-r
    q, k, v, w = (_chunks(args, i, mine, dtype) for i in range(4))  # (1, H, L/P, E)
    kw = {"is_causal": args.causal, "block_size": args.block_size or None}

    def once(q: Any, k: Any, v: Any, w: Any) -> Any:
        if not args.backward:
            return ring_attention(q, k, v, **kw)
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = ring_attention(q, k, v, **kw)
        (out * w).sum().backward()
        return out.detach()

    tiny = [x[..., :2, :8].contiguous() for x in (q, k, v, w)]
    once(*tiny)  # warm-up: imports, kernels, gloo buffers
    dist.barrier()
    times, peak = [], 0.0
    for i in range(args.repeats):
        dist.barrier()
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        base = _reset_peak() if i == 0 else None
        t0 = time.perf_counter()
        out = once(q, k, v, w)
        times.append(time.perf_counter() - t0)
        if i == 0:
            peak = _peak_kib(base, maxrss) / 1024
        if i < args.repeats - 1:
            del out  # free before the next repeat: two outputs never live at once
    torch.save(out, Path(args.out) / f"out{r}.pt")
    result = {"rank": r, "peak_mib": round(peak, 2), "median_s": statistics.median(times)}
    (Path(args.out) / f"rank{r}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def run_bench(
    procs: int,
    length: int,
    backward: bool = False,
    heads: int = 1,
    dim: int = 64,
    dtype: str = "float32",
    causal: bool = True,
    block_size: int | None = None,
    repeats: int = 3,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Start ``procs`` gloo processes, run the benchmark, check the output; returns the
    JSON object described in the module docstring."""
    from attnkit.errors import ParameterError

    if procs < 1 or length < 2 * procs or length % (2 * procs):
        raise ParameterError(
            f"--length {length} must be a positive multiple of 2 * --procs = {2 * procs} "
            "(zigzag layout); pad to a multiple."
        )
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--procs", str(procs), "--length", str(length), "--heads", str(heads),
                  "--dim", str(dim), "--dtype", dtype, "--block-size", str(block_size or 0),
                  "--repeats", str(repeats), "--init", f"file://{tmp}/rendezvous",
                  "--out", tmp, *(["--backward"] if backward else []),
                  *([] if causal else ["--no-causal"])]  # fmt: skip
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        cmd = [sys.executable, "-m", "attnkit.app.bench.distributed_torch", *common]
        workers = [subprocess.Popen([*cmd, "--worker", str(r)], env=env) for r in range(procs)]
        try:
            codes = [w.wait(timeout=timeout) for w in workers]
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
        if any(codes):
            raise RuntimeError(f"benchmark workers exited with {codes}")
        per = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(procs)]
        error = _check(Path(tmp), procs, length, heads, dim, dtype, causal)
    return {
        "procs": procs, "length": length, "heads": heads, "dim": dim, "dtype": dtype,
        "layout": "zigzag", "causal": causal, "backward": backward, "block_size": block_size,
        "repeats": repeats, "method": METHOD, "per_process": per,
        "peak_mib": max(p["peak_mib"] for p in per),
        "median_s": max(p["median_s"] for p in per),
        "max_abs_error": error, "ok": error <= (1e-4 if dtype == "float32" else 1e-10),
    }  # fmt: skip


def _check(
    tmp: Path, procs: int, length: int, heads: int, dim: int, dtype: str, causal: bool
) -> float:
    """Max |gathered ring output - one-process core output|."""
    import torch

    import attnkit as ak
    from attnkit.backends.torch.distributed.layout import zigzag_unshard

    args = argparse.Namespace(length=length, procs=procs, heads=heads, dim=dim)
    every = list(range(2 * procs))
    q, k, v = (_chunks(args, i, every, getattr(torch, dtype)) for i in range(3))
    want = ak.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (1, H, L, E)
    got = zigzag_unshard([torch.load(tmp / f"out{r}.pt") for r in range(procs)])
    return float((got - want).abs().max())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnkit.app.bench.distributed_torch",
                                 description=__doc__.split("\n")[0])  # fmt: skip
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--block-size", type=int, default=0, help="0: the core's default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--no-causal", dest="causal", action="store_false")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--init", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        _worker(args)
        return 0
    try:
        res = run_bench(args.procs, args.length, args.backward, args.heads, args.dim,
                        args.dtype, args.causal, args.block_size, args.repeats)  # fmt: skip
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res))
    else:
        passes = "forward+backward" if res["backward"] else "forward"
        print(f"ring attention, {res['procs']} processes, L={res['length']}, {passes}, "
              f"{res['dtype']}")  # fmt: skip
        for p in res["per_process"]:
            peak, median = p["peak_mib"], p["median_s"]
            print(f"  rank {p['rank']}: peak {peak:.1f} MiB, median {median:.3f} s")
        verdict = "ok" if res["ok"] else "FAIL"
        print(f"  max |out - one process| = {res['max_abs_error']:.3g} ({verdict})")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

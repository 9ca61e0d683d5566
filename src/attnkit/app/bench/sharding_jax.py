"""Ring attention's per-device peak memory and time at P devices, against one device.

Run (sets ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` itself when JAX has not
started yet, so one CPU process gets N host devices)::

    python -m attnkit.app.bench.sharding_jax --devices 4 --length 4096 [--backward] --json

For every P in 1, 2, 4, ... up to N, causal ring attention in zigzag layout on q, k, v
of shape (batch, heads, L, dim), float32, is compiled with ``jax.jit`` over a mesh of the
first P devices; its memory per device is read from the compiled program
(``compiled.memory_analysis()``: arguments + outputs + temporaries - aliased), its time
is the median of ``--repeats`` runs, and its output (with ``--backward``: the gradients
of ``sum(out * cotangent)``) is compared with P = 1. ``--json`` prints one object with
a ``results`` entry per P and ``peak_ratio_vs_1``; otherwise a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

__all__ = ["main", "measure"]


def _mesh(parts: int) -> Any:
    import jax
    import numpy as np

    devices = np.array(jax.devices()[:parts])
    return jax.sharding.Mesh(devices, ("seq",), axis_types=(jax.sharding.AxisType.Auto,))


def measure(
    parts: int,
    arrays: tuple[Any, ...],
    *,
    backward: bool = False,
    repeats: int = 3,
    **core_kwargs: Any,
) -> dict[str, Any]:
    """Compile and run ring attention (zigzag layout) on ``parts`` devices for ``arrays``
    = (q, k, v, cotangent) (global, natural order; put in zigzag order here): the memory
    of the compiled program per device, the median time, the compiled HLO text, and the
    result (out, or (dq, dk, dv) with ``backward``) as NumPy in natural order."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from attnkit.backends.jax.sharding import ring_attention, zigzag_shard, zigzag_unshard

    mesh = _mesh(parts)
    spec = NamedSharding(mesh, PartitionSpec(*([None] * (arrays[0].ndim - 2)), "seq", None))
    q, k, v, ct = (jax.device_put(zigzag_shard(x, parts), spec) for x in arrays)

    def forward(q: Any, k: Any, v: Any) -> Any:
        return ring_attention(q, k, v, mesh=mesh, axis="seq", **core_kwargs)

    if backward:

        def run(q: Any, k: Any, v: Any, ct: Any) -> Any:
            return jax.grad(lambda q, k, v: jnp.sum(forward(q, k, v) * ct), (0, 1, 2))(q, k, v)
    else:

        def run(q: Any, k: Any, v: Any, ct: Any) -> Any:
            return forward(q, k, v)

    compiled = jax.jit(run).lower(q, k, v, ct).compile()
    mem = compiled.memory_analysis()
    result = jax.block_until_ready(compiled(q, k, v, ct))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(q, k, v, ct))
        times.append(time.perf_counter() - start)
    args, outs = int(mem.argument_size_in_bytes), int(mem.output_size_in_bytes)
    temp, alias = int(mem.temp_size_in_bytes), int(mem.alias_size_in_bytes)
    return {
        "devices": parts,
        "peak_bytes_per_device": args + outs + temp - alias,
        "argument_bytes": args,
        "output_bytes": outs,
        "temp_bytes": temp,
        "median_seconds": statistics.median(times) if times else float("nan"),
        "result": jax.tree_util.tree_map(
            lambda x: np.asarray(zigzag_unshard(jax.device_put(x, jax.devices()[0]), parts)),
            result,
        ),
        "hlo": compiled.as_text(),
    }


def _inputs(batch: int, heads: int, length: int, dim: int) -> tuple[Any, ...]:
    import jax

    keys = jax.random.split(jax.random.key(0), 4)
    return tuple(jax.random.normal(key, (batch, heads, length, dim)) for key in keys)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m attnkit.app.bench.sharding_jax")
    parser.add_argument("--devices", type=int, required=True, help="largest device count P")
    parser.add_argument("--length", type=int, required=True, help="sequence length L (= S)")
    parser.add_argument("--backward", action="store_true", help="forward + backward")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.length < 1 or args.length % (2 * args.devices):
        parser.error(
            f"--length {args.length} must be positive and divide by 2 x --devices "
            f"({2 * args.devices}, the zigzag chunks); --devices must be >= 1"
        )
    if "jax" not in sys.modules and "device_count" not in os.environ.get("XLA_FLAGS", ""):
        flag = f"--xla_force_host_platform_device_count={args.devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    import jax
    import numpy as np

    if jax.device_count() < args.devices:
        parser.error(f"--devices {args.devices} but JAX sees {jax.device_count()} devices")
    counts = sorted({1, args.devices, *(2**i for i in range(8) if 2**i <= args.devices)})
    counts = [p for p in counts if args.length % (2 * p) == 0]
    arrays = _inputs(args.batch, args.heads, args.length, args.dim)
    rows, base = [], None
    for parts in counts:
        row = measure(parts, arrays, backward=args.backward, repeats=args.repeats, is_causal=True)
        result = row.pop("result")
        row.pop("hlo")
        base = result if base is None else base
        pairs = zip(jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(base), strict=True)
        errors = [float(np.max(np.abs(a - b))) for a, b in pairs]
        row["max_abs_error_vs_1"] = max(errors)
        rows.append(row)
    peak1 = rows[0]["peak_bytes_per_device"]
    report = {
        "length": args.length, "batch": args.batch, "heads": args.heads, "dim": args.dim,
        "dtype": "float32", "backward": args.backward, "layout": "zigzag", "causal": True,
        "results": rows,
        "peak_ratio_vs_1": {str(r["devices"]): r["peak_bytes_per_device"] / peak1 for r in rows},
    }  # fmt: skip
    if args.json:
        print(json.dumps(report))
    else:
        print(f"ring attention, L = {args.length}, backward = {args.backward}")
        for r in rows:
            print(
                f"P = {r['devices']}: peak {r['peak_bytes_per_device'] / 2**20:.2f} MiB/device "
                f"(x{r['peak_bytes_per_device'] / peak1:.3f}), median {r['median_seconds']:.4f} s, "
                f"max |diff vs P=1| {r['max_abs_error_vs_1']:.2e}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

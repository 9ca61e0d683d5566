"""One process of the 2 processes x 2 CPU devices ring test (started by
test_jax_multiprocess.py): ``python jax_ring_worker.py PROCESS_ID PORT``.

Joins ``jax.distributed`` on localhost, builds the same global inputs in both
processes, runs causal zigzag ring attention (forward and gradients) on the 4-device
mesh, and compares the shards this process holds with the single-device core
(``attnkit.attention_vjp`` on NumPy, float64). Prints one JSON line:
``{"process": i, "devices": 4, "local_shards": n, "max_error": e, "nan": false}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> int:
    process, port = int(sys.argv[1]), int(sys.argv[2])
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process)
    import jax.numpy as jnp
    import numpy as np
    from attnkit.backends.jax.sharding import ring_attention
    from attnkit.backends.jax.sharding.zigzag import zigzag_order
    from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

    import attnkit as ak

    parts = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("seq",), axis_types=(AxisType.Auto,))
    rng = np.random.default_rng(0)
    shape = (1, 2, 64, 8)
    q, k, v, ct = (rng.standard_normal(shape) for _ in range(4))  # same in both processes
    kw = {"is_causal": True, "kv_offset": 4}  # rows 0..3 see no key: exactly 0
    out, vjp = ak.attention_vjp(q, k, v, **kw)
    want = (out, *vjp(ct))
    chunk = shape[-2] // (2 * parts)
    order = np.concatenate([np.arange(c * chunk, (c + 1) * chunk) for c in zigzag_order(parts)])

    def zz(x: Any) -> Any:
        return x[..., order, :]  # (1, 2, 64, F) in zigzag order

    spec = NamedSharding(mesh, PartitionSpec(None, None, "seq", None))

    def placed(x: Any) -> Any:
        x = zz(x)
        return jax.make_array_from_callback(x.shape, spec, lambda index: x[index])

    def both(q: Any, k: Any, v: Any, ct: Any) -> tuple[Any, ...]:
        out, pullback = jax.vjp(
            lambda q, k, v: ring_attention(q, k, v, mesh=mesh, axis="seq", **kw), q, k, v
        )
        return (out, *pullback(ct))

    got = jax.jit(both)(*(placed(x) for x in (q, k, v, ct)))
    errors, nan, shards = [], False, 0
    for g, w in zip(got, want, strict=True):
        for shard in g.addressable_shards:
            local = np.asarray(shard.data)
            nan = nan or bool(np.isnan(local).any())
            errors.append(float(np.max(np.abs(local - zz(w)[shard.index]))))
            shards += 1
    zero_rows = bool(np.all(np.asarray(got[0].addressable_shards[0].data)[..., :4, :] == 0))
    report = {
        "process": process,
        "devices": parts,
        "local_devices": jax.local_device_count(),
        "local_shards": shards,
        "max_error": max(errors),
        "nan": nan,
    }
    if process == 0:
        report["empty_rows_zero"] = zero_rows  # device 0 holds positions 0..7
    print(json.dumps(report), flush=True)
    jnp.zeros(()).block_until_ready()
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

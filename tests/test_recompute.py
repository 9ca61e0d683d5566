"""Backward memory of the blocked executor: each block is recomputed, not stored.

With several query blocks whose scores would add up to more than
``attnkit.blocked.cost.RECOMPUTE_ABOVE_ELEMENTS``, ``torch.utils.checkpoint`` /
``jax.checkpoint`` wrap each block (``Backend.recompute_block``), so the backward pass
holds one block's scores at a time instead of all L x S of them. Gradients must equal the float64
reference; peak memory is measured in a fresh process (glibc's mmap threshold fixed so
that freed blocks go back to the system and the resident peak reflects live memory).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from _helpers import PROC_STATUS, printed_int, x64

import attnkit as ak
from attnkit import backends
from attnkit.blocked import cost

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("window", [None, (7, 3)])
def test_torch_recomputed_blocks_give_reference_gradients(
    window, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = backends.load("torch")
    calls = []
    original = adapter.recompute_block

    def counting(fn, *inputs):
        calls.append(1)
        return original(fn, *inputs)

    monkeypatch.setattr(adapter, "recompute_block", counting)
    monkeypatch.setattr(cost, "RECOMPUTE_ABOVE_ELEMENTS", 0)  # recompute even tiny problems
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 61, 8, generator=g, dtype=torch.float64) for _ in range(3))
    grads = []
    for impl, block in (("generic", 8), ("reference", None)):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = ak.scaled_dot_product_attention(
            *leaves, is_causal=True, window=window, impl=impl, block_size=block
        )
        (out * torch.linspace(-1, 1, 8, dtype=out.dtype)).sum().backward()
        grads.append([t.grad for t in leaves])
    assert len(calls) == 8, f"expected 8 recomputed blocks, got {len(calls)}"
    for name, a, b in zip("qkv", *grads, strict=True):
        err = float((a - b).abs().max())
        assert err <= 1e-12, f"grad {name}: {err:.2e} > 1e-12"


def test_jax_recomputed_blocks_give_reference_gradients() -> None:
    jax = pytest.importorskip("jax")
    with x64(jax):
        rng = np.random.default_rng(1)
        q, k, v = (jax.numpy.asarray(rng.standard_normal((2, 45, 8))) for _ in range(3))

        def loss(impl, block):
            def f(q, k, v):
                out = ak.scaled_dot_product_attention(
                    q, k, v, window=(5, 5), impl=impl, block_size=block
                )
                return (out**2).sum()

            return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(q, k, v)

        cost.RECOMPUTE_ABOVE_ELEMENTS, saved = 0, cost.RECOMPUTE_ABOVE_ELEMENTS
        try:
            pairs = zip(loss("generic", 8), loss("reference", None), strict=True)
        finally:
            cost.RECOMPUTE_ABOVE_ELEMENTS = saved
        for a, b in pairs:
            assert float(abs(a - b).max()) <= 1e-12


_PEAK = (
    PROC_STATUS
    + """
import sys, torch, attnkit as ak, attnkit.backends as B, attnkit.blocked.cost as D
D.RECOMPUTE_ABOVE_ELEMENTS = 2**24  # 2 x 4096 x 4096 = 2**25 score elements: recomputed

if sys.argv[1] == "off":  # autograd through the blocked forward, storing every block
    B.load("torch").recompute_block = None
    B.load("torch").custom_vjp = None
elif sys.argv[1] == "checkpoint":  # autograd through checkpointed blocks
    B.load("torch").custom_vjp = None
# warm-up: the first recomputed backward loads code (tens of MiB resident for good)
D.RECOMPUTE_ABOVE_ELEMENTS = 0
w = [torch.randn(1, 2, 256, 16, requires_grad=True) for _ in range(3)]
ak.scaled_dot_product_attention(*w, impl="generic", block_size=64).sum().backward()
D.RECOMPUTE_ABOVE_ELEMENTS = 2**24
q, k, v = (torch.randn(1, 2, 4096, 16, requires_grad=True) for _ in range(3))
before = status("VmRSS:")
out = ak.scaled_dot_product_attention(q, k, v, impl="generic", block_size=64)
out.square().sum().backward()
print(status("VmHWM:") - before)
"""
)


def _peak_kib(mode: str) -> int:
    return printed_int(_PEAK, mode)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux /proc")
@pytest.mark.parametrize("mode", ["on", "checkpoint"], ids=["attnkit backward", "checkpoint"])
def test_dense_backward_memory_is_not_l_by_s(mode: str) -> None:
    """2 heads x 4096 x 4096 float32 scores are 128 MiB; autograd through the stored
    blocks keeps at least one such matrix, attnkit's own backward pass (the default:
    q, k, v, out and lse saved) and checkpointed blocks well under half of that."""
    with_recompute, without = _peak_kib(mode), _peak_kib("off")
    full_scores_kib = 2 * 4096 * 4096 * 4 // 1024
    assert without >= full_scores_kib, (without, full_scores_kib)
    assert with_recompute <= 0.5 * without, (
        f"forward + backward grew the peak by {with_recompute} KiB ({mode}; stored blocks: "
        f"{without} KiB); one L x S score matrix is {full_scores_kib} KiB"
    )

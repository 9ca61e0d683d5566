"""PyTorch ``nn.Module`` wrappers: one thin adapter over attnkit's core.

All the math is :func:`attnkit.scaled_dot_product_attention`,
:func:`attnkit.multi_head_attention` and :mod:`attnkit.approx`; these classes only hold
``nn.Parameter``s, convert PyTorch's conventions, and draw dropout from a
``torch.Generator``. They live in one module each and are re-exported here:

``MultiheadAttention``          the drop-in ``torch.nn.MultiheadAttention``
                                (``multihead.py``; inputs and masks checked and converted by
                                ``inputs.py``, torch's layers and autocast: ``fit.py``)
``ScaledDotProductAttention``   attention over given heads (``sdpa.py``)
``LinformerAttention``, ``PerformerAttention``, ``NystromAttention``
                                the approximations (``approx.py``)

Reference
---------

**PyTorch**: `attnkit.backends.torch.nn.MultiheadAttention` is a drop-in for
`torch.nn.MultiheadAttention`: the same constructor arguments, parameter names (its
`state_dict` loads both ways), forward signature, conventions and return values, with
all the math in attnkit's core:

.. code-block:: python

    import torch
    from attnkit.backends.torch.nn import MultiheadAttention

    torch_mha = torch.nn.MultiheadAttention(512, 8, batch_first=True)
    mha = MultiheadAttention(512, 8, batch_first=True)  # was: torch.nn.MultiheadAttention
    mha.load_state_dict(torch_mha.state_dict())
    x = torch.randn(4, 10, 512)
    out, weights = mha(x, x, x, key_padding_mask=torch.zeros(4, 10, dtype=torch.bool))

    # beyond torch's module: GQA, RoPE, sliding windows, and incremental decoding
    dec = MultiheadAttention(512, 8, batch_first=True, num_kv_heads=2, rope=True, is_causal=True)
    cache = dec.init_cache(batch_size=4, max_length=256)
    out, _, cache = dec.decode(x[:, :3], cache)  # prefill, then one token at a time

`ScaledDotProductAttention` (same module file) is the seed's module fixed: no NaN on
fully masked rows, dropout only in training, weights returned are the ones applied.

Differences from `torch.nn.MultiheadAttention` (each tested in
`tests/test_nn_multihead.py` and, for torch's layers and autocast, `tests/test_nn_fit.py`;
the first checks 120 random configurations against it:
float64 relative error <= 1e-10, float32 <= 1e-5, and the gradients of a training step;
the differential fuzzer `conformance/test_fuzz_torch_mha.py` draws every constructor
and forward argument against torch's module with its weights loaded, in the torch
conformance session):

| | `torch.nn.MultiheadAttention` | attnkit's drop-in |
|---|---|---|
| fully masked row (all keys padding) | NaN output, NaN gradients | output = `out_proj.bias` (attention 0), weights 0, finite gradients |
| `is_causal=True` | a hint; needs `attn_mask` too | builds the causal mask itself |
| extras | none | `num_kv_heads`, `rope`, `window`, kv-cache `decode` |
| dropout randomness | torch's global RNG | a `torch.Generator` (`generator=`), else seeded from the global RNG |
| functional core mask convention | bool True = masked | `ak.multi_head_attention`: True = may attend (the module keeps torch's) |
| 1-D `key_padding_mask` (S,) | refused | refused (`ShapeError`: it must be (batch, S)) |
| 1-D `attn_mask` (S,) | refused | accepted, broadcast over batch and query rows (kept as a convenience) |
| 4-D `attn_mask` (B, H, L, S) | refused | accepted, the same as the 3-D (B * H, L, S) |
| a float mask of another float dtype than the inputs | refused ("Input dtypes must be the same") | accepted, added in the inputs' compute dtype |
| key and value of batch 1 beside a larger query batch | refused (a reshape error) | broadcast over the query's batch |
| `need_weights=1`, `average_attn_weights=0` (ints for flags) | accepted | refused (`ParameterError`: flags are real bools) |
| inside `nn.TransformerEncoder(Layer)` in eval + no_grad | torch's native fused layer (nested tensors for padded batches) | the layer's regular path, so attnkit computes (the module reports `_qkv_same_embed_dim = False` to decline the native path; a nested-tensor input, from an encoder built before the swap, is padded, attended and returned nested) |
| `torch.autocast` | inputs and weights in the autocast dtype | the same: bfloat16 (CPU) or float16 (CUDA) in and out, float32 accumulation inside; float64 left alone |
| `static_k` / `static_v` (arguments of `F.multi_head_attention_forward`, not of the module) | precomputed key/value heads | not supported: pass projected keys and values to `ak.scaled_dot_product_attention`, or use the kv cache (`decode`) |

**`torch.compile`**: attnkit's calls and the drop-in module compile with
`fullgraph=True` (no graph break: `tests/test_compile.py` compiles a plain, a causal, a
GQA, a windowed and a key-padded call and the module, forward and backward). While
dynamo traces, attnkit keeps no Python caches and reads no concrete values (a masked
call's finiteness check becomes `torch.cond` in the graph, below). attnkit plans its blocks from static sizes, like `jax.jit`: compile
calls whose lengths change with `dynamic=False` (with automatic dynamic shapes a windowed
or structured call graph-breaks, and `fullgraph=True` then refuses it). Measured with
inductor on the project's 2-core machine (median of 7 calls, two alternations, batch 1,
8 heads, head size 64, float32):

| call | eager (ms) | compiled (ms) | compiled / eager | compile time |
|---|---|---|---|---|
| plain, L = 4096 | 261 / 265 | 393 / 283 | 1.28 (the first compiled round disturbed: 0.99 in an earlier run) | 2 s |
| causal, L = 4096 | 159 / 158 | 158 / 163 | 1.01 | 16 s |
| window 256, L = 8192 | 56 / 60 | 109 / 112 | 1.91 (not met) | 214 s |
| causal GQA 8 over 2, L = 4096 | 165 / 156 | 165 / 161 | 1.01 | 25 s |

A plain call compiles to the same SDPA call as eager. Without autograd, a masked call
(causal, GQA, a bool or float mask) compiles to SDPA followed by `torch.cond` on its
output being finite, the check eager makes: only the taken branch runs, and the other is
the guarded executor in at most 8 large blocks (its blocks are unrolled into the graph,
and compile time grows with them). Under autograd `torch.cond`'s two branches give
gradients of different strides, which inductor refuses, so a compiled masked call that
records gradients takes the guarded executor. A window is slower compiled (not met):
eager checks its operands finite and takes one SDPA call over the unfolded keys, while a
graph guards every block, including the value product that keeps a NaN or inf value out
of rows not attending it (three products per block; `torch.cond` per block is the next
step, as `jax.lax.cond` does under `jax.jit`).

A tiny 2-layer model built on it learns a copy task within 200 steps on PyTorch (through
the module) and on JAX (through the functional core under `jax.grad`):
`tests/test_copy_task.py`.

"""  # noqa: E501

from __future__ import annotations

from .approx import LinformerAttention, NystromAttention, PerformerAttention
from .multihead import MultiheadAttention
from .sdpa import ScaledDotProductAttention

__all__ = [
    "LinformerAttention",
    "MultiheadAttention",
    "NystromAttention",
    "PerformerAttention",
    "ScaledDotProductAttention",
]

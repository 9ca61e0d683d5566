"""PyTorch ``nn.Module`` wrappers: one thin adapter over attnkit's core.

The math is attnkit's core; these classes hold ``nn.Parameter``s, convert PyTorch's
conventions, and draw dropout from a ``torch.Generator``: ``MultiheadAttention`` (the
drop-in, :mod:`.multihead`), ``ScaledDotProductAttention`` (attention over given heads:
no NaN on fully masked rows, dropout only in training), and ``LinformerAttention``,
``PerformerAttention``, ``NystromAttention`` (:mod:`.approx`).

Example
-------

`MultiheadAttention` is a drop-in for `torch.nn.MultiheadAttention`: the same constructor
arguments, parameter names (its `state_dict` loads both ways), forward signature,
conventions and return values:

.. code-block:: python

    import torch
    from attnkit.backends.torch.nn import MultiheadAttention

    torch_mha = torch.nn.MultiheadAttention(512, 8, batch_first=True)
    mha = MultiheadAttention(512, 8, batch_first=True)  # in place of torch's module
    mha.load_state_dict(torch_mha.state_dict())
    x = torch.randn(4, 10, 512)
    out, weights = mha(x, x, x, key_padding_mask=torch.zeros(4, 10, dtype=torch.bool))

    # beyond torch's module: GQA, RoPE, sliding windows, and incremental decoding
    dec = MultiheadAttention(512, 8, batch_first=True, num_kv_heads=2, rope=True, is_causal=True)
    cache = dec.init_cache(batch_size=4, max_length=256)
    out, _, cache = dec.decode(x[:, :3], cache)  # prefill, then one token at a time

Differences from `torch.nn.MultiheadAttention`:

| | `torch.nn.MultiheadAttention` | attnkit's drop-in |
|---|---|---|
| fully masked row (all keys padding) | NaN output, NaN gradients | output = `out_proj.bias` (attention 0), weights 0, finite gradients |
| `is_causal=True` | a hint; needs `attn_mask` too | builds the causal mask itself |
| extras | none | `num_kv_heads`, `rope`, `window`, kv-cache `decode` |
| dropout randomness | torch's global RNG | a `torch.Generator` (`generator=`), else seeded from the global RNG |
| functional core mask convention | bool True = masked | `ak.multi_head_attention`: True = may attend (the module keeps torch's) |
| 1-D `attn_mask` (S,) | refused | accepted, broadcast over batch and query rows |
| 4-D `attn_mask` (B, H, L, S) | refused | accepted, the same as the 3-D (B * H, L, S) |
| a float mask of another float dtype than the inputs | refused | accepted, added in the inputs' compute dtype |
| key and value of batch 1 beside a larger query batch | refused | broadcast over the query's batch |
| `need_weights=1`, `average_attn_weights=0` (ints for flags) | accepted | refused (`ParameterError`: flags are real bools) |
| inside `nn.TransformerEncoder(Layer)` in eval + no_grad | torch's native fused layer | the layer's regular path, so attnkit computes (nested-tensor inputs are padded, attended and returned nested) |
| `torch.autocast` | inputs and weights in the autocast dtype | the same, with float32 accumulation inside; float64 left alone |
| `static_k` / `static_v` | precomputed key/value heads | not supported: use `ak.scaled_dot_product_attention` or the kv cache (`decode`) |

**`torch.compile`**: the calls and the module compile with `fullgraph=True`
(:mod:`attnkit.compiling`); compile calls whose lengths change with `dynamic=False`.
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

"""Multi-head attention written once: projections, heads, GQA/MQA, RoPE, kv cache.

Shape legend: ``...`` leading dims, L/S query/key lengths, Dq/Dk/Dv input features, Hq
and Hkv heads (Hq % Hkv == 0), E/Ev features per head, Do output features.

Parameters follow ``torch.nn.Linear``'s layout, ``y = x @ W.T + b``
(:mod:`attnkit.multi_head.params`). Bool masks mean ``True = may attend``: for
``key_padding_mask`` True marks a real key (PyTorch's module, the opposite, converts).

Example
-------

The whole layer (projections, heads, attention, output projection), d_model 512 in 8
heads of 64:

.. code-block:: python

    import attnkit as ak

    rng = np.random.default_rng(0)
    params = ak.init_multi_head_params(512, 8, rng=rng)  # PyTorch's init scheme, from an rng
    x = rng.standard_normal((4, 10, 512), dtype=np.float32)  # (batch, L, d_model)
    out, weights, _ = ak.multi_head_attention(x, params=params, num_heads=8, need_weights=True)
    # out (4, 10, 512); weights (4, 10, 10), averaged over heads (average_weights=False: per head)

Self- or cross-attention, GQA/MQA (`num_kv_heads`, key/value heads never copied),
masks, `window`, `is_causal`, dropout with `rng`, `add_zero_attn` and `bias_k`/`bias_v`
as PyTorch, rotary embeddings (`rope=ak.Rope(...)`, :mod:`attnkit.rope`) and a kv cache
(:mod:`attnkit.kv_cache`); each argument: ``help(attnkit.multi_head_attention)``.

The examples run on NumPy arrays, with NumPy imported as ``np``.
"""

from __future__ import annotations

from .init import init_multi_head_params
from .layer import MultiHeadOutput, multi_head_attention
from .params import MultiHeadParams
from .vjp import multi_head_attention_vjp

__all__ = [
    "MultiHeadOutput",
    "MultiHeadParams",
    "init_multi_head_params",
    "multi_head_attention",
    "multi_head_attention_vjp",
]

"""Multi-head attention written once: projections, heads, GQA/MQA, RoPE, kv cache.

Shape legend: ``...`` leading dims (batch), L query length, S key length, Dq/Dk/Dv the
query/key/value input features, Hq query heads, Hkv key/value heads (Hq % Hkv == 0:
MHA when equal, GQA when fewer, MQA when one), E features per head, Ev value features
per head, Do output features, T a kv cache's capacity.

Parameters follow ``torch.nn.Linear``'s layout, ``y = x @ W.T + b``, so a
``torch.nn.MultiheadAttention`` state dict maps onto them one to one
(:meth:`MultiHeadParams.from_packed` slices a packed ``in_proj_weight``; both live in
:mod:`attnkit.multi_head.params`).

Bool masks follow attnkit's convention everywhere, ``True = may attend`` (as JAX, Flax
and Keras): for ``key_padding_mask`` True marks a real key. PyTorch's module uses the
opposite convention; :class:`attnkit.backends.torch.nn.MultiheadAttention` converts.

Reference
---------

`ak.multi_head_attention` is the whole layer (projections, heads, attention, output
projection) written once against the array API; the seed's multi-head example, d_model
512 split into 8 heads of 64, on any backend:

.. code-block:: python

    import attnkit as ak

    rng = np.random.default_rng(0)
    params = ak.init_multi_head_params(512, 8, rng=rng)  # PyTorch's init scheme, from an rng
    x = rng.standard_normal((4, 10, 512), dtype=np.float32)  # (batch, L, d_model)
    out, weights, _ = ak.multi_head_attention(x, params=params, num_heads=8, need_weights=True)
    # out (4, 10, 512); weights (4, 10, 10), averaged over heads (average_weights=False: per head)

- Parameters are a `MultiHeadParams` named tuple (`q_weight`, `k_weight`, `v_weight`,
  `out_weight`, their biases, optional `bias_k`/`bias_v`) in `torch.nn.Linear`'s layout,
  so it is a JAX pytree; `MultiHeadParams.from_packed` slices PyTorch's `in_proj_weight`.
- Self-attention (`key=None`) or cross-attention with other key/value widths (`kdim`,
  `vdim`); `num_kv_heads` for GQA and MQA (the query is reshaped, key/value heads are
  never copied); `key_padding_mask` (..., S) and `attn_mask` (bool **True = may attend**,
  as everywhere in attnkit, or additive float), structured masks, `window`, `is_causal`;
  dropout with `rng`; `add_zero_attn` and `bias_k`/`bias_v` as PyTorch.
- Rotary embeddings: `rope=ak.Rope(base=10000.0, interleaved=False, rotary_dim=None)`
  (half-split as Llama in Hugging Face, or interleaved as GPT-J and RoFormer; partial
  rotary), `positions=` an offset or per-row positions; `ak.apply_rope` on its own. Tested
  against Hugging Face's Llama and GPT-J rotations.

The examples run on NumPy arrays, with NumPy imported as ``np`` (any array library
works the same way); ``tests/test_docstrings.py`` runs them.
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

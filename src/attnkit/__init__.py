"""attnkit: scaled dot-product attention and its family, written once against the array API.

The same code runs on NumPy, PyTorch, JAX and any array-API library (through
``array-api-compat``), on CPU or accelerator::

    import attnkit as ak
    out = ak.scaled_dot_product_attention(query, key, value, is_causal=True)

Modules: :mod:`attnkit.attention` (the entry point), :mod:`attnkit.explain`,
:mod:`attnkit.reference` (the plain formula), :mod:`attnkit.blocked` (the executor),
:mod:`attnkit.masks`, :mod:`attnkit.score_mods`, :mod:`attnkit.merge`, :mod:`attnkit.vjp`,
:mod:`attnkit.multi_head`, :mod:`attnkit.rope`, :mod:`attnkit.kv_cache`,
:mod:`attnkit.approx`, :mod:`attnkit.rollout`, :mod:`attnkit.errors`; the backends
:mod:`attnkit.backends`; the command line :mod:`attnkit.app`.

The core call: ``scaled_dot_product_attention``
-----------------------------------------------

The signature, sketched (each argument's contract:
``help(attnkit.scaled_dot_product_attention)``)::

    out = ak.scaled_dot_product_attention(
        query, key, value,                 # (..., Hq, L, E), (..., Hkv, S, E), (..., Hkv, S, Ev)
        attn_mask=None,                    # bool (True = may attend) | additive float (0 / -inf)
        dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,   # as torch names them
        *, causal_alignment="top_left",    # or "bottom_right" (FlashAttention, kv-cache decoding)
        window=None,                       # (left, right) or W = (W, W): query i sees keys
                                           # i-left .. i+right; None on a side = unbounded
        return_weights=False,              # -> (out, weights (..., Hq, L, S))
        return_lse=False,                  # -> (out, lse (..., Hq, L)); lse = -inf on empty rows
        q_offset=0, kv_offset=0,           # absolute positions of the first query / key
        rng=None,                          # numpy Generator | torch.Generator | JAX key (dropout)
        impl="auto",                       # "auto" | "generic" | "reference"
        block_size=None,                   # query rows per block (default: a cost model)
        score_mod=None,                    # f(scores, q_idx, kv_idx, head): ALiBi, softcap, ...
    )
    out, lse = ak.merge_partials([out_a, out_b], [lse_a, lse_b])   # attention over a ∪ b

It computes ``softmax(scale * q @ k^T + mask) @ v`` row by row, with
``scale = 1/sqrt(E)`` by default (:mod:`attnkit.reference` is that formula, plainly).
Semantics, each one a conformance case:

- Rank >= 2; leading dims broadcast by array-API rules; the 3-D `(batch, L, E)` and the
  2-D `(L, E)` work. Any finite scale, negative or tiny.
- GQA when `enable_gqa` and `Hq % Hkv == 0`: query head `h` uses key/value head
  `h // (Hq/Hkv)` (as PyTorch); key and value heads are never copied. A key or value of
  one head broadcasts to the other's heads; other unequal head counts raise a ShapeError.
- Causal alignment for `L = 2`, `S = 4`:

  ::

      top_left (PyTorch)      bottom_right (FlashAttention, decoding)
          k0 k1 k2 k3             k0 k1 k2 k3
      q0  x  .  .  .          q0  x  x  x  .
      q1  x  x  .  .          q1  x  x  x  x

  `bottom_right` is `top_left` with `q_offset` increased by `S - L`. With `q_offset` and
  `kv_offset` the causal and window rules compare absolute positions
  (`kv_offset + j <= q_offset + i`), so attention computed piece by piece (key blocks,
  a kv cache, ring attention) stays right.
- A query row with nothing to attend (fully masked, causal with `L > S`, a window out of
  reach) gives output 0, weights 0, lse `-inf` and gradient 0, never NaN.
- Masked positions never influence anything, on every path and kernel: masked scores
  are replaced with `where`, never added to, and a key/value row no query may attend
  cannot leak through `0 * NaN`. A value row that some query attends and that holds NaN
  may spread through `weights @ value`, as in every framework; a row that attends a NaN
  score gives NaN output and lse NaN.
- float16 and bfloat16 inputs accumulate scores and softmax in float32 and return their
  own dtype (the lse is float32); an additive float mask is converted to that compute
  dtype. Inputs must be float16, bfloat16, float32 or float64.
- Dropout only when `dropout_p > 0`, drawn from the explicit backend-native `rng` (no
  hidden random state); the weights returned are the ones applied. The pattern is drawn
  per query block, so it depends on `block_size`. JAX keys are not stateful: split them.
- `impl="reference"` is the plain full-matrix formula; `impl="generic"` the array-API
  executor in query blocks (memory O(block x S) unless weights are requested);
  `impl="auto"` the best exact path (`help(attnkit.backends)`). Results do not depend
  on `block_size`.
- With `return_weights`/`return_lse` the result is a named tuple (`AttentionWithWeights`,
  `AttentionWithLSE`, `AttentionWithWeightsAndLSE`) with `.output`, `.weights`, `.lse`.
- Masks of rank 0 or 1 (a key-padding row `(S,)`) broadcast like any other; PyTorch's
  `CausalBias` is accepted as `attn_mask`. Boolean arguments must be `True` or `False`.
- Every array created inside uses the inputs' namespace, dtype and device.

Bad input raises, before any work, a `ValueError` or `TypeError` subclass exported by
attnkit (`ShapeError`, `DTypeError`, `NamespaceMismatchError`, `DeviceMismatchError`,
`ParameterError`, `ArgumentTypeError`; all are `AttnkitError`), for example:

::

    ShapeError: key has 9 features on its last axis but query has 8: query (1, 1, 4, 8),
    key (1, 1, 4, 9), value (1, 1, 4, 8). Query and key must share E (value may differ).

Architecture
------------

Three layers, each importing only the ones below it: the application (`attnkit.app`,
`attnkit.viz`), the backends (`attnkit.backends`: one `Backend` per framework with its
kernels and front-ends) and the math (`attnkit`, importing no framework). In the math:
the public function `attention.py`, its checks `validation/`, the choice of path
`_dispatch.py` and `plan.py`, the executor `blocked/`, the plain formula `reference.py`
(the file to read first). A kernel must not change semantics: the conformance matrix
runs `auto`, `generic` and `reference` on every case.
"""

from __future__ import annotations

from . import approx, masks, score_mods
from .attention import (
    AttentionWithLSE,
    AttentionWithWeights,
    AttentionWithWeightsAndLSE,
    scaled_dot_product_attention,
)
from .errors import (
    ArgumentTypeError,
    AttnkitError,
    AttnkitWarning,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .explain import AttentionPlan, explain
from .kv_cache import KVCache, append_kv, init_kv_cache
from .merge import merge_partials
from .multi_head import MultiHeadOutput, MultiHeadParams, multi_head_attention
from .multi_head_init import init_multi_head_params
from .multi_head_vjp import multi_head_attention_vjp
from .rope import Rope, apply_rope
from .vjp import attention_vjp

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "AttentionPlan",
    "AttentionWithLSE",
    "AttentionWithWeights",
    "AttentionWithWeightsAndLSE",
    "AttnkitError",
    "AttnkitWarning",
    "DTypeError",
    "DeviceMismatchError",
    "KVCache",
    "MultiHeadOutput",
    "MultiHeadParams",
    "NamespaceMismatchError",
    "ParameterError",
    "Rope",
    "ShapeError",
    "__version__",
    "append_kv",
    "apply_rope",
    "approx",
    "attention_vjp",
    "explain",
    "init_kv_cache",
    "init_multi_head_params",
    "masks",
    "merge_partials",
    "multi_head_attention",
    "multi_head_attention_vjp",
    "scaled_dot_product_attention",
    "score_mods",
]

# The composition root: the backends register their lookup with the math
# (attnkit.registry), so the math finds them without importing them.
from . import backends as backends

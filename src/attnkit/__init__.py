"""attnkit: scaled dot-product attention and its family, written once against the array API.

The same code runs on NumPy, PyTorch, JAX and any array-API library (through
``array-api-compat``), on CPU or accelerator::

    import attnkit as ak
    out = ak.scaled_dot_product_attention(q, k, v, is_causal=True)
    # q (..., Hq, L, E), k (..., Hkv, S, E), v (..., Hkv, S, Ev) -> out (..., Hq, L, Ev)
    out, lse = ak.scaled_dot_product_attention(q, k, v, window=(128, 0), return_lse=True)
    out, lse = ak.merge_partials([out_a, out_b], [lse_a, lse_b])   # attention over a ∪ b

It computes ``softmax(scale * q @ k^T + mask) @ v`` row by row, ``scale = 1/sqrt(E)`` by
default, with PyTorch's argument names plus causal alignment, windows, absolute offsets,
weights, log-sum-exp, explicit dropout generators and score modifiers. Each argument's
contract, the alignment drawn and the plain code it equals:
``help(attnkit.scaled_dot_product_attention)``. The promises every path keeps (each one
a conformance case):

- A query row with nothing to attend gives output 0, weights 0, lse ``-inf`` and
  gradient 0, never NaN.
- Masked positions never influence anything: masked scores are replaced with ``where``,
  and a key/value row no query may attend cannot leak through ``0 * NaN``.
- float16 and bfloat16 accumulate in float32 and return their own dtype.
- ``impl="reference"`` is the plain formula, ``"generic"`` the array-API executor in
  query blocks, ``"auto"`` the best exact path (``help(attnkit.backends)``); results do
  not depend on ``block_size``.
- Every array created inside uses the inputs' namespace, dtype and device.

Bad input raises, before any work, a ``ValueError`` or ``TypeError`` subclass exported by
attnkit (``ShapeError``, ``DTypeError``, ``NamespaceMismatchError``,
``DeviceMismatchError``, ``ParameterError``, ``ArgumentTypeError``; all are
``AttnkitError``), naming the values and the fix::

    ShapeError: key has 9 features on its last axis but query has 8: query (1, 1, 4, 8),
    key (1, 1, 4, 9), value (1, 1, 4, 8). Query and key must share E (value may differ).

Modules: :mod:`attnkit.attention` (the entry point), :mod:`attnkit.explain`,
:mod:`attnkit.reference` (the plain formula, the file to read first),
:mod:`attnkit.blocked` (the executor), :mod:`attnkit.masks`, :mod:`attnkit.score_mods`,
:mod:`attnkit.merge`, :mod:`attnkit.vjp`, :mod:`attnkit.multi_head`, :mod:`attnkit.rope`,
:mod:`attnkit.kv_cache`, :mod:`attnkit.approx`, :mod:`attnkit.rollout`,
:mod:`attnkit.errors`. Three layers, each importing only the ones below it: the
application (:mod:`attnkit.app`, :mod:`attnkit.viz`), the backends
(:mod:`attnkit.backends`: one ``Backend`` per framework with its kernels and front-ends)
and the math (``attnkit``, importing no framework). In the math: the checks
``call_checks.py`` (arrays: ``array_checks.py``, structure: ``structure_checks.py``),
the choice of path ``plan.py`` and ``_dispatch.py``, the executor ``blocked/``, the NaN
guard ``nan_guard.py``, the backend lookup ``registry.py``; the multi-head layer
``multi_head/``, the ring's plan and key-block backward ``ring/``.
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
from .multi_head import (
    MultiHeadOutput,
    MultiHeadParams,
    init_multi_head_params,
    multi_head_attention,
    multi_head_attention_vjp,
)
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

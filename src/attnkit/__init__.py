"""attnkit: scaled dot-product attention and its family, written once against the array API.

The same code runs on NumPy, PyTorch, JAX and any array-API library (through
``array-api-compat``), on CPU or accelerator::

    import attnkit as ak
    out = ak.scaled_dot_product_attention(query, key, value, is_causal=True)

Modules: :mod:`attnkit.attention` (the entry point), :mod:`attnkit.explain` (what a
call runs), :mod:`attnkit.blocked` (the blocked executor), :mod:`attnkit.reference`
(the plain formula), :mod:`attnkit.softmax`,
:mod:`attnkit.masks` (structured masks: causal, windows, padding, documents, global
tokens, BigBird, block-sparse), :mod:`attnkit.score_mods` (ALiBi, soft-capping),
:mod:`attnkit.merge`
(log-sum-exp merging), :mod:`attnkit.multi_head` (projections, heads, GQA),
:mod:`attnkit.multi_head_init`, :mod:`attnkit.rope` (rotary embeddings),
:mod:`attnkit.kv_cache` (incremental decoding), :mod:`attnkit.approx` (Linformer,
Performer, Nystromformer), :mod:`attnkit.rollout` (aggregating attention weights,
rollout), :mod:`attnkit.errors`. The command line is the application, :mod:`attnkit.app`.
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

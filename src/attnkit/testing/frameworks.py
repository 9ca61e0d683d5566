"""The frameworks' attention and the conventions each follows: the one table that the
README's comparison, ``attnkit verify``'s findings and the reports' words read.

Each :class:`Framework` names the function, its ``adapter`` (``peers_torch``,
``peers_jax``), what it takes, its variant of each convention and its other behaviours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .conventions import CONVENTIONS, DEFAULTS
from .detect import Finding

__all__ = ["ATTNKIT", "FRAMEWORKS", "Framework", "by_key", "describe", "followers"]


@dataclass(frozen=True)
class Framework:
    """One attention implementation and the conventions it follows."""

    key: str  # short identifier, e.g. "jax_nn"
    name: str  # as a reader knows it, e.g. "jax.nn.dot_product_attention"
    short: str  # a table header, e.g. "`jax.nn.dot_product_attention`"
    library: str
    adapter: str  # "module:function" taking attnkit's call
    supports: frozenset[str]
    dtypes: tuple[str, ...]
    conventions: dict[str, str] = field(default_factory=dict)  # where not attnkit's
    behaviours: dict[str, str] = field(default_factory=dict)  # README rows in words
    gradients: bool = True

    def follows(self) -> dict[str, str]:
        """Every convention's variant for this framework."""
        return {**DEFAULTS, **self.conventions}

    def options(self) -> dict[str, object]:
        """What the framework's adapter declares to ``check_attention`` (library, supports,
        dtypes, gradients): the conventions are left for the caller to hold it to."""
        return {
            "library": self.library,
            "supports": self.supports,
            "dtypes": self.dtypes,
            "gradients": self.gradients,
        }


_ALL = ("float16", "bfloat16", "float32", "float64")

ATTNKIT = Framework(
    key="attnkit",
    name="attnkit.scaled_dot_product_attention",
    short="attnkit",
    library="any",
    adapter="attnkit.testing.adapters:attnkit_attention",
    supports=frozenset(
        {
            "attn_mask",
            "is_causal",
            "scale",
            "enable_gqa",
            "causal_alignment",
            "window",
            "q_offset",
            "kv_offset",
            "softcap",
        }
    ),
    dtypes=_ALL,
    behaviours={
        "fully masked row": "0 (gradient 0)",
        "`attn_mask` with `is_causal`": "combined (AND)",
        "float16 / bfloat16": "float32 accumulation",
        "value features Ev != E": "yes",
        "sliding window": "`window=(left, right)`",
        "position offsets": "`q_offset`, `kv_offset`",
        "weights returned": "`return_weights=True`",
        "GQA with key heads != value heads": "a one-head key or value broadcasts; other "
        "counts refused with the fix",
        "soft cap": "`score_mod=score_mods.softcap(c)`",
    },
)

_TORCH_BASIC = frozenset({"attn_mask", "is_causal", "scale", "enable_gqa"})

#: The frameworks' attention, each with the conventions the tests find it follows
#: (measured with torch 2.13.0, jax 0.10.2 and Keras 3.15 on CPU; ``tests`` re-measures).
FRAMEWORKS: tuple[Framework, ...] = (
    Framework(
        key="torch_sdpa",
        name="torch.nn.functional.scaled_dot_product_attention",
        short="torch `F.scaled_dot_product_attention`",
        library="torch",
        adapter="attnkit.testing.peers_torch:sdpa",
        supports=_TORCH_BASIC,
        dtypes=_ALL,
        conventions={"masked_key_nonfinite": "leaks", "masked_value_nonfinite": "leaks"},
        behaviours={
            "`attn_mask` with `is_causal`": "combined (AND) by the fused CPU kernel; "
            "refused by the math fallback (e.g. Ev != E)",
            "float16 / bfloat16": "float32 accumulation on CPU",
            "value features Ev != E": "yes",
            "sliding window": "dense mask only",
            "GQA with key heads != value heads": "computed (each repeated to Hq)",
        },
    ),
    Framework(
        key="torch_mha",
        name="torch.nn.MultiheadAttention",
        short="`torch.nn.MultiheadAttention`",
        library="torch",
        adapter="attnkit.testing.peers_torch:multihead_attention",
        supports=frozenset({"attn_mask"}),
        dtypes=("float64", "float32"),
        conventions={
            "mask_polarity": "true_masks",
            "empty_rows": "nan",
            "empty_rows_additive": "nan",
            "masked_key_nonfinite": "leaks",
            "masked_value_nonfinite": "leaks",
        },
        behaviours={
            "causal with L != S": "via `attn_mask` only",
            "value features Ev != E": "via `vdim`",
            "weights returned": "`need_weights=True`",
        },
    ),
    Framework(
        key="flex",
        name="torch.nn.attention.flex_attention",
        short="FlexAttention (eager)",
        library="torch",
        adapter="attnkit.testing.peers_torch:flex_attention",
        supports=ATTNKIT.supports,
        dtypes=("float64", "float32"),
        conventions={"masked_value_nonfinite": "leaks"},
        behaviours={
            "causal with L != S": "any rule, as a `mask_mod`",
            "`attn_mask` with `is_causal`": "one `mask_mod`",
            "value features Ev != E": "yes",
            "sliding window": "a `mask_mod` (`BlockMask` skips blocks)",
            "position offsets": "in the `mask_mod`",
            "weights returned": "`return_lse=True` (lse only)",
            "GQA with key heads != value heads": "refused",
            "soft cap": "a `score_mod`",
        },
        gradients=False,  # no backward pass on CPU
    ),
    Framework(
        key="jax_nn",
        name="jax.nn.dot_product_attention",
        short="`jax.nn.dot_product_attention`",
        library="jax",
        adapter="attnkit.testing.peers_jax:jax_nn",
        supports=frozenset({"attn_mask", "is_causal", "scale", "enable_gqa", "window"}),
        dtypes=("float64", "float32", "bfloat16"),  # float16: see its behaviours
        conventions={
            "empty_rows": "mean",
            "empty_rows_additive": "nan",
            "float64_precision": "float32",
            "masked_value_nonfinite": "leaks",
        },
        behaviours={
            "`attn_mask` with `is_causal`": "combined (AND)",
            "float16 / bfloat16": "float32 softmax; float16 refused under `jax.jit` on CPU",
            "value features Ev != E": "no (value must have key's shape)",
            "sliding window": "`local_window_size` (top-left positions, both sides bounded)",
            "weights returned": "`return_residual=True` (lse only)",
            "GQA with key heads != value heads": "refused",
        },
    ),
    Framework(
        key="keras",
        name="keras.ops.dot_product_attention",
        short="`keras.ops.dot_product_attention` (JAX)",
        library="jax",
        adapter="attnkit.testing.peers_jax:keras",
        supports=frozenset({"attn_mask", "is_causal", "scale", "enable_gqa", "softcap"}),
        dtypes=("float32", "bfloat16"),
        conventions={
            "empty_rows": "mean",
            "empty_rows_additive": "nan",
            "float64_precision": "float32",
            "masked_value_nonfinite": "leaks",
        },
        behaviours={
            "`attn_mask` with `is_causal`": "combined (AND)",
            "float64 inputs": "computed and returned as float32",
            "float16 / bfloat16": "float32 softmax; float16 refused under `jax.jit` on CPU",
            "value features Ev != E": "no (value must have key's shape)",
            "GQA with key heads != value heads": "refused",
            "soft cap": "`attn_logits_soft_cap` on TPU only (refused elsewhere)",
        },
    ),
)


def by_key(key: str) -> Framework:
    """The framework (or :data:`ATTNKIT`) with this key."""
    for f in (ATTNKIT, *FRAMEWORKS):
        if f.key == key:
            return f
    raise KeyError(key)


def followers(convention: str, variant: str) -> list[str]:
    """The frameworks (attnkit among them) that follow ``variant`` of ``convention``."""
    return [f.name for f in (ATTNKIT, *FRAMEWORKS) if f.follows()[convention] == variant]


def describe(finding: Finding) -> str:
    """A finding in words, with the frameworks that share it: ``rows with no allowed key
    give the mean of the values (uniform weights): the convention of
    jax.nn.dot_product_attention``."""
    if finding.ignored:
        return f"it ignores {finding.ignored}: its output equals attention without it"
    words = CONVENTIONS[finding.convention].variant(finding.variant).words
    who = followers(finding.convention, finding.variant)
    if not who:
        return words
    names = who[0] if len(who) == 1 else f"{', '.join(who[:-1])} and {who[-1]}"
    return f"{words}: the convention of {names}"

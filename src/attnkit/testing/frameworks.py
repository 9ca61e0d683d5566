"""The frameworks' attention and the conventions each follows: the one table that the
README's "Where attnkit differs from the frameworks", ``attnkit verify``'s findings and
the reports' words are all read from.

Each :class:`Framework` names the attention function, how the kit calls it (``adapter``:
a function taking attnkit's call, in :mod:`attnkit.testing.peers_torch` and
:mod:`attnkit.testing.peers_jax`), which keyword arguments and dtypes that call takes,
the variant of every convention where it is not attnkit's (:mod:`conventions`), and the
behaviours that are not conventions (what it refuses, what it lacks) in words. The
tests check every framework here with :func:`attnkit.testing.check_attention`: held to
these conventions it must come back ok, and checked without them the conventions it is
found to follow must be exactly these.
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
        "causal with L != S": "`top_left` or `bottom_right`",
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

FRAMEWORKS: tuple[Framework, ...] = ()  # filled below, once measured


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
    return f"{words}: the convention of {' and '.join(who)}"

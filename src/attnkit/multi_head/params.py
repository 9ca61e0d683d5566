"""The parameter arrays of one multi-head attention layer, their packed layout, and the
head counts that shape them.

``torch.nn.Linear``'s layout, ``y = x @ W.T + b``, so a ``torch.nn.MultiheadAttention``
state dict maps onto them one to one (:meth:`MultiHeadParams.from_packed` slices a packed
``in_proj_weight``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import ParameterError, ShapeError
from ..shapes import describe

__all__ = ["MultiHeadParams", "check_heads", "packed_split"]


class MultiHeadParams(NamedTuple):
    """The parameter arrays of one multi-head attention layer (a JAX pytree).

    ``q_weight`` (Hq*E, Dq), ``k_weight`` (Hkv*E, Dk), ``v_weight`` (Hkv*Ev, Dv),
    ``out_weight`` (Do, Hq*Ev); optional biases ``q_bias`` (Hq*E,), ``k_bias`` (Hkv*E,),
    ``v_bias`` (Hkv*Ev,), ``out_bias`` (Do,); optional ``bias_k`` (Hkv*E,) and
    ``bias_v`` (Hkv*Ev,): one learned key/value appended to every sequence
    (``add_bias_kv``).
    """

    q_weight: Any
    k_weight: Any
    v_weight: Any
    out_weight: Any
    q_bias: Any = None
    k_bias: Any = None
    v_bias: Any = None
    out_bias: Any = None
    bias_k: Any = None
    bias_v: Any = None

    @classmethod
    def from_packed(
        cls,
        in_proj_weight: Any,
        out_weight: Any,
        in_proj_bias: Any = None,
        out_bias: Any = None,
        *,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias_k: Any = None,
        bias_v: Any = None,
    ) -> MultiHeadParams:
        """From PyTorch's packed ``in_proj_weight`` ((Hq + 2 Hkv) * E, D): rows are the
        query, key and value projections stacked (views, no copies)."""
        q, k, v = packed_split(in_proj_weight, num_heads, num_kv_heads, "in_proj_weight")
        if in_proj_bias is None:
            qb = kb = vb = None
        else:
            qb, kb, vb = packed_split(in_proj_bias, num_heads, num_kv_heads, "in_proj_bias")
        return cls(q, k, v, out_weight, qb, kb, vb, out_bias, bias_k, bias_v)


def check_heads(num_heads: Any, num_kv_heads: Any) -> tuple[int, int]:
    """Validated (Hq, Hkv); Hkv defaults to Hq and must divide it."""
    for name, h in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        if h is None and name == "num_kv_heads":
            continue
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise ParameterError(f"{name} must be a positive int, got {h!r}.")
    hkv = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads % hkv:
        raise ParameterError(
            f"num_heads={num_heads} is not a multiple of num_kv_heads={hkv}; each key/value "
            "head serves num_heads / num_kv_heads query heads (GQA). Pick a divisor of "
            f"{num_heads} for num_kv_heads."
        )
    return num_heads, hkv


def packed_split(w: Any, num_heads: int, num_kv_heads: int | None, name: str) -> tuple:
    """Slice a packed ((Hq + 2 Hkv) * E, ...) projection into its q, k, v rows."""
    hq, hkv = check_heads(num_heads, num_kv_heads)
    groups = hq + 2 * hkv
    rows = w.shape[0] if w.ndim else 0
    if w.ndim not in (1, 2) or rows % groups:
        raise ShapeError(
            f"{name} must have (num_heads + 2 * num_kv_heads) * head_dim = {groups} * E rows, "
            f"got {name} {describe(w)}; check num_heads={hq} and num_kv_heads={hkv}."
        )
    e = rows // groups
    return w[: hq * e, ...], w[hq * e : (hq + hkv) * e, ...], w[(hq + hkv) * e :, ...]

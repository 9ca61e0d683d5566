"""attnkit.call_checks: the call's checks without the computation, and the executor's
block size with its budget shared among processes."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import problem

import attnkit
from attnkit import call_checks, plan
from attnkit.blocked import cost


def _qkv(rng: np.random.Generator, L: int = 4096, S: int = 4096) -> tuple[np.ndarray, ...]:
    q = rng.standard_normal((1, 8, L, 64)).astype(np.float32)
    k = rng.standard_normal((1, 8, S, 64)).astype(np.float32)
    v = rng.standard_normal((1, 8, S, 64)).astype(np.float32)
    return q, k, v


def test_check_call_raises_the_calls_own_errors() -> None:
    """The same exception type and message as the call itself, before any work."""
    rng = np.random.default_rng()
    q, k, v = _qkv(rng, 32, 48)
    bad = [
        dict(key=k[..., :-1]),  # head dims differ
        dict(scale=float("nan")),
        dict(key=k[:, :3], value=v[:, :3]),  # 8 query heads, 3 key heads, no enable_gqa
        dict(window=(-2, 3)),
        dict(dropout_p=1.5),
    ]
    for change in bad:
        args = dict(query=q, key=k, value=v) | change
        with pytest.raises(attnkit.AttnkitError) as from_check:
            call_checks.check_call(**args)
        with pytest.raises(attnkit.AttnkitError) as from_call:
            attnkit.scaled_dot_product_attention(**args)
        assert type(from_check.value) is type(from_call.value), (change, from_check.value)
        assert str(from_check.value) == str(from_call.value), change


def test_check_call_returns_the_call_info() -> None:
    rng = np.random.default_rng()
    q, k, v = _qkv(rng, 32, 48)
    p = call_checks.check_call(q, k, v, is_causal=True, causal_alignment="bottom_right")
    assert isinstance(p, call_checks.CallInfo)
    assert (p.L, p.S, p.Ev, p.out_lead, p.num_heads, p.gqa_groups) == (32, 48, 64, (1, 8), 8, 1)
    assert p.dtype == p.compute_dtype == np.float32
    assert p.scale == 1 / 8 and p.block_size is None
    assert p.structure == attnkit.masks.causal("bottom_right")


def test_default_block_size_is_the_executors_choice() -> None:
    rng = np.random.default_rng()
    qkv = _qkv(rng)
    p = problem(*qkv)
    assert plan.default_block_size(call_checks.check_call(*qkv)) == cost.choose_block_size(
        p, p.out_lead
    )


def test_default_block_size_shares_the_budget() -> None:
    """With the budget shared by P, a block's scores fit in 1/P of the default budget
    (rows x S x heads), down to the smallest block."""
    rng = np.random.default_rng()
    p = call_checks.check_call(*_qkv(rng))
    heads = 8
    sizes = {}
    for share in (1, 2, 4, 8):
        rows = plan.default_block_size(p, share=share)
        sizes[share] = rows
        assert rows == 16 or rows * p.S * heads <= cost.DEFAULT_BLOCK_BUDGET // share, (
            share,
            rows,
        )
    assert sizes[8] < sizes[1], sizes


@pytest.mark.parametrize("share", [0, -1, 1.5, True, "2"])
def test_default_block_size_refuses_a_bad_share(share: object) -> None:
    rng = np.random.default_rng()
    p = call_checks.check_call(*_qkv(rng, 16, 16))
    with pytest.raises(attnkit.ParameterError, match="share must be an int >= 1"):
        plan.default_block_size(p, share=share)  # type: ignore[arg-type]


def test_default_block_size_refuses_what_is_not_a_call_info() -> None:
    rng = np.random.default_rng()
    q = _qkv(rng, 16, 16)[0]
    with pytest.raises(attnkit.ArgumentTypeError, match=r"CallInfo that attnkit\.call_checks"):
        plan.default_block_size(q)  # type: ignore[arg-type]

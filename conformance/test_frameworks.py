"""attnkit against the frameworks' own attention, where they define the same thing.

On the torch backend each case marked ``frameworks`` is also run through
``torch.nn.functional.scaled_dot_product_attention``; on the jax backend through
``jax.nn.dot_product_attention``. Cases whose semantics differ are skipped with the
reason (the README's framework table lists these differences). Gradients are checked
with ``torch.autograd.gradcheck`` and ``jax.test_util.check_grads`` in float64.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from cases import CASES, Case
from harness import Backend, draw_inputs, full_inputs, to_backend
from test_matrix import _score_max

import attnkit as ak
from attnkit.testing import oracle as ref
from attnkit.testing.tolerances import assert_close, exact_allowed


def _framework_cases() -> list[Any]:
    return [pytest.param(c, id=c.name) for c in CASES if c.kind == "attention" and c.frameworks]


def _grad_cases() -> list[Any]:
    return [pytest.param(c, id=c.name) for c in CASES if c.kind == "attention" and c.grad]


@pytest.mark.parametrize("case", _framework_cases())
def test_against_framework(case: Case, backend: Backend) -> None:
    if backend.name not in ("torch", "jax"):
        pytest.skip(f"{backend.name} has no attention of its own to compare with")
    if case.dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} has no {case.dtype}")
    if backend.name == "jax" and case.dtype == "float64":
        # jax.nn.dot_product_attention computes float64 inputs at float32 precision (about
        # 1e-7 error, measured): compare both libraries in float32 instead.
        case = replace(case, dtype="float32")
    if backend.name == "jax" and case.v[-1] != case.k[-1]:
        # jax.nn.dot_product_attention needs Ev == E: compare with such a value instead.
        case = replace(case, v=(*case.v[:-1], case.k[-1]))
    inputs = draw_inputs(case)
    q64, k64, v64, m64 = full_inputs(inputs, case)
    gold = ref.attention(q64, k64, v64, attn_mask=m64, **case.kwargs)
    q, k, v, mask = to_backend(backend, inputs, case)
    ours = backend.to_numpy(
        backend.call(ak.scaled_dot_product_attention, q, k, v, attn_mask=mask, **case.kwargs)
    )
    theirs = (
        _torch_sdpa(case, q, k, v, mask)
        if backend.name == "torch"
        else _jax_nn(case, q, k, v, mask, gold)
    )
    allowed = 2 * exact_allowed(case.dtype, _score_max(case, q64, k64, m64), gold.out)
    ctx = f"case {case.name}, attnkit vs {backend.name}'s own attention, dtype {case.dtype}"
    assert_close("framework out", theirs, gold.out, allowed, ctx)
    assert_close("attnkit vs framework", ours, theirs, allowed, ctx)


def _torch_sdpa(case: Case, q, k, v, mask) -> np.ndarray:
    import torch.nn.functional as F

    kwargs = dict(case.kwargs)
    if "window" in kwargs or "q_offset" in kwargs or "kv_offset" in kwargs:
        pytest.skip("torch SDPA has no window or position offsets")
    if kwargs.get("causal_alignment", "top_left") != "top_left":
        pytest.skip("torch SDPA's is_causal is top-left aligned only")
    if mask is not None and kwargs.get("is_causal"):
        pytest.skip("torch SDPA refuses attn_mask together with is_causal")
    kwargs.pop("causal_alignment", None)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs).double().numpy()


def _jax_nn(case: Case, q, k, v, mask, gold: ref.Result) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    kwargs = dict(case.kwargs)
    if "window" in kwargs or "q_offset" in kwargs or "kv_offset" in kwargs:
        pytest.skip("compared only without windows and offsets")
    if np.isneginf(gold.lse).any():
        pytest.skip(
            "jax.nn.dot_product_attention returns mean(value) on rows with nothing to attend"
        )
    if q.ndim not in (3, 4) or not (q.shape[:-3] == k.shape[:-3] == v.shape[:-3]):
        pytest.skip("jax.nn.dot_product_attention takes (B, T, N, H) with one batch size")
    if q.shape[-2] != k.shape[-2] and kwargs.get("is_causal"):
        pytest.skip("compared only on square causal attention")
    if q.ndim == 4 and (k.shape[-3] != v.shape[-3] or q.shape[-3] % k.shape[-3]):
        pytest.skip("jax.nn needs equal key/value heads dividing the query heads")

    def bthd(x):  # (B, N, T, H) -> (B, T, N, H); a 3-D (B, T, H) gets N = 1
        return x[:, :, None, :] if x.ndim == 3 else jnp.swapaxes(x, 1, 2)

    extra: dict[str, Any] = {
        "scale": kwargs.get("scale"),
        "is_causal": kwargs.get("is_causal", False),
    }
    if mask is not None:
        m = jnp.broadcast_to(mask, (*gold.out.shape[:-2], q.shape[-2], k.shape[-2]))
        m = m[:, None] if m.ndim == 3 else m  # (B, N, T, S)
        if m.dtype == jnp.bool_:
            extra["mask"] = m
        else:
            extra["bias"] = m
    out = jax.nn.dot_product_attention(bthd(q), bthd(k), bthd(v), **extra)
    out = out[:, :, 0, :] if q.ndim == 3 else jnp.swapaxes(out, 1, 2)
    return (
        np.asarray(out.astype(jnp.float64))
        if q.dtype != jnp.float32
        else np.asarray(out, np.float64)
    )


@pytest.mark.parametrize("case", _grad_cases())
def test_gradcheck(case: Case, backend: Backend) -> None:
    """Finite differences against autodiff in float64 (torch gradcheck, jax check_grads)."""
    if backend.name not in ("torch", "jax"):
        pytest.skip(f"{backend.name} has no automatic differentiation")
    inputs = draw_inputs(case)
    q, k, v, mask = to_backend(backend, inputs, case)
    kwargs = dict(case.kwargs)
    if backend.name == "torch":
        import torch

        leaves = tuple(x.detach().clone().requires_grad_(True) for x in (q, k, v))

        def fn(q, k, v):
            return ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)

        assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)
        out = fn(*leaves)
        grads = torch.autograd.grad(out.sum(), leaves)
        assert all(bool(torch.isfinite(g).all()) for g in grads), "gradients must be finite"
    else:
        import jax
        from jax.test_util import check_grads

        def fn(q, k, v):
            return ak.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)

        check_grads(jax.jit(fn), (q, k, v), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)

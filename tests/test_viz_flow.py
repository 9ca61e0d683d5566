"""attnkit.viz.attention_flow against an independent textbook max-flow.

The oracle builds the whole layered graph of Abnar & Zuidema (2020) (N + 1 layers of L
nodes, every node, capacities by explicit loops from the definition) as a capacity dict
and runs Edmonds-Karp (BFS shortest augmenting paths) on it; attention_flow runs Dinic's
algorithm on a reduced graph. Plus hand-computable cases and cut bounds.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

import attnkit as ak
from attnkit import viz


def softmax_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random attention weights: a softmax of standard normal scores, rows sum to 1."""
    scores = np.random.default_rng(seed).standard_normal(shape) * 2.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def augmented_loops(w: np.ndarray, residual: float, head: str) -> list[list[list[float]]]:
    """Ã_n[i][j] by loops: (1 - r) * combine_heads(W_n)[i, j] + r * [i == j], rows / sum."""
    n_layers, n_heads, length, _ = w.shape
    out = []
    for n in range(n_layers):
        a = []
        for i in range(length):
            row = []
            for j in range(length):
                per_head = [float(w[n, h, i, j]) for h in range(n_heads)]
                combined = sum(per_head) / n_heads if head == "mean" else max(per_head)
                row.append((1 - residual) * combined + residual * (i == j))
            total = sum(row)
            a.append([x / total for x in row])
        out.append(a)
    return out


def edmonds_karp(cap: dict[tuple, float], s: object, t: object) -> float:
    """Textbook Edmonds-Karp on a capacity dict {(u, v): c}: the maximum s -> t flow."""
    residual: dict[tuple, float] = dict(cap)
    neighbours: dict[object, set] = {}
    for u, v in cap:
        residual.setdefault((v, u), 0.0)
        neighbours.setdefault(u, set()).add(v)
        neighbours.setdefault(v, set()).add(u)
    total = 0.0
    while True:
        parent = {s: None}
        queue = deque([s])
        while queue and t not in parent:
            u = queue.popleft()
            for v in neighbours.get(u, ()):
                if v not in parent and residual[(u, v)] > 1e-14:
                    parent[v] = u
                    queue.append(v)
        if t not in parent:
            return total
        path, v = [], t
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        push = min(residual[e] for e in path)
        for u, v in path:
            residual[(u, v)] -= push
            residual[(v, u)] += push
        total += push


def flow_reference(w: np.ndarray, residual: float, head: str, depth: int) -> np.ndarray:
    """flow[i, j]: Edmonds-Karp from node (0, j) to node (depth, i) of the full graph."""
    a = augmented_loops(w, residual, head)
    length = w.shape[-1]
    cap = {
        ((n, j), (n + 1, i)): a[n][i][j]
        for n in range(depth)
        for i in range(length)
        for j in range(length)
    }
    return np.array(
        [[edmonds_karp(cap, (0, j), (depth, i)) for j in range(length)] for i in range(length)]
    )


CASES = [  # (N, H, L, residual, head, seed)
    (1, 2, 4, 0.5, "mean", 1),
    (2, 3, 4, 0.5, "mean", 2),
    (3, 2, 5, 0.5, "mean", 3),
    (3, 4, 3, 0.2, "max", 4),
    (4, 1, 4, 0.0, "mean", 5),
    (2, 2, 6, 0.9, "max", 6),
    (3, 3, 1, 0.5, "mean", 7),
]


@pytest.mark.parametrize(("n_layers", "n_heads", "length", "residual", "head", "seed"), CASES)
def test_flow_matches_edmonds_karp(
    n_layers: int, n_heads: int, length: int, residual: float, head: str, seed: int
) -> None:
    w = softmax_weights((n_layers, n_heads, length, length), seed)
    got = viz.attention_flow(w, residual=residual, head=head)
    steps = viz.attention_flow(w, residual=residual, head=head, all_layers=True)
    assert got.dtype == np.float64 and got.shape == (length, length)
    assert steps.shape == (n_layers, length, length)
    for depth in range(1, n_layers + 1):
        expected = flow_reference(w, residual, head, depth)
        err = np.max(np.abs(steps[depth - 1] - expected))
        assert err < 1e-12, f"depth {depth}: flow error {err:.2e} > 1e-12, w {w.shape}"
    assert np.max(np.abs(got - steps[-1])) == 0.0


def test_one_layer_flow_is_the_edge_capacity() -> None:
    # One layer: a single edge j -> i, so the flow is 0.5 W[i, j] + 0.5 [i == j] (<= 1).
    w = softmax_weights((1, 1, 5, 5), seed=8)
    expected = 0.5 * w[0, 0] + 0.5 * np.eye(5)  # rows already sum to 1
    assert np.max(np.abs(viz.attention_flow(w) - np.minimum(1.0, expected))) < 1e-15


def test_two_layer_flow_by_hand() -> None:
    # Two layers: the paths j -> k -> i are disjoint, so the flow is
    # sum_k min(Ã_0[k, j], Ã_1[i, k]).
    w = softmax_weights((2, 3, 4, 4), seed=9)
    a = np.array(augmented_loops(w, 0.5, "mean"))  # (2, L, L)
    expected = np.array(
        [[sum(min(a[0, k, j], a[1, i, k]) for k in range(4)) for j in range(4)] for i in range(4)]
    )
    assert np.max(np.abs(viz.attention_flow(w) - expected)) < 1e-14


def test_flow_is_within_its_cuts() -> None:
    w = softmax_weights((4, 3, 8, 8), seed=10)
    a = np.array(augmented_loops(w, 0.5, "mean"))  # (N, L, L)
    steps = viz.attention_flow(w, all_layers=True)  # (N, L, L)
    assert np.all(steps >= 0.0)
    for depth in range(1, 5):
        flow = steps[depth - 1]
        source_cut = a[0].sum(axis=0)  # every edge out of (0, j)
        sink_cut = a[depth - 1].sum(axis=1)  # every edge into (depth, i): rows sum to 1
        assert np.all(flow <= source_cut[None, :] + 1e-12)
        assert np.all(flow <= sink_cut[:, None] + 1e-12)
        if depth > 1:  # more layers never add flow: (depth) paths extend (depth-1) paths
            assert np.all(flow <= steps[depth - 2].sum(axis=0)[None, :] + 1e-12)


def test_empty_rows_give_no_nan() -> None:
    w = softmax_weights((2, 2, 4, 4), seed=11)
    w[:, :, 2] = 0.0  # query 2 attends nothing; with residual 0 its node takes no flow
    flow = viz.attention_flow(w, residual=0.0)
    assert not np.isnan(flow).any()
    assert np.all(flow[2] == 0.0)


def test_flow_from_torch_jax_and_a_layer_list() -> None:
    w = softmax_weights((3, 2, 5, 5), seed=12)
    expected = viz.attention_flow(w)
    hf_tuple = [w[n][None] for n in range(3)]  # Hugging Face: N arrays (1, H, L, L)
    assert np.max(np.abs(viz.attention_flow(hf_tuple) - expected)) == 0.0
    torch = pytest.importorskip("torch")
    got = viz.attention_flow(torch.from_numpy(w).requires_grad_(True))
    assert isinstance(got, np.ndarray) and np.max(np.abs(got - expected)) < 1e-15
    jnp = pytest.importorskip("jax.numpy")
    got = viz.attention_flow(jnp.asarray(w.astype(np.float32)))
    assert np.max(np.abs(got - viz.attention_flow(w.astype(np.float32)))) < 1e-12


@pytest.mark.parametrize(
    ("kwargs", "shape", "error", "match"),
    [
        ({"max_tokens": 4}, (2, 2, 5, 5), ak.ParameterError, r"L=5.*max_tokens=4.*rollout"),
        ({"max_tokens": 0}, (2, 2, 3, 3), ak.ParameterError, "max_tokens must be"),
        ({"residual": 2.0}, (2, 2, 3, 3), ak.ParameterError, r"\[0, 1\]"),
        ({"residual": "half"}, (2, 2, 3, 3), ak.ParameterError, "residual must be"),
        ({"head": "min"}, (2, 2, 3, 3), ak.ParameterError, "head must be one of"),
        ({}, (2, 2, 3, 4), ak.ShapeError, "self-attention"),
        ({}, (2, 3, 3), ak.ShapeError, r"\(N, H, L, L\)"),
        ({}, (2, 2, 2, 3, 3), ak.ShapeError, "one sequence"),
    ],
)
def test_bad_input_raises(kwargs: dict, shape: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        viz.attention_flow(softmax_weights(shape, seed=13), **kwargs)

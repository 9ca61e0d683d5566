"""Attention flow (Abnar & Zuidema 2020): a maximum flow per (output, input) token pair.

The layers' residual-augmented attention matrices (rollout's) are the capacities of a
graph of N + 1 layers of L nodes::

    layer 0 (input tokens)   j  ──Ã_0[i, j]──▶  i   layer 1  ──Ã_1──▶ ... ──▶  layer N

    Ã_n = residual * I + (1 - residual) * combine_heads(W_n), each row divided by its sum

``flow[i, j]`` is the max-flow from node j of layer 0 to node i of layer N, in [0, 1].
It costs about N L^4, so :func:`attention_flow` refuses more than ``max_tokens`` tokens.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from attnkit.errors import ParameterError, ShapeError
from attnkit.rollout import AGGREGATES, check_residual
from attnkit.shapes import describe

from ._checks import as_weights, check_choice, squeeze_to
from .plots import to_numpy

__all__ = ["attention_flow"]

# Residual capacities at or below this are treated as saturated: the capacities are
# shares in [0, 1] summed over at most a few thousand paths, so 1e-13 is far above the
# float64 rounding of the sums and far below any weight worth drawing.
_EPS = 1e-13


def _augmented(w: np.ndarray, residual: float, head: str) -> np.ndarray:
    """Ã_n for every layer: (N, H, L, L) -> (N, L, L), as :func:`attnkit.rollout` builds it."""
    combined = w.mean(axis=1) if head == "mean" else w.max(axis=1)  # (N, L, L)
    a = (1.0 - residual) * combined + residual * np.eye(w.shape[-1])  # (N, L, L)
    total = a.sum(axis=-1, keepdims=True)  # (N, L, 1)
    return a / np.where(total > 0, total, 1.0)  # a zero row stays zero, as in rollout


class _Graph:
    """The inner layers 1 .. depth-1 of the layered graph, with a source and a sink slot.

    Nodes: 0 the source (input token j), 1 + (n - 1) L + k node k of layer n, and V - 1
    the sink (output token i). Edges are stored in pairs (e, e ^ 1: forward, reverse).
    Only the source's and the sink's capacities change from one token pair to the next.
    """

    def __init__(self, a: np.ndarray) -> None:
        depth, L, _ = a.shape  # a: (depth, L, L), depth >= 2
        self.L, self.V = L, (depth - 1) * L + 2
        self.head: list[int] = []
        self.cap: list[float] = []
        self.adj: list[list[int]] = [[] for _ in range(self.V)]
        self.source_edges = [self._add(0, 1 + k, 0.0) for k in range(L)]
        for n in range(1, depth - 1):
            rows = a[n].tolist()  # rows[m][k]: capacity from node k (layer n) to m (n + 1)
            for k in range(L):
                u = 1 + (n - 1) * L + k
                for m in sorted(range(L), key=lambda m: -rows[m][k]):  # widest first
                    if rows[m][k] > 0.0:
                        self._add(u, 1 + n * L + m, rows[m][k])
        last = 1 + (depth - 2) * L
        self.sink_edges = [self._add(last + k, self.V - 1, 0.0) for k in range(L)]

    def _add(self, u: int, v: int, c: float) -> int:
        self.adj[u].append(len(self.head))
        self.head += [v, u]
        self.cap += [c, 0.0]
        self.adj[v].append(len(self.head) - 1)
        return len(self.head) - 2

    def max_flow(self, source_caps: list[float], sink_caps: list[float]) -> float:
        """Dinic's algorithm: BFS levels, then blocking flows by depth-first search."""
        cap = self.cap.copy()
        for e, c in zip(self.source_edges, source_caps, strict=True):
            cap[e] = c
        for e, c in zip(self.sink_edges, sink_caps, strict=True):
            cap[e] = c
        head, adj, V, s, t = self.head, self.adj, self.V, 0, self.V - 1
        bound = min(sum(source_caps), sum(sink_caps))
        total = 0.0
        while total < bound - _EPS:
            level = [-1] * V
            level[s] = 0
            queue = deque([s])
            while queue:
                u = queue.popleft()
                for e in adj[u]:
                    if level[head[e]] < 0 and cap[e] > _EPS:
                        level[head[e]] = level[u] + 1
                        queue.append(head[e])
            if level[t] < 0:
                break  # no augmenting path left: total is the min cut
            total += self._blocking_flow(cap, level)
        return min(total, bound)  # the sum of pushes may pass the bound by a rounding

    def _blocking_flow(self, cap: list[float], level: list[int]) -> float:
        head, adj, t = self.head, self.adj, self.V - 1
        arc = [0] * self.V  # current arc of each node (Dinic)
        pushed = 0.0
        while True:
            path: list[int] = []  # edges from the source to the node on top
            u = 0
            while u != t:
                edges = adj[u]
                while arc[u] < len(edges):
                    e = edges[arc[u]]
                    if cap[e] > _EPS and level[head[e]] == level[u] + 1:
                        break
                    arc[u] += 1
                if arc[u] < len(edges):
                    path.append(edges[arc[u]])
                    u = head[path[-1]]
                elif path:  # dead end: retreat, and never try this node's arcs again
                    level[u] = -1
                    u = head[path.pop() ^ 1]
                    arc[u] += 1
                else:
                    return pushed
            f = min(cap[e] for e in path)
            for e in path:
                cap[e] -= f
                cap[e ^ 1] += f
            pushed += f


def _flow_to(a: np.ndarray) -> np.ndarray:
    """(depth, L, L) capacities -> (L, L) max-flows from layer 0 to layer ``depth``."""
    depth, L, _ = a.shape
    if depth == 1:
        return a[0].copy()  # one edge j -> i: the flow is its capacity
    graph = _Graph(a)
    first, last = a[0].T.tolist(), a[-1].tolist()  # first[j][k] = Ã_0[k, j]; last[i][k]
    out = np.empty((L, L))
    for i in range(L):
        for j in range(L):
            out[i, j] = graph.max_flow(first[j], last[i])
    return out


def attention_flow(
    weights: Any,
    *,
    residual: float = 0.5,
    head: str = "mean",
    all_layers: bool = False,
    max_tokens: int = 64,
) -> np.ndarray:
    """Attention flow (Abnar & Zuidema 2020): max-flow from each input to each output token.

    Args:
        weights: self-attention weights ``(N, H, L, L)`` or a list of N layers
            ``(H, L, L)``, layer 0 first, from any backend (leading axes of size 1 are
            dropped, so Hugging Face's tuple of ``(1, H, L, L)`` works as it is).
        residual: the identity's share in [0, 1] (the paper uses 0.5), as for rollout.
        head: how each layer's heads are combined, ``"mean"`` or ``"max"``, as for rollout.
        all_layers: return the flow to every depth, ``(N, L, L)``: entry ``n`` is the flow
            from layer 0 to the outputs of layer ``n`` (through Ã_0 .. Ã_n).
        max_tokens: refuse inputs of more than this many tokens (the cost grows like
            N L^4: L^2 max-flows on N L^2 edges).

    Returns:
        NumPy float64 ``(L, L)`` (or ``(N, L, L)``): ``flow[i, j]`` the max-flow from input
        token ``j`` to output token ``i``, in [0, 1] (up to float64 rounding). For one
        layer it is Ã_0 itself.

    Raises:
        ParameterError: bad ``residual``, ``head``, ``max_tokens``, or L > ``max_tokens``.
        ShapeError: weights that are not a stack of self-attention layers.
    """
    check_choice("head", head, AGGREGATES)
    check_residual(residual)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ParameterError(f"max_tokens must be a positive int, got {max_tokens!r}.")
    xp, w = as_weights("weights", weights)
    fix = "pass one sequence's layers, e.g. weights[:, 0] for the first of a batch."
    w = squeeze_to("weights", xp, w, 4, "(N, H, L, L)", fix)
    N, H, L, S = w.shape
    if L != S or N == 0 or H == 0:
        raise ShapeError(
            "attention_flow needs self-attention weights (N, H, L, L) with N, H >= 1, got "
            f"{describe(w)}; the flow runs through the layers, so queries and keys must be "
            "the same L tokens."
        )
    if L > max_tokens:
        raise ParameterError(
            f"attention_flow got L={L} tokens, more than max_tokens={max_tokens}: it "
            f"solves L^2 max-flows on N L^2 edges (cost ~ N L^4, here N={N}); pass "
            f"max_tokens={L} to wait for it, or use attnkit.viz.rollout (matrix products)."
        )
    a = _augmented(np.asarray(to_numpy(xp, w), dtype=np.float64), residual, head)  # (N, L, L)
    if not all_layers:
        return _flow_to(a)  # (L, L)
    return np.stack([_flow_to(a[: n + 1]) for n in range(N)])  # (N, L, L)

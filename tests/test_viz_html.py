"""attnkit.viz.AttentionView in Python: the page's data, its options and its errors.

The page's data is decoded back from the HTML and compared with the inputs: weights at
8 bits relative to each head's maximum (at most 1/510 of it off), query/key vectors at
8 bits relative to each head's largest magnitude (at most 1/254 of it off), the rollout
and the attention flow. The page in a browser: tests/test_viz_page.py.
"""

from __future__ import annotations

import base64
import html
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import attnkit as ak
from attnkit import viz
from attnkit.viz.page_sentence import FLOW_TOKENS

N, H, L = 2, 3, 6
TOKENS = ["[CLS]", "a", "</script><b>x</b>", "cat", "sat", "[SEP]"]


def softmax_weights(shape: tuple[int, ...], seed: int) -> np.ndarray:
    scores = np.random.default_rng(seed).standard_normal(shape) * 2.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def payload(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', page, re.S)
    assert match, "the page has no data element"
    return json.loads(match.group(1))


def unpack(text: str, encoding: str) -> bytes:
    raw = base64.b64decode(text)
    return zlib.decompress(raw) if encoding == "u8-deflate" else raw


def decode(entry: dict[str, Any], encoding: str, L: int, S: int) -> np.ndarray:
    codes = np.frombuffer(unpack(entry["data"], encoding), dtype=np.uint8)
    codes = codes.reshape(len(entry["heads"]), L, S)
    return codes / 255.0 * np.asarray(entry["scales"])[:, None, None]


def decode_vectors(part: dict[str, Any], encoding: str, shape: tuple[int, ...]) -> np.ndarray:
    codes = np.frombuffer(unpack(part["data"], encoding), dtype=np.uint8).reshape(shape)
    return (codes.astype(np.float64) - 128) / 127.0 * np.asarray(part["scales"])[:, None, None]


def check_close(got: np.ndarray, want: np.ndarray, allowed: Any, what: str) -> None:
    err = np.abs(got - want)
    assert np.all(err <= allowed), f"{what}: max error {err.max():.3g}, allowed {allowed}"


@pytest.mark.parametrize("compress", [True, False])
def test_page_data_round_trips(compress: bool) -> None:
    rng = np.random.default_rng(1)
    w = softmax_weights((N, H, L, L), seed=1)
    q = rng.standard_normal((N, H, L, 8))
    k = rng.standard_normal((N, 1, L, 8)) * 3.0  # one key head for three query heads (GQA)
    page = viz.to_html(w, TOKENS, queries=q, keys=k, scale=0.3, compress=compress)
    data = payload(page)
    (s,) = data["sentences"]
    assert s["queries"] == TOKENS and s["keys"] == TOKENS
    assert [e["name"] for e in s["layers"]] == ["layer 0", "layer 1"]
    for n in range(N):
        allowed = w[n].max(axis=(-2, -1), keepdims=True) / 510 + 1e-12
        check_close(decode(s["layers"][n], data["encoding"], L, L), w[n], allowed, f"layer {n}")
    rollout = viz.rollout(w, all_layers=True)  # (N, L, L)
    got = decode(s["rollout"], data["encoding"], L, L)
    check_close(got, rollout, rollout.max() / 510 + 1e-12, "rollout")
    vectors = s["vectors"]
    assert (vectors["dim"], vectors["kv_heads"], vectors["scale"]) == (8, 1, 0.3)
    for n in range(N):
        got_q = decode_vectors(vectors["layers"][n]["q"], data["encoding"], (H, L, 8))
        got_k = decode_vectors(vectors["layers"][n]["k"], data["encoding"], (1, L, 8))
        check_close(got_q, q[n], np.abs(q[n]).max(axis=(-2, -1), keepdims=True) / 254, "q")
        check_close(got_k, k[n], np.abs(k[n]).max() / 254 + 1e-12, "k")


def test_flow_is_in_the_page_for_short_sentences() -> None:
    w = softmax_weights((N, H, L, L), seed=2)
    data = payload(viz.to_html(w, TOKENS))
    flow = data["sentences"][0]["flow"]
    want = viz.attention_flow(w)  # (L, L)
    got = decode(flow, data["encoding"], L, L)[0]
    check_close(got, want, want.max() / 510 + 1e-12, "attention flow")
    n = FLOW_TOKENS + 1
    long = payload(viz.to_html(softmax_weights((1, 1, n, n), seed=3)))["sentences"][0]
    assert "data" not in long["flow"] and f"up to {FLOW_TOKENS} tokens" in long["flow"]["note"]
    assert "data" not in payload(viz.to_html(w, flow=False))["sentences"][0]["flow"]
    with pytest.raises(ak.ShapeError, match="flow=True needs self-attention"):
        viz.AttentionView(softmax_weights((1, 1, 3, 4), seed=4), flow=True)
    with pytest.raises(ak.ParameterError, match=r"view='flow' is not in this page"):
        viz.AttentionView(softmax_weights((1, 1, n, n), seed=3), view="flow")


def test_page_is_self_contained_and_escaped() -> None:
    page = viz.to_html(softmax_weights((N, H, L, L), seed=2), TOKENS, title="<T&>")
    assert "<title>&lt;T&amp;&gt;</title>" in page
    assert page.count("</script>") == 2  # the data and the code: no token closes them
    for pattern in (r"https?://", r"\ssrc=", r"<link", r"@import", r"url\("):
        assert not re.search(pattern, page), f"the page references something outside: {pattern}"
    assert "default-src 'none'" in page  # and a CSP forbids it anyway


def test_initial_view_options() -> None:
    w = softmax_weights((N, H, L, 4), seed=3)  # L != S: no rollout, no flow
    view = viz.AttentionView(w, TOKENS, key_tokens=list("wxyz"), layer=1, head="max")
    data = payload(view.to_html())
    assert data["initial"]["heads"] == [0, 1, 2] and data["initial"]["combine"] == "max"
    assert data["initial"]["layer"] == 1 and data["sentences"][0]["rollout"] is None
    assert data["sentences"][0]["keys"] == list("wxyz")
    one_head = payload(viz.to_html(w[0, 0]))["sentences"][0]  # (L, S): one layer, one head
    assert len(one_head["layers"]) == 1 and one_head["layers"][0]["heads"] == ["head 0"]
    subset = payload(viz.to_html(w, heads=[2, 0], head="mean"))["initial"]
    assert subset["heads"] == [0, 2] and subset["combine"] == "mean"
    lines = payload(viz.to_html(softmax_weights((N, H, L, L), seed=5), view="lines"))
    assert lines["initial"]["view"] == "head"  # the former name of the head view
    rolled = payload(viz.to_html(softmax_weights((N, H, L, L), seed=5), view="rollout"))
    assert rolled["initial"]["depth"] == N - 1


def test_view_errors() -> None:
    w = softmax_weights((N, H, L, 4), seed=3)
    square = softmax_weights((N, H, L, L), seed=4)
    rng = np.random.default_rng(5)
    cases = [
        (ak.ShapeError, "L == S", dict(rollout=True)),
        (ak.ParameterError, r"layer must be an int in 0\.\.1", dict(layer=2)),
        (ak.ParameterError, r"0\.\.2 or one of 'mean', 'max', 'all'", dict(head=3)),
        (ak.ParameterError, "view must be one of", dict(view="chord")),
        (ak.ShapeError, "key_tokens has 3 entries", dict(key_tokens=list("xyz"))),
        (ak.ParameterError, r"heads\[\.\.\.\] must be an int in 0\.\.2", dict(heads=[0, 5])),
        (ak.ParameterError, "needs the query and key vectors", dict(view="neuron")),
        (ak.ParameterError, "view='rollout' is not in this page", dict(view="rollout")),
        (ak.ParameterError, "keys is missing", dict(queries=rng.standard_normal((N, H, L, 8)))),
        (ak.ParameterError, "scale is given without", dict(scale=0.5)),
    ]
    for error, match, options in cases:
        with pytest.raises(error, match=match):
            viz.AttentionView(w, TOKENS, **options)
    q = rng.standard_normal((N, H, L, 8))
    bad_vectors = [
        ("do not match the weights' \\(N, H, L\\)", q[:, :2], rng.standard_normal((N, 1, L, 8))),
        ("H = 3 a multiple of Hkv", q, rng.standard_normal((N, 2, L, 8))),
        ("queries have 8 features but keys 4", q, rng.standard_normal((N, 1, L, 4))),
    ]
    for match, queries, keys in bad_vectors:
        with pytest.raises(ak.ShapeError, match=match):
            viz.AttentionView(square, queries=queries, keys=keys)
    with pytest.raises(ak.ParameterError, match="scale must be a number"):
        viz.AttentionView(square, queries=q, keys=q, scale="big")


def test_batch_of_sentences() -> None:
    a = softmax_weights((N, H, 4, 4), seed=6)
    b = softmax_weights((N, H, 7, 7), seed=7)
    view = viz.AttentionView.batch(
        [{"weights": a, "tokens": list("abcd")}, {"weights": b}],
        names=["short", "long"],
        sentence=1,
        head="all",
    )
    data = payload(view.to_html())
    assert [s["name"] for s in data["sentences"]] == ["short", "long"]
    assert data["sentences"][1]["keys"] == [str(i) for i in range(7)]
    assert data["initial"]["sentence"] == 1 and "sentences=2" in repr(view)
    got = decode(data["sentences"][1]["layers"][1], data["encoding"], 7, 7)
    check_close(got, b[1], b[1].max(axis=(-2, -1), keepdims=True) / 510 + 1e-12, "sentence 1")
    errors = [
        (ak.ArgumentTypeError, "must be a list of dicts", {"weights": a}),
        (ak.ShapeError, "sentences is empty", []),
        (ak.ArgumentTypeError, r"sentences\[0\] must be a dict with at least 'weights'", [a]),
        (ak.ParameterError, r"unknown keys \['token'\]", [{"weights": a, "token": []}]),
        (ak.ShapeError, "one page shows one model", [{"weights": a}, {"weights": b[:, :2]}]),
    ]
    for error, match, sentences in errors:
        with pytest.raises(error, match=match):
            viz.AttentionView.batch(sentences)
    with pytest.raises(ak.ShapeError, match="names must be a list of 2 strings"):
        viz.AttentionView.batch([{"weights": a}, {"weights": b}], names=["x"])
    with pytest.raises(ak.ParameterError, match=r"sentence must be an int in 0\.\.1"):
        viz.AttentionView.batch([{"weights": a}, {"weights": b}], sentence=2)


def test_repr_html_is_an_isolated_iframe(tmp_path: Path) -> None:
    view = viz.AttentionView(softmax_weights((1, 2, 4, 4), seed=4))
    frame = view._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and "<script" not in frame
    inner = html.unescape(re.search(r'srcdoc="(.*?)"', frame, re.S).group(1))
    assert inner == view.to_html()
    assert viz.save(view, tmp_path / "v.html").read_text(encoding="utf-8") == view.to_html()

"""The golden vectors: stored float64 oracle results, run on the backend under test.

They are stored once, in ``src/attnkit/app/verify/golden/`` (package data, which ``attnkit
verify`` reads too), written by ``make_golden.py``; the first tests check that the stored
files are exactly what make_golden.py computes now.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from cases import CASES, by_name
from harness import Backend
from make_golden import GOLDEN_DIR, golden_arrays

import attnkit as ak
from attnkit.testing.tolerances import assert_close, exact_allowed

FILES = sorted(glob.glob(os.path.join(GOLDEN_DIR, "*.npz")))


def test_golden_files_exist() -> None:
    assert len(FILES) >= 10, f"expected the golden vectors in {GOLDEN_DIR}; run make_golden.py"


def test_one_file_per_golden_case() -> None:
    stored = sorted(os.path.basename(f)[:-4] for f in FILES)
    assert stored == sorted(c.name for c in CASES if c.golden), "run make_golden.py"


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[:-4] for f in FILES])
def test_stored_vectors_equal_make_golden(path: str) -> None:
    """What make_golden.py computes now: the same inputs and kwargs exactly, and the
    oracle's results (it has not drifted since the vectors were written)."""
    fresh = golden_arrays(by_name(os.path.basename(path)[:-4]))
    with np.load(path) as stored:
        assert sorted(stored.files) == sorted(fresh), "run make_golden.py"
        for name in ("query", "key", "value", "attn_mask"):
            if name in fresh:
                np.testing.assert_array_equal(stored[name], fresh[name], err_msg=name)
        assert json.loads(str(stored["kwargs"])) == json.loads(str(fresh["kwargs"]))
        for name in ("out", "weights", "lse"):
            np.testing.assert_allclose(stored[name], fresh[name], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[:-4] for f in FILES])
def test_backend_matches_golden(path: str, backend: Backend) -> None:
    with np.load(path) as g:
        stored = {name: g[name] for name in g.files}
    kwargs = json.loads(str(stored["kwargs"]))
    q, k, v = (backend.asarray(stored[n], "float64") for n in ("query", "key", "value"))
    mask = stored.get("attn_mask")
    if mask is not None:
        mask = backend.asarray(mask, "bool" if mask.dtype == bool else "float64")
    out, weights, lse = backend.call(
        ak.scaled_dot_product_attention,
        q,
        k,
        v,
        attn_mask=mask,
        return_weights=True,
        return_lse=True,
        **kwargs,
    )
    ctx = f"golden {os.path.basename(path)} on {backend.name}"
    for name, got in (("out", out), ("weights", weights), ("lse", lse)):
        gold = stored[name]
        assert_close(name, backend.to_numpy(got), gold, exact_allowed("float64", 10.0, gold), ctx)

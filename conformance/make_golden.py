"""Regenerate the golden vectors from the cases marked ``golden``.

They are stored once, as package data of the application (``src/attnkit/app/verify/golden/``,
installed as ``attnkit.app.verify.golden``), where ``attnkit verify`` and ``test_golden.py``
read them. Each ``<case>.npz`` holds the float64 inputs (query, key, value, and attn_mask if
any), the call's keyword arguments as JSON (``kwargs``), and the float64 oracle's
``out``, ``weights`` and ``lse``. Any implementation can be checked against them without
attnkit or this repository's Python code::

    python conformance/make_golden.py          # rewrite the files
    python conformance/make_golden.py --check  # exit 1 if a file differs from the oracle
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import CASES
from harness import draw_inputs, full_inputs

from attnkit.testing import oracle as ref

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN_DIR = os.path.join(_REPO, "src", "attnkit", "app", "verify", "golden")


def golden_arrays(case) -> dict[str, np.ndarray]:
    q, k, v, mask = full_inputs(draw_inputs(case), case)
    result = ref.attention(q, k, v, attn_mask=mask, **case.kwargs)
    arrays = {
        "query": np.ascontiguousarray(q),
        "key": np.ascontiguousarray(k),
        "value": np.ascontiguousarray(v),
        "kwargs": np.asarray(json.dumps(case.kwargs)),
        "out": result.out,
        "weights": result.weights,
        "lse": result.lse,
    }
    if mask is not None:
        arrays["attn_mask"] = np.ascontiguousarray(mask)
    return arrays


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    status = 0
    for case in (c for c in CASES if c.golden):
        path = os.path.join(GOLDEN_DIR, f"{case.name}.npz")
        arrays = golden_arrays(case)
        if args.check:
            with np.load(path) as stored:
                for name, value in arrays.items():
                    if not np.array_equal(stored[name], value, equal_nan=value.dtype.kind == "f"):
                        print(f"{path}: {name} differs from the oracle")
                        status = 1
        else:
            np.savez_compressed(path, **arrays)
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())

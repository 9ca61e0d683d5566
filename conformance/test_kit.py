"""The matrix through attnkit's own testing kit (``attnkit.testing``), on the session's
backend.

- attnkit itself, through :func:`attnkit.testing.check_attention`, must come back ok:
  every case of the kit, every dtype of the backend, gradients on PyTorch and JAX, the
  kit's fuzzer, arrays on array-api-strict's second device (a result on another device
  is a difference);
- each framework attention of the backend (torch SDPA, ``nn.MultiheadAttention``,
  FlexAttention; ``jax.nn``, Keras) follows exactly the conventions the kit's frameworks
  table gives it: checked without them, each round holding what the last one found,
  the kit finds those and no others, and held to them it comes back ok. The README's
  comparison table and ``attnkit verify``'s findings are made from that table.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from harness import Backend

from attnkit.testing import check_attention
from attnkit.testing.adapters import attnkit_attention
from attnkit.testing.conventions import DEFAULTS
from attnkit.testing.frameworks import FRAMEWORKS, Framework

LIBRARY = {"numpy": "numpy", "torch": "torch", "jax": "jax", "strict": "array_api_strict"}
#: Eager JAX dispatches every operation on its own (about a second a case here): the eager
#: run checks these; the --jit run checks every case.
EAGER_JAX_CASES = ("basic", "mask_bool", "causal_L_lt_S", "window", "gqa", "nan_in_masked_key")
#: FlexAttention eagerly builds a BlockMask per call (about 0.4 s on this CPU): the cases
#: that tell its conventions apart.
FLEX_CASES = (
    "basic",
    "key_padding",
    "mask_additive",
    "mask_bool_empty_rows",
    "mask_additive_empty_rows",
    "causal_L_lt_S",
    "causal_bottom_right_L_gt_S",
    "window",
    "offsets",
    "gqa",
    "softcap",
    "nan_in_masked_key",
    "nan_in_masked_value",
)


def _attnkit(backend: Backend) -> tuple[Any, dict[str, Any]]:
    options: dict[str, Any] = {"dtypes": backend.dtypes, "examples": 8}
    fn = attnkit_attention
    if backend.name == "jax":
        from attnkit.testing.peers_jax import jitted

        if backend.jit:
            fn = jitted(fn)
        else:  # the --jit run checks gradients and every dtype
            options.update(cases=EAGER_JAX_CASES, examples=0, dtypes=("float32",))
            return fn, options
    if backend.name == "strict":
        options["device"] = backend.device  # not the default device
    if backend.name in ("torch", "jax"):
        options["gradients"] = True
    return fn, options


def test_attnkit_passes_its_own_kit(backend: Backend) -> None:
    fn, options = _attnkit(backend)
    report = check_attention(fn, library=LIBRARY[backend.name], raise_on_failure=False, **options)
    assert report.ok, str(report)
    not_run = [r for r in report.skipped if "does not support" in r.lines[0]]
    assert not not_run, "attnkit takes every keyword argument of the kit:\n" + str(report)
    if options.get("gradients"):
        assert any(r.case.endswith("gradients") for r in report.passed), str(report)


def _frameworks() -> list[Any]:
    return [pytest.param(f, id=f.key) for f in FRAMEWORKS]


def _adapter(f: Framework) -> Any:
    module, name = f.adapter.split(":")
    if f.key == "keras":
        from attnkit.testing import peers_jax

        if not peers_jax.keras_available():
            pytest.skip("Keras 3 on the JAX backend is not installed")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("framework", _frameworks())
def test_framework_follows_the_table(framework: Framework, backend: Backend) -> None:
    if LIBRARY[backend.name] != framework.library:
        pytest.skip(f"{framework.name} runs on {framework.library}, not {backend.name}")
    fn = _adapter(framework)
    options: dict[str, Any] = {"raise_on_failure": False, "dtypes": framework.dtypes}
    if framework.key == "flex":
        options["cases"] = FLEX_CASES
    # found without being told, each round holding what the last one found; the last
    # round holds the function to all of it, and must agree
    found: dict[str, str] = {}
    for _ in range(4):
        report = check_attention(fn, conventions=found, examples=0, **options)
        more = {k: v for k, v in report.conventions().items() if v != DEFAULTS[k]}
        if more == found:
            break
        found = more
    assert report.ok, f"{framework.name} held to the conventions found:\n{report}"
    observable = {  # float64's precision shows only where the framework is run in float64
        k: v
        for k, v in framework.conventions.items()
        if k != "float64_precision" or "float64" in framework.dtypes
    }
    assert found == observable, f"{framework.name}: found {found}, the table says {observable}"

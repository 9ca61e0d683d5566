"""Options of the conformance matrix: which backend, and how to run it."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attnkit conformance")
    group.addoption(
        "--backend",
        default="numpy",
        choices=("numpy", "torch", "jax", "strict"),
        help="array library the matrix runs on",
    )
    group.addoption("--readonly", action="store_true", help="numpy: read-only input arrays")
    group.addoption("--jit", action="store_true", help="jax: run every call under jax.jit")


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest):
    from harness import make_backend

    name = request.config.getoption("--backend")
    pytest.importorskip({"strict": "array_api_strict"}.get(name, name))
    return make_backend(
        name,
        readonly=request.config.getoption("--readonly"),
        jit=request.config.getoption("--jit"),
    )


def pytest_report_header(config: pytest.Config) -> str:
    flags = [f for f in ("readonly", "jit") if config.getoption(f"--{f}")]
    return f"attnkit conformance backend: {config.getoption('--backend')} {' '.join(flags)}"

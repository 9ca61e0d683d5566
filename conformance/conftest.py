"""Options of the conformance matrix: which backend, and how to run it."""

from __future__ import annotations

import os
import sys
import tempfile
import zlib
from importlib import metadata

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# The fuzzer's working files (hypothesis reads this when it first writes, after start-up)
# go to the temporary directory, not a .hypothesis folder in the checkout.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "attnkit-hypothesis")
)


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
    group.addoption(
        "--sample",
        type=int,
        default=1,
        metavar="N",
        help="run about 1 in N parametrized cases (chosen by a hash of the test id, so the "
        "same ones every run) and the first case of every test function; 1: all",
    )


#: Tests that run the same JAX computations with or without ``--jit``: the gradient tests
#: (the harness takes gradients with ``jax.jit(jax.grad(...))``), the jax.nn drop-in
#: fuzzer (its calls are eager either way) and the frameworks through attnkit's testing
#: kit (jitted either way). An eager ``--sample`` run leaves them to the
#: ``--jit`` run, which runs the same programs.
JAX_SAME_EITHER_WAY = (
    "test_gradients",
    "test_structured_gradients",
    "test_gradients_equal_finite_differences",
    "test_fuzz_gradients",
    "test_gradcheck",
    "test_fuzz_jax_nn_drop_in",
    "test_framework_follows_the_table",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--sample N``: a representative subset (every test function, 1 in N of its cases).

    On JAX without ``--jit`` the subset guards eager dispatch, so it leaves out the tests
    that run the same either way (:data:`JAX_SAME_EITHER_WAY`)."""
    n = config.getoption("--sample")
    if n <= 1:
        return
    eager_jax = config.getoption("--backend") == "jax" and not config.getoption("--jit")
    seen: set[str] = set()
    keep, drop = [], []
    for item in items:
        function = item.nodeid.split("[", 1)[0]
        if eager_jax and function.rsplit("::", 1)[-1] in JAX_SAME_EITHER_WAY:
            drop.append(item)
            continue
        first = function not in seen
        seen.add(function)
        chosen = first or zlib.crc32(item.nodeid.encode()) % n == 0
        (keep if chosen else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


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
    if config.getoption("--sample") > 1:
        flags.append(f"sample 1/{config.getoption('--sample')}")
    backend = config.getoption("--backend")
    package = {"strict": "array-api-strict"}.get(backend, backend)
    try:
        release = f"{package} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        release = f"{package} absent"
    return f"attnkit conformance backend: {backend} ({release}) {' '.join(flags)}"

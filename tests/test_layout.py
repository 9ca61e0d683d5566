"""The fixed layout: ``backends/`` is installed as ``attnkit.backends``.

pyproject maps ``attnkit.backends`` to the top-level ``backends/`` folder (setuptools
package-dir). In the editable install the adapters must come from that folder; in a
regular install they must be copied into ``attnkit/backends/<name>/``.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit
from attnkit import backends

REPO = Path(__file__).resolve().parents[1]
NAMES = ("numpy", "torch", "jax", "strict")
ADAPTER_API = (
    "NAME",
    "available",
    "check_rng",
    "dropout_keep",
    "from_numpy",
    "install_hint",
    "make_rng",
    "synchronize",
    "to_numpy",
)


def editable_from_repo() -> bool:
    return Path(attnkit.__file__).resolve() == (REPO / "src" / "attnkit" / "__init__.py")


def test_registry_lists_every_adapter() -> None:
    assert tuple(backends.NAMES) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_adapter_imports_from_package(name: str) -> None:
    module = importlib.import_module(f"attnkit.backends.{name}")
    assert module.__name__ == f"attnkit.backends.{name}"
    backend = module.BACKEND
    assert isinstance(backend, backends.Backend) and backend.NAME == name
    assert isinstance(backend.kernels, backends.Kernels)
    missing = [attr for attr in ADAPTER_API if not hasattr(backend, attr)]
    assert not missing, f"attnkit.backends.{name} lacks {missing}"
    assert backends.load(name) is backend


@pytest.mark.parametrize("name", NAMES)
def test_adapter_file_is_in_top_level_backends(name: str) -> None:
    if not editable_from_repo():
        pytest.skip(f"attnkit is not the editable install of {REPO}: {attnkit.__file__}")
    module = importlib.import_module(f"attnkit.backends.{name}")
    expected = REPO / "backends" / name / "__init__.py"
    assert Path(module.__file__).resolve() == expected.resolve(), module.__file__
    registry = Path(backends.__file__).resolve()
    assert registry == (REPO / "backends" / "__init__.py").resolve(), registry


def test_unknown_backend_name() -> None:
    with pytest.raises(ValueError, match=r"unknown backend 'cupy'.*numpy, torch, jax, strict"):
        backends.load("cupy")


def _copy_project(dest: Path) -> None:
    """The files a build needs, so the build leaves no artifacts in the repository."""
    for name in ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "setup.py"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "src", dest / "src", ignore=ignore)
    shutil.copytree(REPO / "backends", dest / "backends", ignore=ignore)


@pytest.mark.install
def test_regular_install_ships_backends(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="building needs setuptools (no build isolation)")
    project, target = tmp_path / "project", tmp_path / "site"
    project.mkdir()
    _copy_project(project)
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    pip += ["--no-index", "--disable-pip-version-check", "--quiet", "--target", str(target)]
    result = subprocess.run(
        [*pip, str(project)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr

    for name in NAMES:
        assert (target / "attnkit" / "backends" / name / "__init__.py").is_file(), name
    assert (target / "attnkit" / "backends" / "__init__.py").is_file()
    assert (target / "attnkit" / "__init__.py").is_file()

    probe = (
        "import importlib, json, attnkit, array_api_compat\n"
        "files = {n: importlib.import_module('attnkit.backends.' + n).__file__\n"
        f"         for n in {NAMES!r}}}\n"
        "files['attnkit'] = attnkit.__file__\n"
        "print(json.dumps(files))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout.strip().splitlines()[-1])
    for module, file in files.items():
        assert Path(file).resolve().is_relative_to(target.resolve()), (module, file)

"""The core imports only the standard library, array_api_compat and itself.

DESIGN.md: ``src/attnkit/`` never imports numpy, torch or jax; whatever a framework is
needed for lives in ``backends/``. This is checked statically (every import statement at
any nesting level, plus ``importlib.import_module``/``__import__`` with a literal name)
and dynamically (``import attnkit`` in a fresh interpreter loads no framework).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "attnkit"
FORBIDDEN = ("numpy", "torch", "jax", "jaxlib", "array_api_strict", "scipy")
ALLOWED_THIRD_PARTY = ("array_api_compat", "attnkit")
FRAMEWORKS = ("torch", "jax", "jaxlib", "array_api_strict", "scipy")


def imports_of(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, absolute top-level module name) of every import in ``tree``; '.' if relative."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." if node.level else (node.module or "")))
        elif isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else (func.id if isinstance(func, ast.Name) else "")
            )
            if name in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if not arg.value.startswith("."):
                        found.append((node.lineno, arg.value))
    return found


def violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename=filename)
    bad = []
    for line, module in imports_of(tree):
        if module == ".":
            continue
        top = module.split(".")[0]
        if top in FORBIDDEN:
            bad.append(f"{filename}:{line}: imports {module} (a framework; use backends/)")
        elif top not in ALLOWED_THIRD_PARTY and top not in sys.stdlib_module_names:
            bad.append(f"{filename}:{line}: imports {module}, which is not the standard library")
    return bad


def core_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_core_files_found() -> None:
    files = core_files()
    assert SRC / "__init__.py" in files
    assert len(files) >= 5, files


def test_core_imports_no_framework() -> None:
    bad = []
    for path in core_files():
        bad.extend(violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))))
    assert not bad, "forbidden imports in src/attnkit:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("snippet", "module"),
    [
        ("import numpy as np", "numpy"),
        ("import torch.nn.functional", "torch.nn.functional"),
        ("from jax import numpy as jnp", "jax"),
        ("def f():\n    import array_api_strict\n", "array_api_strict"),
        ("class C:\n    def m(self):\n        from scipy import special\n", "scipy"),
        ("try:\n    import jax\nexcept ImportError:\n    jax = None\n", "jax"),
        ("import importlib\nimportlib.import_module('torch')\n", "torch"),
        ("__import__('numpy.linalg')", "numpy.linalg"),
        ("import requests", "requests"),
    ],
)
def test_guard_catches(snippet: str, module: str) -> None:
    bad = violations(snippet, "snippet.py")
    assert len(bad) == 1 and module in bad[0] and bad[0].startswith("snippet.py:"), bad


@pytest.mark.parametrize(
    "snippet",
    [
        "import math\nfrom typing import Any\nimport array_api_compat as aac",
        "from . import backends\nfrom .errors import ShapeError\nfrom .. import x",
        "import attnkit.errors\nfrom attnkit.backends import load",
        "from array_api_compat import array_namespace",
    ],
)
def test_guard_allows(snippet: str) -> None:
    assert violations(snippet, "snippet.py") == []


def loaded_after(code: str) -> list[str]:
    """Top-level module names loaded by running ``code`` in a fresh interpreter."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_attnkit_loads_no_framework() -> None:
    loaded = loaded_after("import attnkit")
    assert "attnkit" in loaded
    assert not [m for m in FRAMEWORKS if m in loaded], loaded
    # NumPy is allowed only if array_api_compat alone already loads it.
    if "numpy" in loaded:
        assert "numpy" in loaded_after("import array_api_compat"), (
            "import attnkit loads numpy but import array_api_compat does not"
        )


def test_backend_adapters_import_no_framework() -> None:
    # The registry docs: adapters import their framework lazily, on first use.
    loaded = loaded_after(
        "import attnkit.backends.numpy, attnkit.backends.torch, "
        "attnkit.backends.jax, attnkit.backends.strict"
    )
    assert not [m for m in (*FRAMEWORKS, "numpy") if m in loaded], loaded


def test_numpy_call_loads_no_other_framework() -> None:
    pytest.importorskip("numpy")
    loaded = loaded_after(
        "import numpy as np, attnkit as ak\n"
        "r = np.random.default_rng(0)\n"
        "q = r.standard_normal((2, 5, 8))\n"
        "ak.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=0.1, rng=r)\n"
        "ak.merge_partials([q], [q[..., 0]])"
    )
    assert "numpy" in loaded
    assert not [m for m in FRAMEWORKS if m in loaded], loaded


def test_package_under_test_is_this_repository() -> None:
    # Guards the static check above: it must read the files that are actually imported.
    if Path(attnkit.__file__).resolve().parent != SRC:
        pytest.skip(f"attnkit is imported from {attnkit.__file__}, not from {SRC}")
    assert (SRC / "__init__.py").samefile(attnkit.__file__)

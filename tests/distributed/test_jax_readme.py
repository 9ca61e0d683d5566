"""The README's JAX ring example runs as pasted, on 4 host devices, and agrees with one
device."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import host_devices_env
from _readme_blocks import README, script

pytest.importorskip("jax")


def test_readme_jax_ring_example_runs(tmp_path: Path) -> None:
    path = tmp_path / "ring_jax.py"
    path.write_text(script("ring_jax.py"), encoding="utf-8")
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=4 python ring_jax.py" in (
        README.read_text(encoding="utf-8")
    )
    env = host_devices_env(4)  # as the README says, with the session's compile flags
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    match = re.search(r"^4 devices, max \|ring - one device\| = (\S+)$", proc.stdout, re.M)
    assert match, proc.stdout
    assert float(match.group(1)) < 1e-5, f"measured {match.group(1)}, allowed 1e-5"

"""The torchrun example of ``attnkit.backends.torch.distributed``'s docstring runs as
pasted (4 gloo processes) and agrees with one process."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _readme_blocks import TORCH_DISTRIBUTED, script

pytest.importorskip("torch")


def test_torchrun_example_runs(tmp_path: Path) -> None:
    path = tmp_path / "ring_torch.py"
    path.write_text(script("ring_torch.py", TORCH_DISTRIBUTED), encoding="utf-8")
    assert "torchrun --standalone --nproc-per-node=4 ring_torch.py" in (
        TORCH_DISTRIBUTED.read_text(encoding="utf-8")
    )
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    command = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    proc = subprocess.run(
        [*command, "--standalone", "--nproc-per-node=4", str(path)], cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    match = re.search(r"^4 processes, max \|ring - one process\| = (\S+)$", proc.stdout, re.M)
    assert match, proc.stdout
    assert float(match.group(1)) < 1e-5, f"measured {match.group(1)}, allowed 1e-5"

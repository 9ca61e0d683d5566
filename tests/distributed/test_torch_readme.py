"""The torchrun example of ``attnkit.backends.torch.distributed``'s docstring runs as
pasted (4 gloo processes) and agrees with one process; the example's ``out``, alive after
``destroy_process_group``, does not keep the group's gloo threads running (they were torn
down while the interpreter exited, and one rank aborted now and then), and its backward
after the group is gone says so."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _readme_blocks import TORCH_DISTRIBUTED, script

pytest.importorskip("torch")


#: Run after the example: a second output whose graph is kept past destroy_process_group.
AFTER = """
kept = ring_attention(*(x.detach().requires_grad_() for x in (ql, kl, vl)), is_causal=True)
dist.barrier()
dist.destroy_process_group()
import os
from pathlib import Path
def say(line): os.write(1, f"rank {r} {line}\\n".encode())  # one write: ranks share stdout
tasks = Path("/proc/self/task")  # Linux: this process's threads, by name
if tasks.is_dir():
    names = [(t / "comm").read_text().strip() for t in tasks.iterdir()]
    say(f"gloo threads after destroy: {sorted(n for n in names if 'gloo' in n)}")
try:
    kept.sum().backward()
except RuntimeError as e:
    say(f"backward after destroy: {'destroy_process_group' in str(e)}")
"""


def test_torchrun_example_runs(tmp_path: Path) -> None:
    path = tmp_path / "ring_torch.py"
    example = script("ring_torch.py", TORCH_DISTRIBUTED)
    end = "dist.destroy_process_group()\n"
    assert example.endswith(end), example[-200:]
    path.write_text(example[: -len(end)] + AFTER, encoding="utf-8")
    assert "torchrun --standalone --nproc-per-node=4 ring_torch.py" in (
        TORCH_DISTRIBUTED.read_text(encoding="utf-8")
    )
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    command = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    proc = subprocess.run(
        [*command, "--standalone", "--nproc-per-node=4", str(path)], cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    # torchrun's log lines (W/I/E + date) bury the rank's own message: show the rest
    said = [line for line in proc.stderr.splitlines() if not re.match(r"[WIE]\d{4} ", line)]
    assert proc.returncode == 0, "\n".join(said[-60:])
    match = re.search(r"^4 processes, max \|ring - one process\| = (\S+)$", proc.stdout, re.M)
    assert match, proc.stdout
    assert float(match.group(1)) < 1e-5, f"measured {match.group(1)}, allowed 1e-5"
    for r in range(4):
        assert f"rank {r} backward after destroy: True" in proc.stdout, proc.stdout
        if Path("/proc/self/task").is_dir():
            assert f"rank {r} gloo threads after destroy: []" in proc.stdout, proc.stdout

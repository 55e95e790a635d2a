"""README's "First steps", run as a new user would: its files written as they stand, its shell
commands run in a fresh directory with the project's environment on the PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

pytestmark = pytest.mark.slow


def test_the_first_steps_run_as_written(tmp_path: Path) -> None:
    text = README.read_text()
    section = text[text.index("## First steps") : text.index("## Compatibility with")]
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        name = block.splitlines()[0].removeprefix("# ").strip()
        (tmp_path / name).write_text(block)
    [commands] = re.findall(r"```bash\n(.*?)```", section, re.S)
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k != "JQUEUE_STORAGE"}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    done = subprocess.run(
        ["bash", "-e", "-c", commands], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("enqueued ") == 3
    assert re.search(r"send_email +│ +3 ", done.stdout)  # stats: three queued
    assert "claimed 3 jobs" in done.stdout
    assert done.stdout.count(" send_email  acked ") == 3  # history
    assert done.stdout.rstrip().endswith("sent to user0@example.com")  # result
    assert "handlers send_email (task make.<locals>.send_email)" in done.stderr

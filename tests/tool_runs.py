"""Running a tool of ``tools/`` as a user would, for the tests that check the tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_tool(
    name: str, *arguments: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``tools/<name>`` with ``arguments`` from the repository's root (in ``env``, when given);
    its output captured."""
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / name), *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )

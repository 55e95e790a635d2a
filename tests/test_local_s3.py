"""The local S3 recipes of docs/storage.md ("A local S3, for development"), run as written
against the suite's moto and SeaweedFS servers: only the endpoint (a free port, not the
documented one) and the credentials (the server's) change."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servers import S3Endpoint

DOCS = Path(__file__).parent.parent / "docs" / "storage.md"


def _recipe(server: str) -> tuple[str, list[str]]:
    """The documented endpoint of ``server``'s recipe, and its bucket and jqueue commands."""
    text = DOCS.read_text()
    section = text[text.index("### A local S3, for development") :]
    block = section[
        section.index("```bash") + len("```bash") : section.index("```\n", section.index("```bash") + 7)
    ]
    recipes = re.split(r"^# ", block, flags=re.MULTILINE)
    [lines] = [recipe.splitlines() for recipe in recipes if recipe.startswith(server)]
    commands = [line for line in lines if line.startswith(("python -c", "jqueue "))]
    [endpoint] = set(re.findall(r"http://127\.0\.0\.1:\d+", "\n".join(commands)))
    return endpoint, commands


@pytest.mark.parametrize("server", ["moto", "SeaweedFS"])
def test_a_documented_local_s3_recipe_runs(server: str, request: pytest.FixtureRequest) -> None:
    endpoint: S3Endpoint = request.getfixturevalue("moto" if server == "moto" else "seaweedfs")
    documented, commands = _recipe(server)
    assert len(commands) >= 2, commands
    env = os.environ | {
        "AWS_ACCESS_KEY_ID": endpoint.access_key,
        "AWS_SECRET_ACCESS_KEY": endpoint.secret_key,
        "AWS_DEFAULT_REGION": endpoint.region,
    }
    said = []
    for command in commands:
        words = shlex.split(command.replace(documented, endpoint.url))
        program = [sys.executable] if words[0] == "python" else [sys.executable, "-m", "jqueue"]
        done = subprocess.run([*program, *words[1:]], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        said.append(done.stdout)
    assert re.search(r"mail +│ +1 ", said[-1]), said[-1]  # it enqueued one job, which stats counts

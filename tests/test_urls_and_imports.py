"""storage_from_url and the lazily imported adapters."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jqueue
from jqueue import (
    BrokerQueue,
    InMemoryStorage,
    InvalidURLError,
    LocalFileSystemStorage,
    storage_from_url,
    sync,
)
from jqueue.adapters.optional import require


def test_urls_build_their_backends() -> None:
    memory = storage_from_url("memory://jobs")
    assert isinstance(memory, InMemoryStorage)
    assert storage_from_url("memory://jobs") is memory
    local = storage_from_url("file:///var/tmp/my%20queue.json")
    assert isinstance(local, LocalFileSystemStorage)
    assert str(local.path) == "/var/tmp/my queue.json"
    s3 = storage_from_url("s3://bucket/queues/jobs.json?endpoint_url=http://127.0.0.1:9000&region=eu-west-1")
    assert isinstance(s3, jqueue.S3Storage)
    assert (s3.bucket, s3.key, s3.endpoint_url, s3.region_name) == (
        "bucket",
        "queues/jobs.json",
        "http://127.0.0.1:9000",
        "eu-west-1",
    )
    gcs = storage_from_url("gs://bucket/queues/jobs.json")
    assert isinstance(gcs, jqueue.GCSStorage)
    assert (gcs.bucket_name, gcs.blob_name) == ("bucket", "queues/jobs.json")


async def test_a_relative_path_names_the_same_file_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q").mkdir()
    relative = storage_from_url("q/main.json")
    assert isinstance(relative, LocalFileSystemStorage)
    async with BrokerQueue(relative) as queue:
        job = await queue.enqueue("mail", b"x")
    with sync.open_queue("q/main.json") as jobs:  # the sync API, as the CLI, reads the same file
        assert [j.id for j in jobs.call(lambda q: q.peek())] == [job.id]
    async with BrokerQueue(storage_from_url((tmp_path / "q/main.json").as_uri())) as absolute:
        assert [j.id for j in await absolute.peek()] == [job.id]


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://host/queue.json",
        "memory://",
        "file://relative/queue.json",
        "file:///",
        "file:///tmp/dir/",
        "file:///tmp/q.json?fsync=no",
        "s3://bucket",
        "s3:///key",
        "s3://bucket/key?endpoint=http://x",
        "s3://bucket/key?region=",
        "gs://bucket/",
        "gs://bucket/blob?project=p",
        "memory://jobs#frag",
    ],
)
def test_bad_urls_have_their_own_error(url: str) -> None:
    with pytest.raises(InvalidURLError) as raised:
        storage_from_url(url)
    assert raised.value.url == url
    assert isinstance(raised.value, ValueError)


def test_cloud_adapters_are_exported_lazily() -> None:
    s3_module = importlib.import_module("jqueue.adapters.storage.s3")
    gcs_module = importlib.import_module("jqueue.adapters.storage.gcs")
    assert jqueue.S3Storage is s3_module.S3Storage
    assert jqueue.GCSStorage is gcs_module.GCSStorage
    with pytest.raises(AttributeError):
        _ = jqueue.NoSuchThing


CHECKOUT = Path(jqueue.__file__).resolve().parents[2]
"""The checkout these tests run from (jqueue is installed from it, editable)."""


def _install_hint(extra: str) -> str:
    return f"pip install '{CHECKOUT}[{extra}]' (or a wheel built there; the jqueue on the package index"


def test_a_missing_extra_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ImportError) as raised:
        require("jqueue_no_such_module", extra="s3")
    assert _install_hint("s3") in str(raised.value)
    (tmp_path / "croniter.py").write_text("raise ImportError('not installed')\n")
    program = "from jqueue.core.runtime.cron import Schedule\nSchedule('tick', b'', expression='* * * * *')\n"
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert (
        "ImportError: croniter (for cron schedules) is not installed: install jqueue's 'cron' extra"
        f" from this checkout: {_install_hint('cron')}"
    ) in done.stderr
    assert "jqueue[cron]" not in done.stderr


def test_the_demo_runs_end_to_end(tmp_path: Path) -> None:
    url = (tmp_path / "demo.json").as_uri()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jqueue",
            "--storage",
            url,
            "demo",
            "--jobs",
            "40",
            "--workers",
            "3",
            "--json",
        ],
        capture_output=True,
        check=True,
        text=True,
    )
    summary = json.loads(done.stdout)
    assert summary["acked"] + summary["dead_letters"] == summary["enqueued"] == 40
    assert summary["every_job_accounted_for"] is True
    assert summary["left_in_queue"] == 0


def test_a_star_import_needs_no_extra_and_dir_shows_the_api(tmp_path: Path) -> None:
    (tmp_path / "aioboto3.py").write_text("raise ImportError('not installed')\n")
    program = (
        "import jqueue\n"
        "from jqueue import *\n"
        "assert 'Any' not in dir(jqueue) and 'TYPE_CHECKING' not in dir(jqueue)\n"
        "assert {'S3Storage', 'GCSStorage', 'BrokerQueue'} <= set(dir(jqueue))\n"
        "print(BrokerQueue.__name__, jqueue.__version__)\n"
    )
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    command = [sys.executable, "-c", program]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == ["BrokerQueue", jqueue.__version__]


def test_the_command_line_needs_no_service_extra_but_serve_names_it(tmp_path: Path) -> None:
    for missing in ("starlette", "uvicorn", "prometheus_client", "aiohttp"):
        (tmp_path / f"{missing}.py").write_text("raise ImportError('not installed')\n")
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    queue = (tmp_path / "q.json").as_uri()
    enqueued = subprocess.run(
        [sys.executable, "-m", "jqueue", "--storage", queue, "enqueue", "e", "payload"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (enqueued.returncode, enqueued.stderr) == (0, "")
    served = subprocess.run(
        [sys.executable, "-m", "jqueue", "serve", "--storage", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert served.returncode == 1
    assert served.stderr.count("\n") == 1  # one line, no traceback
    assert f"install jqueue's 'serve' extra from this checkout: {_install_hint('serve')}" in served.stderr

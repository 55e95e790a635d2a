"""The ``jqueue`` command, each subcommand run as a subprocess against a file queue."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import jqueue
from jqueue import DirectQueue, LocalFileSystemStorage, QueuePolicy

HERE = Path(__file__).parent


class Cli:
    """Runs ``python -m jqueue`` with JQUEUE_STORAGE set to one file queue."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path
        self.env = os.environ | {"JQUEUE_STORAGE": (tmp_path / "q.json").as_uri(), "COLUMNS": "200"}

    def __call__(
        self, *args: str, stdin: str | None = None, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "jqueue", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.cwd,
            timeout=120,
        )
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self(*args, "--json", stdin=stdin).stdout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_enqueue_ls_show_and_stats(cli: Cli, tmp_path: Path) -> None:
    [job] = cli.json("enqueue", "email", "hello", "--priority", "2")
    (tmp_path / "p.bin").write_bytes(b"\x00\x01binary")
    [from_file] = cli.json("enqueue", "email", "--file", str(tmp_path / "p.bin"), "--delay", "3600")
    assert from_file["not_before"] is not None
    added = cli.json("enqueue", "sms", "--stdin", "--batch", "2", stdin="a\nb\nc\n")
    assert [j["entrypoint"] for j in added] == ["sms"] * 3
    assert (
        cli("enqueue", "sms", "one", "--dedup-key", "k").stdout.strip()
        == cli("enqueue", "sms", "two", "--dedup-key", "k").stdout.strip()
    )

    listed = cli.json("ls", "--entrypoint", "sms")
    assert [j["payload"] for j in listed] == ["YQ==", "Yg==", "Yw==", "b25l"]
    shown = cli.json("show", job["id"])
    assert (shown["id"], shown["priority"], shown["status"]) == (job["id"], 2, "queued")
    assert "hello" in cli("show", job["id"]).stdout

    stats = cli.json("stats")
    assert stats["entrypoints"]["email"] | {"oldest_queued_at": None} == {
        "queued": 1,
        "scheduled": 1,
        "in_progress": 0,
        "dead": 0,
        "staged": 0,
        "waiting": 0,
        "oldest_queued_at": None,
    }
    assert stats["entrypoints"]["sms"]["queued"] == 4
    assert "email" in cli("stats").stdout


def test_exec_runs_a_shell_command_per_job_and_dead_letters_can_be_redriven(cli: Cli) -> None:
    cli("enqueue", "shell", "good")
    cli("enqueue", "shell", "bad")
    script = (
        'read line; if [ "$line" = bad ]; then echo "cannot: $line" >&2; exit 3; fi; echo "$line" >> done.txt'
    )
    options = ("--burst", "--max-attempts", "2", "--retry-delay", "0.05", "--json")
    summary = json.loads(cli("exec", "shell", *options, "--", "sh", "-c", script).stdout)
    assert (summary["acked"], summary["retried"], summary["dead"]) == (1, 1, 1)
    assert (cli.cwd / "done.txt").read_text() == "good\n"
    [dead] = cli.json("dead", "ls")
    assert (dead["dead_reason"], dead["last_error"]) == (
        "max_attempts",
        "CommandFailedError: exit status 3: cannot: bad",
    )
    history = cli.json("history")
    assert [(h["outcome"], h["attempts"]) for h in history] == [("acked", 1), ("dead", 2)]

    assert cli.json("dead", "requeue", "--all") == {"requeued": 1}
    [again] = cli.json("ls")
    assert (again["status"], again["attempts"]) == ("queued", 0)
    assert cli.json("purge", "--status", "queued", "--yes") == {"purged": 1}
    assert cli.json("ls") == []


def test_exec_kills_a_command_past_its_timeout(cli: Cli) -> None:
    cli("enqueue", "slow", "x")
    options = ("--burst", "--timeout", "0.3", "--max-attempts", "1", "--json")
    summary = json.loads(cli("exec", "slow", *options, "--", "sleep", "30").stdout)
    assert (summary["dead"], summary["timed_out"]) == (1, 1)
    [dead] = cli.json("dead", "ls")
    assert dead["last_error"] == "timed out after 0.3 s"


def test_pause_resume_requeue_and_throttle(cli: Cli) -> None:
    [job] = cli.json("enqueue", "work", "x")
    assert cli.json("pause", "work", "--enqueues") == {"paused": "work", "enqueues": True}
    refused = cli("enqueue", "work", "y", ok=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: enqueues of 'work' are paused"
    stats = cli.json("stats")
    assert stats["paused"] == {"claims": ["work"], "enqueues": ["work"]}
    assert cli.json("resume", "work") == {"resumed": "work"}
    cli("throttle", "5", "--per", "60", "--entrypoint", "work")
    each = cli.json("throttle", "2", "--per", "60", "--entrypoint", "work", "--per-tenant")
    assert each == {"entrypoint": "work", "limit": 2, "per_seconds": 60.0, "per_tenant": True}
    assert cli.json("limit", "1", "--per-tenant") == {"entrypoint": None, "limit": 1, "per_tenant": True}
    stats = cli.json("stats")
    assert stats["throttles"] == [
        {"entrypoint": "work", "limit": 5, "per_seconds": 60.0, "per_tenant": False},
        {"entrypoint": "work", "limit": 2, "per_seconds": 60.0, "per_tenant": True},
    ]
    assert stats["limits"] == [{"entrypoint": None, "limit": 1, "per_tenant": True}]
    assert "limit (all), each tenant: 1 in progress at once" in cli("stats").stdout
    cli("limit", "--off", "--per-tenant")
    cli("throttle", "--off", "--entrypoint", "work", "--per-tenant")
    cli("throttle", "--off", "--entrypoint", "work")
    assert cli.json("requeue", job["id"]) == {"requeued": 0}  # already claimable


def test_worker_runs_a_worker_from_a_module(cli: Cli) -> None:
    (cli.cwd / "myjobs.py").write_text(
        "from pathlib import Path\n"
        "from jqueue import Worker\n"
        "def make(queue):\n"
        "    worker = Worker(queue)\n"
        "    @worker.handler('greet')\n"
        "    async def greet(job):\n"
        "        Path('greeted.txt').open('a').write(job.payload.decode() + '\\n')\n"
        "    return worker\n"
    )
    cli("enqueue", "greet", "--stdin", stdin="ann\nbob\n")
    summary = cli.json("worker", "myjobs:make", "--burst")
    assert summary["acked"] == 2
    assert sorted((cli.cwd / "greeted.txt").read_text().split()) == ["ann", "bob"]


def test_worker_runs_its_handlers_on_uvloop_and_exec_its_commands_on_asyncio(cli: Cli) -> None:
    (cli.cwd / "looks.py").write_text(
        "import asyncio\n"
        "from pathlib import Path\n"
        "from jqueue import Worker\n"
        "def make(queue):\n"
        "    worker = Worker(queue)\n"
        "    @worker.handler('look')\n"
        "    async def look(job):\n"
        "        Path('loop.txt').write_text(type(asyncio.get_running_loop()).__module__)\n"
        "    return worker\n"
    )
    cli("enqueue", "look", "x")
    assert cli.json("worker", "looks:make", "--burst")["acked"] == 1
    assert (cli.cwd / "loop.txt").read_text().startswith("uvloop")  # the cli extra brings it
    cli("enqueue", "run", "the payload")
    command = ("sh", "-c", "cat /dev/stdin > got.txt")  # a socket pair (uvloop's) cannot be opened
    assert json.loads(cli("exec", "run", "--burst", "--json", "--", *command).stdout)["acked"] == 1
    assert (cli.cwd / "got.txt").read_text() == "the payload"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--storage", "ftp://x/q", "stats"), "error: invalid storage URL 'ftp://x/q'"),
        (("show", "no-such-job"), "error: job 'no-such-job' is neither in the queue nor in its history"),
        (("dead", "requeue", "no-such-job"), "error: job 'no-such-job' is not in the queue"),
        (("worker", "nomodule:attr"), "error: cannot import 'nomodule'"),
        (("enqueue", "work", "x", "--stdin"), "error: give at most one of PAYLOAD, --file or --stdin"),
        (("enqueue", ""), "error: entrypoint must be at least 1 character, got 0"),
        (
            ("report", "--engine", "sparkk"),
            "error: --engine must be one of auto, python, spark, not 'sparkk'",
        ),
    ],
)
def test_user_mistakes_print_one_line_and_fail(cli: Cli, args: tuple[str, ...], message: str) -> None:
    cli("pause", "nothing")  # the queue exists
    done = cli(*args, ok=False)
    assert done.returncode == 1
    assert done.stderr.startswith(message)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_corrupt_queue_is_reported_not_overwritten(cli: Cli) -> None:
    (cli.cwd / "q.json").write_text("not a queue")
    done = cli("stats", ok=False)
    assert done.returncode == 1
    assert "q.json" in done.stderr
    assert (cli.cwd / "q.json").read_text() == "not a queue"


def test_no_storage_is_an_error_except_for_the_demo(cli: Cli) -> None:
    cli.env.pop("JQUEUE_STORAGE")
    done = cli("ls", ok=False)
    assert done.stderr.strip() == (
        "error: no queue given: pass --storage URL (or --server URL --queue NAME), or set JQUEUE_STORAGE"
    )
    summary = cli.json("demo", "--jobs", "300", "--workers", "2")
    assert summary["url"] == (cli.cwd / ".jqueue" / "demo.json").as_uri()
    assert summary["acked"] + summary["dead_letters"] == 300
    assert summary["every_job_accounted_for"] is True
    assert summary["left_in_queue"] == 0


def test_bench_runs_the_benchmark_against_the_given_storage(cli: Cli, tmp_path: Path) -> None:
    results = tmp_path / "bench.json"
    options = (
        "--ops",
        "20",
        "--queues",
        "direct",
        "--scenarios",
        "enqueue-seq,mixed-c50",
        "--json",
        str(results),
    )
    done = cli("bench", *options)
    assert "enqueue-seq" in done.stdout
    written = json.loads(results.read_text())
    assert (written["metadata"]["settings"]["url"], written["metadata"]["settings"]["backends"]) == (
        (tmp_path / "q.json").as_uri(),
        None,
    ), "the storage that ran, not the tool's backends"
    rows = written["rows"]
    assert [(row["scenario"], row["verified"]) for row in rows] == [
        ("enqueue-seq", True),
        ("mixed-c50", True),
    ]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("direct-")) == []


def test_an_unreachable_storage_is_one_error_line(cli: Cli) -> None:
    done = cli("--storage", "s3://bucket/q.json?endpoint_url=http://127.0.0.1:9", "stats", ok=False)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert len(done.stderr.strip().splitlines()) == 1


READS = [("stats",), ("ls",), ("show", "x"), ("history",), ("dead", "ls"), ("purge", "--yes"), ("report",)]


@pytest.mark.parametrize("args", READS)
def test_reading_a_missing_queue_says_so_and_creates_nothing(cli: Cli, args: tuple[str, ...]) -> None:
    done = cli(*args, ok=False)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: no queue at {(cli.cwd / 'q.json').as_uri()}")
    assert sorted(path.name for path in cli.cwd.iterdir()) == []


def test_exec_gives_up_on_a_command_that_always_fails_by_default(cli: Cli) -> None:
    cli("enqueue", "doomed", "x")
    options = ("--burst", "--retry-delay", "0", "--json")
    summary = json.loads(cli("exec", "doomed", *options, "--", "false").stdout)
    assert (summary["retried"], summary["dead"]) == (4, 1)
    [dead] = cli.json("dead", "ls")
    assert (dead["attempts"], dead["dead_reason"]) == (5, "max_attempts")


def test_user_text_is_printed_as_it_is_never_as_markup(cli: Cli) -> None:
    [job] = cli.json("enqueue", "[bold]ep[/bold]", "[red]payload")
    listing = cli("ls").stdout
    assert "[bold]ep[/bold]" in listing
    assert "[red]payload" in listing
    done = cli("show", "[/red]", ok=False)
    assert done.stderr.strip() == "error: job '[/red]' is neither in the queue nor in its history"
    assert job["entrypoint"] == "[bold]ep[/bold]"


def test_a_missing_extra_is_one_line_naming_it(cli: Cli) -> None:
    (cli.cwd / "aioboto3.py").write_text("raise ImportError('pretend it is not installed')\n")
    cli.env["PYTHONPATH"] = str(cli.cwd)
    done = cli("--storage", "s3://bucket/q.json", "stats", ok=False)
    assert done.returncode == 1
    checkout = Path(jqueue.__file__).resolve().parents[2]
    assert done.stderr.strip() == (
        f"error: aioboto3 is not installed: install jqueue's 's3' extra from this checkout:"
        f" pip install '{checkout}[s3]' (or a wheel built there; the jqueue on the package index"
        " is another project)"
    )


def test_a_syntax_error_in_a_worker_module_is_one_line_with_its_place(cli: Cli) -> None:
    (cli.cwd / "broken.py").write_text("x = 1\ndef make(:\n")
    done = cli("worker", "broken:make", "--burst", ok=False)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {cli.cwd / 'broken.py'}:2: ")


def test_exec_json_keeps_the_commands_output_off_the_summary(cli: Cli) -> None:
    cli("enqueue", "say", "x")
    done = cli("exec", "say", "--burst", "--json", "--", "echo", "from the command")
    assert json.loads(done.stdout)["acked"] == 1
    assert "from the command" in done.stderr


def test_messages_read_as_english(cli: Cli) -> None:
    [job] = cli.json("enqueue", "work", "x")
    assert cli("requeue", job["id"]).stdout.strip() == "requeued 0 jobs"
    cli("enqueue", "work", "y")
    asked = cli("purge", "--status", "queued", stdin="n\n", ok=False)
    assert "delete 2 jobs (queued)?" in asked.stdout
    assert cli.json("ls")[0]["id"] == job["id"]
    late = cli("enqueue", "work", "z", "--delay", "-5", ok=False)
    assert late.stderr.strip() == "error: --delay must not be negative, got -5 s"
    wrong = cli("history", "--outcome", "nope", ok=False)
    assert wrong.stderr.strip() == "error: unknown outcome 'nope'; one of acked, dead, cancelled"


def test_purge_status_is_a_checked_choice(cli: Cli) -> None:
    cli("enqueue", "work", "x")
    done = cli("purge", "--status", "nope", "--yes", ok=False)
    assert done.returncode == 2
    assert "nope" in done.stderr
    assert cli.json("purge", "--status", "any", "--yes") == {"purged": 1}


def test_global_options_anywhere_the_version_and_no_memory_queues(cli: Cli) -> None:
    url = cli.env.pop("JQUEUE_STORAGE")
    cli("enqueue", "work", "x", "--storage", url)
    assert "work" in cli("stats", f"--storage={url}").stdout
    assert cli("--version").stdout.strip() == f"jqueue {jqueue.__version__}"
    done = cli("--storage", "memory://q", "stats", ok=False)
    assert done.stderr.startswith("error: a memory:// queue lives in one process")


def test_tables_show_id_prefixes_that_show_and_requeue_accept(cli: Cli) -> None:
    ids = [job["id"] for job in cli.json("enqueue", "work", "--stdin", stdin="a\nb\nc\n")]
    listing = cli("ls").stdout
    words = [word for line in listing.splitlines() for word in line.split()]
    shown = [word for word in words if len(word) >= 8 and any(i.startswith(word) for i in ids)]
    assert len(shown) == 3
    assert all(8 <= len(prefix) < 36 for prefix in shown)
    for prefix in shown:
        [full] = [i for i in ids if i.startswith(prefix)]
        assert cli.json("show", prefix)["id"] == full
    assert cli.json("requeue", shown[0]) == {"requeued": 0}
    done = cli("show", "", ok=False)
    assert "give more of it" in done.stderr


def test_bench_writes_results_only_where_asked(cli: Cli) -> None:
    cli("bench", "--ops", "5", "--queues", "direct", "--scenarios", "enqueue-seq")
    assert sorted(path.name for path in cli.cwd.iterdir()) == []
    wrong = cli("bench", "--scenarios", "enqueue-seq,fast", ok=False)
    assert wrong.stderr.strip() == (
        "error: unknown scenario 'fast' (choose from enqueue-seq, enqueue-c10, enqueue-c50, "
        "dequeue-seq, mixed-c50)"
    )


COMMANDS = ["enqueue", "stats", "ls", "show", "requeue", "purge", "pause", "resume", "throttle", "history"]


@pytest.mark.parametrize("command", [*COMMANDS, "worker", "exec", "bench", "report", "demo", "dead ls"])
def test_help_reads_as_plain_text(cli: Cli, command: str) -> None:
    text = cli(*command.split(), "--help").stdout
    assert "<bool>" not in text  # a flag takes no value
    assert "``" not in text
    assert "[/" not in text


def test_listings_show_what_stats_counts(cli: Cli) -> None:
    cli("enqueue", "later", "x", "--delay", "3600")
    listing = cli("ls").stdout
    assert "scheduled" in listing
    assert re.search(r"in (59 m \d+ s|1 h 0 m)", listing)
    cli("pause", "later", "--enqueues")
    assert "enqueues paused: later" in cli("stats").stdout
    assert "no job will be claimed" in cli("throttle", "0", "--per", "1").stdout


def test_ctrl_c_stops_the_demo_gracefully_with_a_partial_summary(cli: Cli) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "jqueue", "demo", "--jobs", "200000", "--json"],
        cwd=cli.cwd,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(3)
    os.killpg(demo.pid, signal.SIGINT)
    out, err = demo.communicate(timeout=120)
    summary = json.loads(out)
    assert (demo.returncode, summary["interrupted"], summary["every_job_accounted_for"]) == (130, True, True)
    assert "Traceback" not in err


WORKER_MODULE = """
import asyncio
from pathlib import Path
from jqueue import Worker

def make(queue):
    worker = Worker(queue)

    @worker.handler("greet")
    async def greet(job):
        Path("greeted.txt").open("a").write(job.payload.decode() + "\\n")

    @worker.handler("slow")
    async def slow(job):
        await asyncio.sleep(30)

    return worker
"""


def test_worker_options_choose_handlers_limits_and_log_format(cli: Cli) -> None:
    (cli.cwd / "myjobs.py").write_text(WORKER_MODULE)
    cli("enqueue", "greet", "ann")
    cli("enqueue", "slow", "x")
    options = ("--burst", "-e", "greet", "--concurrency", "2", "--log-format", "json", "--json")
    done = cli("worker", "myjobs:make", *options)
    assert json.loads(done.stdout)["acked"] == 1
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(r["entrypoint"], r["outcome"]) for r in records if "outcome" in r] == [("greet", "acked")]
    assert cli.json("ls", "--entrypoint", "slow")[0]["status"] == "queued"  # not this worker's
    limited = ("--burst", "-e", "slow", "--timeout", "0.5", "--max-attempts", "1", "--json")
    timed = cli("worker", "myjobs:make", *limited)
    assert json.loads(timed.stdout)["timed_out"] == 1
    unknown = cli("worker", "myjobs:make", "-e", "nope", ok=False)
    assert unknown.stderr.startswith("error: the worker has no handler for nope")


def test_an_idle_burst_says_why_it_claimed_nothing(cli: Cli) -> None:
    (cli.cwd / "myjobs.py").write_text(WORKER_MODULE)
    cli("enqueue", "greet", "ann")
    cli("pause", "greet")
    done = cli("worker", "myjobs:make", "--burst", "-e", "greet")
    assert "claimed nothing: claims of greet are paused" in done.stderr
    cli("resume", "greet")
    cli("enqueue", "greet", "later", "--delay", "3600")
    cli("worker", "myjobs:make", "--burst", "-e", "greet")
    done = cli("worker", "myjobs:make", "--burst", "-e", "greet")
    assert "claimed nothing: 1 job not due yet" in done.stderr


def test_enqueue_stdin_names_a_bad_line_and_can_be_all_or_nothing(cli: Cli) -> None:
    big = "x" * (1024 * 1024 + 1)
    lines = "".join(f"{n}\n" for n in range(5)) + big + "\nafter\n"
    done = cli("enqueue", "work", "--stdin", "--batch", "2", stdin=lines, ok=False)
    assert done.stderr.strip() == (
        "error: line 6: a payload of 1048577 bytes is over the limit of 1048576; 4 jobs committed before it"
    )
    assert len(cli.json("ls")) == 4
    atomic = cli("enqueue", "other", "--stdin", "--atomic", stdin=lines, ok=False)
    assert atomic.stderr.strip().endswith("; nothing was committed")
    assert cli.json("ls", "--entrypoint", "other") == []
    assert len(cli.json("enqueue", "other", "--stdin", "--atomic", stdin="a\nb\n")) == 2


def test_the_cli_pages_command_table_lists_every_command(cli: Cli) -> None:
    section = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    help_text = cli("--help").stdout
    commands = set(re.findall(r"^  ([a-z]+) ", help_text[help_text.index("Commands:") :], re.MULTILINE))
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {word for row in rows for word in re.findall(r"`([a-z]+)", row.split(" | ")[0])}
    assert commands <= named, commands - named
    mentioned = set(re.findall(r"(--[a-z-]+)", section))
    for command in ("worker", "exec", "enqueue", "purge"):
        options = set(re.findall(r"(--[a-z-]+)", cli(command, "--help").stdout)) - {"--help", "--json"}
        assert options <= mentioned, (command, options - mentioned)


def test_empty_listings_say_so(cli: Cli) -> None:
    cli("pause", "nothing")
    assert (cli("ls").stdout.strip(), cli("dead", "ls").stdout.strip()) == ("no jobs", "no dead letters")
    assert cli("history").stdout.strip() == "no finished jobs"


def test_report_on_a_plain_path_without_spark(cli: Cli) -> None:
    cli("enqueue", "work", "x")
    cli("exec", "work", "--burst", "--", "true")
    done = cli("--storage", "q.json", "report", "--out", "out", "--engine", "python")
    assert done.stdout.split() == ["out/report.md", "out/throughput.svg"]
    assert "computed with python" in done.stderr
    assert "| work | 1 |" in (cli.cwd / "out" / "report.md").read_text()


def test_enqueue_takes_every_option_of_a_job(cli: Cli) -> None:
    [job] = cli.json(
        "enqueue", "email", "hi", "--not-before", "2031-01-02T03:04:05+00:00", "--max-attempts", "4",
        "--ttl", "7200", "--id", "job-1", "--dedup-key", "k",
    )  # fmt: skip
    assert (job["id"], job["max_attempts"], job["dedup_key"]) == ("job-1", 4, "k")
    assert job["not_before"].startswith("2031-01-02T03:04:05")
    assert job["deadline"] is not None
    assert cli.json("enqueue", "email", "again", "--id", "job-1")[0]["payload"] == job["payload"]
    refused = cli("enqueue", "email", "x", "--ttl", "0", ok=False)
    assert refused.stderr.strip() == "error: --ttl must be positive, got 0 s"
    bad_time = cli("enqueue", "email", "x", "--not-before", "tomorrow", ok=False)
    assert "--not-before wants an ISO 8601 time" in bad_time.stderr
    both = cli("enqueue", "email", "x", "--delay", "5", "--not-before", "2031-01-01T00:00:00Z", ok=False)
    assert both.stderr.strip() == "error: give --delay or --not-before, not both"
    lines = cli("enqueue", "email", "--stdin", "--id", "j", stdin="a\n", ok=False)
    assert "do not go with --stdin" in lines.stderr


async def test_tables_fit_80_columns_with_whole_headers_and_a_line_a_row(cli: Cli, tmp_path: Path) -> None:
    storage = LocalFileSystemStorage(tmp_path / "q.json")
    async with DirectQueue(storage, policy=QueuePolicy(max_attempts=1)) as queue:
        await queue.enqueue("a_rather_long_entrypoint_name", b'{"to": "someone@example.com", "body": "hi"}')
        await queue.enqueue("short", b"x" * 300, priority=7)
        [job] = await queue.dequeue("a_rather_long_entrypoint_name")
        error = "ValueError: 1 validation error for Order: quantity: Field required " * 3
        await queue.nack(job.id, error=error)
        [other] = await queue.dequeue("short")
        await queue.ack(other.id)
    cli.env["COLUMNS"] = "80"
    for command, headers in (
        (("ls",), ("id", "entrypoint", "status", "priority", "attempts", "age")),
        (("stats",), ("entrypoint", "queued", "scheduled", "in progress", "dead", "oldest queued")),
        (("dead", "ls"), ("id", "entrypoint", "attempts", "reason", "died", "error")),
        (("history",), ("id", "entrypoint", "outcome", "tries", "ended")),
    ):
        lines = cli(*command).stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, (command, lines)
        header = next(line for line in lines if line.split() and line.split()[0] in ("id", "entrypoint"))
        assert all(f" {name} " in f" {header} " for name in headers), (command, header)
        assert sum("ValueError" in line for line in lines) <= 1, (command, lines)  # a line a row, not a word

"""What a team sees of ``jqueue worker`` and ``jqueue exec`` in daily use: a start line that says
what runs where, failures with their reason in the text log, a command that cannot start
refused before any job is claimed, and a command killed by a signal named so."""

from __future__ import annotations

import json
import os
import stat

from test_cli import WORKER_MODULE, Cli, cli

__all__ = ["cli"]  # the fixture, for this module's tests


def _start_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "worker started:" in line]


def test_exec_says_at_start_what_it_runs_and_why_jobs_failed(cli: Cli) -> None:
    cli("enqueue", "shell", "bad")
    script = 'read line; echo "cannot: $line" >&2; exit 3'
    options = ("--burst", "--max-attempts", "2", "--retry-delay", "0", "--concurrency", "3")
    done = cli("exec", "shell", *options, "--visibility-timeout", "45", "--", "sh", "-c", script)
    [start] = _start_lines(done.stderr)
    assert (cli.cwd / "q.json").as_uri() in start
    assert f"handlers shell (command: sh -c '{script}')" in start
    for part in ("concurrency 3", "visibility timeout 45 s", "max attempts 2"):
        assert part in start, start
    failures = [line for line in done.stderr.splitlines() if " shell: " in line]
    assert len(failures) == 2, done.stderr
    why = "(CommandFailedError: exit status 3: cannot: bad)"
    assert " INFO jqueue.worker job " in failures[0]
    assert f"shell: retried {why}" in failures[0]
    assert " ERROR jqueue.worker job " in failures[1]
    assert f"shell: dead {why}" in failures[1]


def test_worker_says_at_start_what_it_runs(cli: Cli) -> None:
    (cli.cwd / "myjobs.py").write_text(WORKER_MODULE)
    done = cli("worker", "myjobs:make", "--burst", "--concurrency", "7", "--max-attempts", "9")
    [start] = _start_lines(done.stderr)
    assert (cli.cwd / "q.json").as_uri() in start
    assert "handlers greet (make.<locals>.greet), slow (make.<locals>.slow)" in start
    for part in ("concurrency 7", "visibility timeout 300 s", "max attempts 9"):
        assert part in start, start


def test_a_json_start_line_is_one_json_record(cli: Cli) -> None:
    done = cli("exec", "shell", "--burst", "--log-format", "json", "--", "cat")
    records = [json.loads(line) for line in done.stderr.splitlines()]
    [start] = [r for r in records if r["message"].startswith("worker started:")]
    assert "handlers shell (command: cat)" in start["message"]


def test_exec_refuses_a_command_that_cannot_start_and_claims_nothing(cli: Cli) -> None:
    [job] = cli.json("enqueue", "shell", "x")
    not_executable = cli.cwd / "script.sh"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    for command, why in (
        ("no-such-command-here", "no such command on the PATH"),
        ("./missing.sh", "no such file"),
        (f".{os.sep}script.sh", "not an executable file"),
        (str(cli.cwd), "not an executable file"),
    ):
        done = cli("exec", "shell", "--burst", "--", command, ok=False)
        assert done.returncode == 1
        assert done.stderr.strip() == f"error: cannot run {command!r}: {why}", done.stderr
        assert done.stdout == ""
    [still] = cli.json("ls")
    assert (still["id"], still["status"], still["attempts"]) == (job["id"], "queued", 0)

    not_executable.chmod(not_executable.stat().st_mode | stat.S_IXUSR)
    summary = json.loads(cli("exec", "shell", "--burst", "--json", "--", "./script.sh").stdout)
    assert summary["acked"] == 1


def test_a_command_killed_by_a_signal_says_which(cli: Cli) -> None:
    cli("enqueue", "shell", "x")
    options = ("--burst", "--max-attempts", "1", "--json")
    cli("exec", "shell", *options, "--", "sh", "-c", "echo going >&2; kill -TERM $$")
    [dead] = cli.json("dead", "ls")
    assert dead["last_error"] == "CommandFailedError: killed by SIGTERM: going"


FAILING_MODULE = """
from jqueue import Worker

def make(queue):
    worker = Worker(queue, max_attempts=1)

    @worker.handler("mail")
    async def mail(job):
        if job.payload == b"bad":
            raise ValueError("the customer record 12345 has no e-mail address on file, so nothing was sent")
        return {"sent": job.payload.decode()}

    return worker
"""


def test_blank_stdin_lines_are_skipped_unless_allowed(cli: Cli) -> None:
    done = cli("enqueue", "z", "--stdin", "--batch", "2", stdin="a\n\n  \nb\n\n")
    assert done.stdout.strip() == "enqueued 2 jobs to 'z' (3 blank lines skipped)"
    assert [job["payload"] for job in cli.json("ls")] == ["YQ==", "Yg=="]
    kept = cli.json("enqueue", "empty", "--stdin", "--allow-empty", stdin="c\n\n")
    assert [job["payload"] for job in kept] == ["Yw==", ""]


def test_finished_jobs_show_their_record_and_result_and_say_what_happened(cli: Cli) -> None:
    (cli.cwd / "mail.py").write_text(FAILING_MODULE)
    [good] = cli.json("enqueue", "mail", "ann")
    [bad] = cli.json("enqueue", "mail", "bad")
    [quiet] = cli.json("enqueue", "other", "x")
    cli("worker", "mail:make", "--burst")
    cli("exec", "other", "--burst", "--", "true")

    shown = cli.json("show", good["id"][:8])
    assert (shown["job_id"], shown["outcome"], shown["result"]) == (good["id"], "acked", '{"sent": "ann"}')
    assert '{"sent": "ann"}' in cli("show", good["id"]).stdout
    missing = cli("show", "no-such-job", ok=False)
    assert missing.stderr.strip() == "error: job 'no-such-job' is neither in the queue nor in its history"

    nothing = cli("result", quiet["id"])
    said = f"job {quiet['id']} was acked; its handler returned nothing"
    assert (nothing.stdout, nothing.stderr.strip()) == ("", said)

    assert [job["id"] for job in cli.json("ls", "--status", "any")] == [bad["id"]]  # a dead letter
    assert cli("purge", "--entrypoint", "mail", "--yes").stdout.strip() == "purged 1 job (dead of 'mail')"
    assert cli("purge", "--status", "any", "--yes").stdout.strip() == "purged 0 jobs (any)"
    assert bad["id"] in {record["job_id"] for record in cli.json("history")}


def test_history_fits_80_columns_with_the_errors_last_line_and_full_on_request(cli: Cli) -> None:
    (cli.cwd / "mail.py").write_text(FAILING_MODULE)
    cli("enqueue", "mail", "--stdin", stdin="ann\nbad\nbob\n")
    cli("worker", "mail:make", "--burst")
    cli.env["COLUMNS"] = "80"
    lines = cli("history").stdout.splitlines()
    assert len(lines) == 4  # a header and one line per record
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    assert "tries" in lines[0]
    outcomes = [line.split()[2] for line in lines[1:]]  # in the order the jobs ended
    assert sorted(outcomes) == ["acked", "acked", "dead"]
    [dead] = [line for line in lines[1:] if line.split()[2] == "dead"]
    assert "ValueError: the" in dead
    assert dead.rstrip().endswith("…")
    assert "Traceback" not in "\n".join(lines)
    full = cli("history", "--full").stdout
    assert "Traceback (most recent call last):" in full
    assert "nothing was sent" in full


def test_a_file_queue_whose_log_is_gone_names_the_directory_on_disk(cli: Cli) -> None:
    cli("enqueue", "a", "x")
    segments = cli.cwd / "q.json.segments"
    assert segments.is_dir()
    for child in sorted(segments.rglob("*"), reverse=True):
        child.unlink() if child.is_file() else child.rmdir()
    segments.rmdir()
    done = cli("ls", ok=False)
    assert done.returncode == 1
    assert f"{segments.as_uri()}/" in done.stderr
    assert ".d/" not in done.stderr


def test_the_demo_shows_its_table_not_a_line_per_job(cli: Cli) -> None:
    done = cli("demo", "--jobs", "200", "--failure-rate", "0.5")
    assert "every job accounted for" in done.stdout
    output = done.stdout + done.stderr
    assert "demo-square: retried" not in output
    assert "demo-square: dead" not in output

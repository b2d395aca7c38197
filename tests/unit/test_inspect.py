"""Inspecting a job while and after it runs (README: Command line): `logs --follow`, `exec`,
`run --keep-on-failure` and `describe`, over the fake engine."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, exits, runs_until_stopped
from test_readme_promises import run_cli
from testkit import wait_for

from emulator import api, cli
from emulator.backend import ExecIO, registry
from emulator.backend.docker_parts import pump_exec as _pump_exec
from emulator.backend.liveness import current_driver
from emulator.errors import NotRunning, UsageError
from emulator.jobspec import JobSpec, validate
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.run import runner
from emulator.state import job_records

JOB = "inspect-job"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    return tmp_path / "state"


def engine_of(monkeypatch: pytest.MonkeyPatch, fake: FakeBackend) -> FakeBackend:
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    return fake


def two_groups(tmp_path: Path, name: str = JOB) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "t.py").write_text("")
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "a.csv").write_text("1\n")
    return validate({"job_name": name, "entry_point": "t.py", "source_dir": "code", "hyperparameters": {"lr": 0.1},
                     "instance_groups": [
                         {"instance_group_name": "ga", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                         {"instance_group_name": "gb", "instance_type": "ml.c5.2xlarge", "instance_count": 1}],
                     "inputs": {"train": {"s3_data": "data", "instance_groups": ["ga"]}},
                     "output_path": "out"}, base_dir=tmp_path)


def run(spec: JobSpec, **options: Any) -> tuple[Any, RecordingReporter]:
    reporter = RecordingReporter()
    return api.run(spec, RunOptions(grace=1, **options), engine_name="fake", reporter=reporter), reporter


def exec_io(tty: bool = False) -> tuple[ExecIO, io.BytesIO, list[str]]:
    out, notes = io.BytesIO(), []
    return ExecIO(stdout=out, stderr=io.BytesIO(), tty=tty, notice=notes.append), out, notes


# --------------------------------------------------------------------------------------------------
# run --keep-on-failure


def test_keep_on_failure_keeps_a_failed_jobs_stopped_containers_and_network_and_says_how_to_use_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = engine_of(monkeypatch, FakeBackend({"algo-1": exits(2, 0.05), "algo-2": runs_until_stopped()}))
    result, reporter = run(two_groups(tmp_path), keep_on_failure=True)

    assert result.status == "Failed" and result.kept
    assert fake.remove_calls == [] and fake.removed == []
    assert set(fake.containers) == {f"{JOB}-algo-1", f"{JOB}-algo-2"}
    assert not any(c.running for c in fake.containers.values())  # stopped, not left running
    assert f"hetero-emu-{JOB}" in fake.networks
    # The watcher still guarded the run, and was told to forget what is kept.
    assert "guard" in fake.call_names() and fake.kept == [JOB]
    note = " ".join(reporter.infos)
    assert f"hetero-emu exec {JOB} algo-N" in note and "docker cp" in note and f"clean --job {JOB}" in note
    # `ps` lists them and `clean --job` removes them.
    assert {r.name for r in api.ps(engine_name="fake")} >= {f"{JOB}-algo-1", f"{JOB}-algo-2"}
    api.clean(JOB, engine_name="fake")
    assert not fake.containers and not fake.networks


@pytest.mark.parametrize("outcome", ["Completed", "Stopped"])
def test_keep_on_failure_removes_everything_of_a_job_that_did_not_fail(
        outcome: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    interrupt = {"interrupt_on_states_call": 3} if outcome == "Stopped" else {}
    scripts = {"algo-1": runs_until_stopped(), "algo-2": runs_until_stopped()} if outcome == "Stopped" else {}
    fake = engine_of(monkeypatch, FakeBackend(scripts, **interrupt))  # type: ignore[arg-type]
    result, _ = run(two_groups(tmp_path), keep_on_failure=True)

    assert result.status == outcome and not result.kept
    assert fake.kept == [] and not fake.containers and not fake.networks


def test_the_run_summary_of_a_kept_job_says_how_to_exec_copy_and_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend({"algo-2": exits(3, 0.02)}))
    spec = tmp_path / "job.yaml"
    two_groups(tmp_path)
    spec.write_text(json.dumps({"job_name": JOB, "entry_point": "t.py", "source_dir": "code", "output_path": "out",
                                "instance_groups": [{"instance_group_name": "ga", "instance_type": "ml.c5.xlarge",
                                                     "instance_count": 2}]}))
    code, text = run_cli(["run", str(spec), "--engine", "fake", "--keep-on-failure", "--quiet"])
    assert code == 1
    assert f"hetero-emu exec {JOB} algo-1 -- bash" in text
    assert f"docker cp {JOB}-algo-1:/opt/ml/model ./" in text
    assert f"hetero-emu clean --job {JOB}" in text


# --------------------------------------------------------------------------------------------------
# exec


def test_exec_runs_in_a_running_host_itself_and_in_a_copy_of_a_stopped_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = engine_of(monkeypatch, FakeBackend({"algo-1": exits(0), "algo-2": runs_until_stopped()}))
    fake.exec_answers["hostname"] = (0, b"algo-2\n")
    plan_spec = two_groups(tmp_path)
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(result=run(plan_spec)[0]), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any(c.started_at for c in fake.containers.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # algo-1 exits 0 at once; algo-2 runs on

    streams, out, notes = exec_io()
    assert api.exec_in_host(JOB, "algo-2", ["hostname"], streams, engine_name="fake") == 0
    assert out.getvalue() == b"algo-2\n" and notes == []
    fake.exec_answers["false"] = (1, b"")
    streams, _, notes = exec_io()
    assert api.exec_in_host(JOB, "algo-1", ["false"], streams, engine_name="fake") == 1  # its exit code
    assert notes and "copy" in notes[0]
    assert fake.exec_calls == [(f"{JOB}-algo-2", ("hostname",), False), (f"{JOB}-algo-1", ("false",), True)]
    api.stop(JOB, engine_name="fake")
    thread.join(10)
    assert done["result"].status == "Stopped"


def test_exec_on_an_unknown_job_or_host_is_a_usage_error_naming_what_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = engine_of(monkeypatch, FakeBackend({"algo-1": exits(1, 0.02)}))
    run(two_groups(tmp_path), keep_on_failure=True)

    code, text = run_cli(["exec", "no-such-job", "algo-1", "--engine", "fake", "--", "ls"])
    assert code == 2 and "no job 'no-such-job'" in text and "hetero-emu ps" in text and "Traceback" not in text
    code, text = run_cli(["exec", JOB, "algo-7", "--engine", "fake", "--", "ls"])
    assert code == 2 and "no host 'algo-7'" in text and "algo-1, algo-2" in text
    assert fake.exec_calls == []


def test_exec_on_a_finished_job_says_it_is_not_running_with_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend())
    result, _ = run(two_groups(tmp_path))
    with pytest.raises(NotRunning):
        api.exec_in_host(JOB, "algo-1", ["ls"], exec_io()[0], engine_name="fake")
    code, text = run_cli(["exec", JOB, "algo-1", "--engine", "fake", "--", "ls"])
    lines = text.strip().splitlines()
    assert code == 3 and len(lines) == 2, text
    assert lines[0] == (f"error: job {JOB} is not running (it is Completed): its containers were removed, "
                        "there is no algo-1 to run a command in")
    assert lines[1].startswith(f"hint: its hosts' files are under {result.job_dir / 'hosts'}")
    assert "--keep-on-failure" in lines[1]


def test_exec_without_a_command_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend())
    with pytest.raises(UsageError) as info:
        api.exec_in_host(JOB, "algo-1", [], exec_io()[0], engine_name="fake")
    assert info.value.exit_code == 2 and "-- bash" in (info.value.hint or "")


# --------------------------------------------------------------------------------------------------
# logs --follow


def fake_job_folder(tmp_path: Path, driver: str, hosts: tuple[str, ...] = ("algo-1", "algo-2")) -> Path:
    """A job's folder as a run lays it out while running: hosts/algo-N/ staged, logs/ growing, its
    record InProgress naming its driver."""
    folder = tmp_path / "out" / JOB
    for host in hosts:
        config = folder / "hosts" / host / "input" / "config"
        config.mkdir(parents=True)
        (config / "resourceconfig.json").write_text(json.dumps({"current_host": host, "current_group_name": "g"}))
    (folder / "logs").mkdir(parents=True)
    job_records.record(JOB, folder, "InProgress", Driver=driver)
    return folder


def test_follow_prints_what_is_there_then_lines_as_written_and_ends_when_the_job_ends(tmp_path: Path) -> None:
    folder = fake_job_folder(tmp_path, current_driver())
    (folder / "logs" / "algo-1.log").write_text("first\n")
    follower = api.LogFollower(JOB, engine_name="fake", interval=0.01)
    seen: list[tuple[str, str, str]] = []
    thread = threading.Thread(target=lambda: seen.extend(follower.lines()), daemon=True)
    thread.start()
    wait_for(lambda: seen, "the line that was there")
    with (folder / "logs" / "algo-2.log").open("a") as f:
        f.write("from two\nno newline yet")
    with (folder / "logs" / "algo-1.log").open("a") as f:
        f.write("second\n")
    wait_for(lambda: len(seen) >= 3, "the lines written since")
    try:
        assert thread.is_alive()  # the job runs on: the follow goes on
        assert ("algo-1", "g", "second") in seen and ("algo-2", "g", "from two") in seen
    finally:
        job_records.record(JOB, folder, "Completed")
    thread.join(5)
    assert not thread.is_alive() and follower.ended == "Completed"
    assert seen == [("algo-1", "g", "first"), ("algo-1", "g", "second"), ("algo-2", "g", "from two"),
                    ("algo-2", "g", "no newline yet")]


def test_follow_of_a_job_whose_driver_died_ends_instead_of_waiting(
        tmp_path: Path) -> None:
    gone = current_driver().rsplit("/", 1)[0] + "/1"  # this pid, another start time: a dead driver
    folder = fake_job_folder(tmp_path, gone)
    (folder / "logs" / "algo-1.log").write_text("last words\n")
    started = time.monotonic()
    code, text = run_cli(["logs", JOB, "--follow", "--engine", "fake"])
    assert code == 0 and time.monotonic() - started < 5
    assert "algo-1 (g) | last words" in text
    assert f"the driver of {JOB} is gone" in text


def test_follow_filters_by_host_and_refuses_an_unknown_host(tmp_path: Path) -> None:
    folder = fake_job_folder(tmp_path, current_driver())
    (folder / "logs" / "algo-1.log").write_text("one\n")
    (folder / "logs" / "algo-2.log").write_text("two\n")
    job_records.record(JOB, folder, "Failed")
    code, text = run_cli(["logs", JOB, "--follow", "--host", "algo-2", "--engine", "fake"])
    assert code == 0 and "algo-2 (g) | two" in text and "one" not in text
    code, text = run_cli(["logs", JOB, "--follow", "--host", "algo-9", "--engine", "fake"])
    assert code == 2 and "no host 'algo-9'" in text and "algo-1, algo-2" in text


def test_follow_of_a_job_that_never_ran_is_one_line_a_hint_and_exit_2(
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend())
    code, text = run_cli(["logs", "never-ran", "--follow", "--engine", "fake"])
    lines = text.strip().splitlines()
    assert code == 2 and len(lines) == 2 and "Traceback" not in text
    assert lines[0].startswith("error: no job 'never-ran'") and "hetero-emu ps" in lines[1]


def test_ctrl_c_ends_a_follow_quietly_with_exit_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = fake_job_folder(tmp_path, current_driver())
    (folder / "logs" / "algo-1.log").write_text("hello\n")

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(api.time, "sleep", interrupted)
    code, text = run_cli(["logs", JOB, "--follow", "--engine", "fake"])
    assert code == 130
    assert text.strip().splitlines() == ["algo-1 (g) | hello"]  # nothing said about the stop


# --------------------------------------------------------------------------------------------------
# describe


def test_describe_json_prints_job_json_exactly_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    engine_of(monkeypatch, FakeBackend())
    result, _ = run(two_groups(tmp_path))
    path = result.job_dir / "job.json"
    # Spaced as json.dumps never writes it: the output is the file, not the document written again.
    path.write_text(path.read_text().replace("\n", "\n ", 3))
    monkeypatch.setattr("sys.argv", ["hetero-emu", "describe", JOB, "--json", "--engine", "fake"])
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as stop:
            cli.main()  # stdout alone (run_cli joins the streams)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert stop.value.code == 0
    assert capsys.readouterr().out == path.read_text()


def test_describe_reads_as_a_summary_of_status_times_hosts_channels_and_artifacts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend({"algo-1": exits(0), "algo-2": exits(4, 0.02, logs=["oops\n"])}))
    result, _ = run(two_groups(tmp_path))
    code, text = run_cli(["describe", JOB, "--engine", "fake"])
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"{JOB}: Failed"
    assert lines[1] == "failed first: algo-2 (gb)"
    assert lines[2].startswith("FailureReason: AlgorithmError: , exit code: 4")
    assert any(line.startswith("created:") for line in lines) and any(line.startswith("ended:") for line in lines)
    steps = [line.split()[0] for line in lines[lines.index("status transitions:") + 1:][:6] if line]
    assert steps == ["Starting", "Downloading", "Training", "Uploading", "Failed"]
    table = [line.split() for line in lines if line.strip().startswith("algo-")]
    assert [row[:4] for row in table] == [["algo-1", "ga", "ml.c5.xlarge", "0"], ["algo-2", "gb", "ml.c5.2xlarge", "4"]]
    assert all(float(row[4]) >= 0 for row in table)  # seconds
    assert any(line.strip().startswith("train:") and "-> ga" in line for line in lines)
    assert any(line.startswith("hyperparameters:") and "lr=0.1" in line for line in lines)
    assert f"model:  {result.model_artifact}" in lines
    assert f"logs:   {result.job_dir / 'logs'}" in lines


def test_describe_of_an_unknown_job_is_one_line_a_hint_and_exit_2(
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine_of(monkeypatch, FakeBackend())
    code, text = run_cli(["describe", "nope", "--engine", "fake"])
    lines = text.strip().splitlines()
    assert code == 2 and len(lines) == 2 and lines[0].startswith("error: no job 'nope'")
    assert lines[1].startswith("hint:")


# --------------------------------------------------------------------------------------------------
# exec's streams (the Docker backend's side, over a socket pair instead of the engine)


def test_a_tty_exec_forwards_the_keyboard_copies_the_output_and_leaves_no_reader_behind() -> None:
    ours, engine_side = socket.socketpair()
    keys_read, keys_written = os.pipe()
    out = io.BytesIO()

    def engine() -> None:  # echoes what it gets, then the command exits (its stream closes)
        got = engine_side.recv(100)
        engine_side.sendall(b"echo: " + got)
        engine_side.close()

    thread = threading.Thread(target=engine)
    thread.start()
    os.write(keys_written, b"hello\r")
    with os.fdopen(keys_read, "rb", buffering=0) as keys:
        _pump_exec(ours, ExecIO(stdout=out, stderr=io.BytesIO(), stdin=keys, tty=True))  # type: ignore[arg-type]
    thread.join(5)
    os.close(keys_written)
    assert out.getvalue() == b"echo: hello\r"
    assert not any(t.name == "exec-stdin" for t in threading.enumerate())


def test_an_exec_without_a_tty_keeps_stdout_and_stderr_apart() -> None:
    ours, engine_side = socket.socketpair()
    out, err = io.BytesIO(), io.BytesIO()
    frames = b"".join(bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data
                      for stream, data in ((1, b"out 1\n"), (2, b"err 1\n"), (1, b"out 2\n")))
    engine_side.sendall(frames)
    engine_side.close()
    _pump_exec(ours, ExecIO(stdout=out, stderr=err))
    assert out.getvalue() == b"out 1\nout 2\n" and err.getvalue() == b"err 1\n"


def test_describe_says_which_image_ran_and_what_it_stood_in_for(tmp_path: Path) -> None:
    named = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
    notes = [f"hetero-emu/pytorch-training:1.11.0-py39 stands in for {named}, which is not in the Docker engine",
             "pytorch 1.11.0 py38: running on Python 3.9"]
    doc = {"TrainingJobName": JOB, "TrainingJobStatus": "Completed", "AlgorithmSpecification": {"TrainingImage": named},
           "Emulator": {"Image": "hetero-emu/pytorch-training:1.11.0-py39",
                        "StandIn": {"For": named, "Image": "hetero-emu/pytorch-training:1.11.0-py39", "Notes": notes}}}
    lines = cli.describe_lines(doc, tmp_path)
    at = lines.index("image:    hetero-emu/pytorch-training:1.11.0-py39")
    assert [line.strip() for line in lines[at + 1:at + 3]] == notes
    plain = cli.describe_lines({**doc, "Emulator": {"Image": named}}, tmp_path)
    assert f"image:    {named}" in plain and not any("stands in" in line for line in plain)

"""The job lifecycle driven through `run_job` against the in-memory FakeBackend (the README's *How
SageMaker concepts map*, *When things go wrong* and *Command line* say what it must do).

Every spec is YAML text written into tmp_path next to a code folder and channel data, loaded with
`load_spec_file`, exactly as `hetero-emu run` does. The default cluster is heterogeneous:
algo-1, algo-2 in data_group (ml.c5.xlarge) and algo-3 in dnn_group (ml.p3.2xlarge).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import re
import tarfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, HostScript, exits, oom_killed, runs_until_stopped

from emulator.backend import Resource
from emulator.defaults import DEFAULT_IMAGE, PYTORCH_IMAGE
from emulator.errors import DockerUnavailable, EnvironmentProblem, ImageMissing, JobFolderTaken, UsageError
from emulator.jobspec import JobSpec, load_spec_file
from emulator.jobspec.faults import parse_injection
from emulator.options import RunOptions
from emulator.reports.console import ConsoleReporter, RecordingReporter
from emulator.result import JobResult
from emulator.run import runner
from emulator.run.runner import run_job
from emulator.state import job_records
from emulator.training_images.frameworks import FrameworkImage

JOB = "fake-job"
C = {h: f"{JOB}-{h}" for h in ("algo-1", "algo-2", "algo-3")}  # container names
ALL = [C["algo-1"], C["algo-2"], C["algo-3"]]

HETERO = f"""\
job_name: {JOB}
entry_point: train.py
source_dir: code
hyperparameters: {{epochs: 2, lr: 0.01}}
instance_groups:
  - {{instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 2}}
  - {{instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}}
inputs:
  training:
    s3_data: data/train
    distribution: ShardedByS3Key
    content_type: text/csv
    instance_groups: [data_group]
  validation:
    s3_data: data/validation
    instance_groups: [dnn_group]
output_path: out
max_run: 60
"""

TRAIN_FILES = [f"part-{i:04d}.csv" for i in range(5)]


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "data" / "train").mkdir(parents=True)
    for name in TRAIN_FILES:
        (root / "data" / "train" / name).write_text(f"{name},1,2,3\n")
    (root / "data" / "validation").mkdir()
    (root / "data" / "validation" / "val.csv").write_text("v,1\n")
    return root


@pytest.fixture
def spec_of(proj: Path) -> Callable[..., JobSpec]:
    def load(text: str = HETERO) -> JobSpec:
        path = proj / "job.yaml"
        path.write_text(text)
        return load_spec_file(path)

    return load


def run(spec: JobSpec, fake: FakeBackend, **kw: Any) -> tuple[JobResult, RecordingReporter]:
    reporter = kw.pop("reporter", None) or RecordingReporter()
    kw.setdefault("grace", 2.5)
    # What the run talks to goes beside its options (emulator.options.RunOptions).
    collaborators = {key: kw.pop(key) for key in ("now", "image_builder", "framework_builder") if key in kw}
    try:
        result = run_job(spec, RunOptions(**kw), backend=fake, reporter=reporter, **collaborators)
    except KeyboardInterrupt:  # never let it escape into pytest (it would end the session)
        pytest.fail("KeyboardInterrupt escaped run_job")
    return result, reporter


def job_json(result: JobResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((result.job_dir / "job.json").read_text())
    return data


def host_entry(doc: dict[str, Any], host: str) -> dict[str, Any]:
    return next(h for h in doc["Hosts"] if h["Host"] == host)


def torn_down(fake: FakeBackend) -> bool:
    return not fake.containers and not fake.networks


def tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def checksums(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def tree_snapshot(folder: Path) -> dict[str, tuple[str, float]]:
    out = {}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = (p.read_text() if p.is_file() else "<dir>", p.stat().st_mtime)
    return out


# ---------------------------------------------------------------------------------------------------
# Completion


def test_every_host_exits_zero_completes(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-1": exits(0, 0.02), "algo-2": exits(0, 0.05), "algo-3": exits(0, 0.08)})
    result, _ = run(spec_of(), fake)

    assert result.status == "Completed"
    assert result.exit_code == 0
    assert result.failure_reason is None
    assert [(h.host, h.group, h.exit_code, h.failure_reason) for h in result.hosts] == [
        ("algo-1", "data_group", 0, None),
        ("algo-2", "data_group", 0, None),
        ("algo-3", "dnn_group", 0, None),
    ]
    doc = job_json(result)
    assert doc["TrainingJobStatus"] == "Completed"
    assert "FailureReason" not in doc
    assert fake.stopped_while_running == set()


def test_containers_are_created_on_the_job_network_then_started_together(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend()
    run(spec_of(), fake)

    calls = fake.call_names()
    assert fake.networks_created == [f"hetero-emu-{JOB}"]
    assert fake.created == ALL
    assert calls.index("create_network") < calls.index("create_container") < calls.index("start")
    # one start() call naming every host: they start together, as the toolkit needs
    assert fake.start_calls == [tuple(ALL)]
    assert sorted(fake.followed) == sorted(ALL)


def test_host_exiting_zero_early_stops_nobody(spec_of: Callable[..., JobSpec]) -> None:
    # algo-1 is a data server the trainer shuts down early; the others keep working.
    fake = FakeBackend({"algo-1": exits(0, 0.0), "algo-2": exits(0, 0.15), "algo-3": exits(0, 0.3)})
    started = time.monotonic()
    result, _ = run(spec_of(), fake)

    assert result.status == "Completed"
    assert fake.stopped_while_running == set(), "a host exiting 0 must not stop the others"
    assert [h.exit_code for h in result.hosts] == [0, 0, 0]
    assert time.monotonic() - started >= 0.3  # the runner waited for algo-3 to finish by itself
    seconds = {h.host: h.seconds for h in result.hosts}
    assert seconds["algo-1"] < seconds["algo-3"]
    assert seconds["algo-3"] >= 0.25


# ---------------------------------------------------------------------------------------------------
# Failure


def test_failing_host_fails_the_job_and_stops_exactly_the_running_hosts(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({
        "algo-1": exits(0, 0.0),  # finished early by itself: not to be stopped
        "algo-2": exits(1, 0.1),
        "algo-3": runs_until_stopped(),
    })
    result, _ = run(spec_of(), fake, grace=2.5)

    assert result.status == "Failed"
    assert result.exit_code == 1
    first = fake.stop_calls[0]
    assert first.names == (C["algo-3"],)
    assert first.running == (C["algo-3"],)
    assert first.grace == 2.5
    assert fake.stopped_while_running == {C["algo-3"]}
    codes = {h.host: h.exit_code for h in result.hosts}
    assert codes == {"algo-1": 0, "algo-2": 1, "algo-3": 143}
    assert result.failed_host == "algo-2 (data_group)"
    doc = job_json(result)
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"] == result.failure_reason
    assert host_entry(doc, "algo-1")["FailureReason"] is None
    assert host_entry(doc, "algo-2")["FailureReason"] == result.failure_reason
    assert host_entry(doc, "algo-3")["ExitCode"] == 143


def test_failure_reason_carries_the_failure_file(spec_of: Callable[..., JobSpec]) -> None:
    text = "CUDA error: device-side assert triggered\nin loss.backward()"
    fake = FakeBackend({
        "algo-1": runs_until_stopped(),
        "algo-2": runs_until_stopped(),
        "algo-3": exits(2, 0.05, files={"output/failure": text}, logs=["epoch 1\n", "boom\n"]),
    })
    result, _ = run(spec_of(), fake)

    reason = result.failure_reason
    assert reason is not None
    # The service's words: the failure file, then the exit code; the host is the emulator's own note.
    assert reason == f"AlgorithmError: {text}, exit code: 2"
    assert result.failed_host == job_json(result)["Emulator"]["FailedHost"] == "algo-3 (dnn_group)"
    assert host_entry(job_json(result), "algo-3")["FailureReason"] == reason
    assert fake.stopped_while_running == {C["algo-1"], C["algo-2"]}


def test_failure_reason_from_a_long_failure_file_is_cut_at_1024_chars(spec_of: Callable[..., JobSpec]) -> None:
    text = "".join(f"line {i:04d} of a long traceback\n" for i in range(200))  # ~6000 chars
    assert len(text) > 3000
    fake = FakeBackend({"algo-2": exits(1, 0.0, files={"output/failure": text}), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    reason = result.failure_reason
    assert reason is not None
    assert len(reason) <= 1024
    assert reason.startswith("AlgorithmError: line 0000") and result.failed_host == "algo-2 (data_group)"
    assert text[:800] in reason
    assert "line 0100" not in reason  # nothing from beyond the first 1024 chars of the file


def test_failure_reason_without_failure_file_has_exit_code_and_last_log_lines(
    spec_of: Callable[..., JobSpec],
) -> None:
    lines = [f"step-{i:02d}\n" for i in range(1, 41)]
    fake = FakeBackend({
        "algo-1": runs_until_stopped(),
        "algo-2": exits(3, 0.05, logs=[*lines, "fatal: disk on fire"]),  # last line: no newline
        "algo-3": runs_until_stopped(),
    })
    result, _ = run(spec_of(), fake)

    reason = result.failure_reason
    assert reason is not None
    assert reason.startswith("AlgorithmError: , exit code: 3. Last lines:\n")
    assert result.failed_host == "algo-2 (data_group)"
    assert "fatal: disk on fire" in reason
    assert "step-40" in reason and "step-39" in reason
    assert "step-01" not in reason  # the last lines, not the whole log


def test_oom_killed_host_is_reported_as_out_of_memory(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-1": runs_until_stopped(), "algo-2": runs_until_stopped(), "algo-3": oom_killed(0.05)})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    reason = result.failure_reason
    assert reason is not None
    assert "out of memory" in reason
    assert "algo-3" in reason and "dnn_group" in reason
    assert {h.host: h.exit_code for h in result.hosts}["algo-3"] == 137


def test_max_run_exceeded_stops_the_job_as_the_service_does(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({
        "algo-1": runs_until_stopped(),
        "algo-2": runs_until_stopped(ignore_sigterm=True),
        "algo-3": runs_until_stopped(),
    })
    started = time.monotonic()
    result, _ = run(spec_of(HETERO.replace("max_run: 60", "max_run: 1")), fake)
    elapsed = time.monotonic() - started

    assert 1.0 <= elapsed < 10
    # API_DescribeTrainingJob: SecondaryStatus MaxRuntimeExceeded is one of TrainingJobStatus Stopped's.
    assert result.status == "Stopped"
    assert result.exit_code == 1  # the work did not finish: not a user's stop (130)
    assert result.failure_reason is None
    doc = job_json(result)
    assert doc["TrainingJobStatus"] == "Stopped"
    assert doc["SecondaryStatus"] == "MaxRuntimeExceeded"
    assert "FailureReason" not in doc
    assert doc["StoppingCondition"] == {"MaxRuntimeInSeconds": 1}
    assert fake.stopped_while_running == set(ALL)
    assert {h["Host"]: h["ExitCode"] for h in doc["Hosts"]} == {"algo-1": 143, "algo-2": 137, "algo-3": 143}
    assert torn_down(fake)


# ---------------------------------------------------------------------------------------------------
# Interrupt and teardown


def test_keyboard_interrupt_stops_the_job_and_tears_down(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")},
                       interrupt_on_states_call=3)
    result, reporter = run(spec_of(), fake)

    assert result.status == "Stopped"
    assert result.exit_code == 130
    assert job_json(result)["TrainingJobStatus"] == "Stopped"
    assert fake.stopped_while_running == set(ALL)
    assert fake.stop_calls[0].grace == 2.5
    assert fake.remove_calls == [JOB]
    assert torn_down(fake)
    assert any("interrupt" in w for w in reporter.warnings)


class _StatusAtStop(FakeBackend):
    """Notes the job's recorded status and secondary status when the hosts are being stopped."""

    seen: tuple[str, str] | None = None
    training_start: str | None = None

    def stop(self, names: Sequence[str], grace: float) -> None:
        record = job_records.find(JOB)
        assert record is not None
        self.seen = (str(record.status), str(record.doc.get("SecondaryStatus")))
        self.training_start = record.doc.get("TrainingStartTime")
        super().stop(names, grace)


def test_a_stopped_job_is_stopping_until_it_has_stopped(spec_of: Callable[..., JobSpec]) -> None:
    """As the service shows it: Stopping (status and secondary status) from the request to stop until
    the hosts are down, then Stopped; never back to InProgress on the way."""
    fake = _StatusAtStop({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")}, interrupt_on_states_call=3)
    result, _ = run(spec_of(), fake)
    assert fake.seen == ("Stopping", "Stopping")
    # TrainingStartTime is in the record while the job runs (DescribeTrainingJob has it from then on).
    assert fake.training_start == job_json(result)["TrainingStartTime"]
    steps = [t["Status"] for t in job_json(result)["SecondaryStatusTransitions"]]
    assert steps[-2:] == ["Uploading", "Stopped"] and steps.index("Stopping") == steps.index("Training") + 1
    assert job_json(result)["TrainingJobStatus"] == "Stopped"


class _Journal:
    """Every write of the job's record, as (TrainingJobStatus, SecondaryStatus), a repeat written once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries: list[tuple[str, str]] = []
        write = job_records.record

        def record(job_name: str, job_dir: Path, status: Any, **fields: Any) -> bool:
            entry = (str(status), str(fields.get("SecondaryStatus", status)))
            if not self.entries or self.entries[-1] != entry:
                self.entries.append(entry)
            return write(job_name, job_dir, status, **fields)

        monkeypatch.setattr(job_records, "record", record)

    def statuses(self) -> list[str]:
        return [status for i, (status, _) in enumerate(self.entries) if i == 0 or self.entries[i - 1][0] != status]


# Each cause that stops a running job: a user's stop (Ctrl-C, or the SIGTERM StopTrainingJob sends the
# driver), max_run, and max_wait (a spot job interrupted once, whose restart MaxWait counts and max_run
# does not), with the SecondaryStatus each ends with.
STOP_CAUSES = {
    "user": (HETERO, {"interrupt_on_states_call": 3}, (), "Stopped"),
    "max_run": (HETERO.replace("max_run: 60", "max_run: 1"), {}, (), "MaxRuntimeExceeded"),
    "max_wait": (HETERO.replace("max_run: 60", "max_run: 3\nuse_spot_instances: true\nmax_wait: 3"), {},
                 ("spot-interruption@1s",), "MaxWaitTimeExceeded"),
}


@pytest.mark.parametrize("cause", list(STOP_CAUSES))
def test_a_job_is_stopping_through_the_grace_whatever_stops_it_then_stopped_with_the_cause(
        spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch, cause: str) -> None:
    """DescribeTrainingJob: TrainingJobStatus Stopping, SecondaryStatus Stopping ("Stopping the training
    job") while the hosts get SIGTERM and the grace, for a user's stop and for the StoppingCondition's
    limits alike; then Stopped with Stopped, MaxRuntimeExceeded or MaxWaitTimeExceeded. Never back to
    InProgress on the way."""
    text, options, inject, final = STOP_CAUSES[cause]
    journal = _Journal(monkeypatch)
    fake = _StatusAtStop({h: runs_until_stopped(ignore_sigterm=h == "algo-2") for h in ("algo-1", "algo-2", "algo-3")},
                         **options)
    result, _ = run(spec_of(text), fake, grace=0.5, inject=tuple(parse_injection(i) for i in inject))

    assert fake.seen == ("Stopping", "Stopping")  # the record, as the hosts were being stopped
    assert journal.statuses() == ["InProgress", "Stopping", "Stopped"]
    stopping = [secondary for status, secondary in journal.entries if status == "Stopping"]
    assert stopping == ["Stopping", "Uploading"]  # the artifacts are still uploaded
    assert journal.entries[-1] == ("Stopped", final)
    assert journal.entries[journal.entries.index(("Stopping", "Stopping")) - 1] == ("InProgress", "Training")
    doc = job_json(result)
    assert doc["TrainingJobStatus"] == "Stopped" and doc["SecondaryStatus"] == final
    transitions = doc["SecondaryStatusTransitions"]
    assert [t["Status"] for t in transitions[-3:]] == ["Stopping", "Uploading", final]
    assert transitions[-3]["StatusMessage"] == "Stopping the training job"
    # The grace ran out for the host that ignores SIGTERM: it was killed, after the record said Stopping.
    assert host_entry(doc, "algo-2")["ExitCode"] == 137
    assert torn_down(fake)


def _scenario(name: str) -> tuple[dict[str, HostScript], dict[str, Any]]:
    if name == "completed":
        return {}, {}
    if name == "failed":
        return {"algo-1": exits(1, 0.02), "algo-2": runs_until_stopped(), "algo-3": runs_until_stopped()}, {}
    if name == "interrupted":
        return {h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")}, {"interrupt_on_states_call": 2}
    raise AssertionError(name)


@pytest.mark.parametrize("scenario", ["completed", "failed", "interrupted"])
def test_teardown_removes_containers_network_and_staging(spec_of: Callable[..., JobSpec], scenario: str) -> None:
    scripts, options = _scenario(scenario)
    fake = FakeBackend(scripts, **options)
    result, _ = run(spec_of(), fake)

    assert result.status == {"completed": "Completed", "failed": "Failed", "interrupted": "Stopped"}[scenario]
    assert fake.remove_calls == [JOB]
    assert sorted(fake.removed) == sorted(ALL)
    assert fake.networks_removed == [f"hetero-emu-{JOB}"]
    assert torn_down(fake)
    assert not (result.job_dir / ".staging").exists()
    # what the hosts left is kept; their copies of the code are not (one per host of source_dir's size)
    assert (result.job_dir / "hosts" / "algo-3" / "input" / "config" / "resourceconfig.json").is_file()
    assert not any((result.job_dir / "hosts" / h / "code").exists() for h in ("algo-1", "algo-2", "algo-3"))
    assert (result.job_dir.parent.parent / "code" / "train.py").is_file()  # the user's own code stays


def test_a_kept_job_keeps_each_hosts_code(spec_of: Callable[..., JobSpec]) -> None:
    """`--keep`: the stopped containers may be started again by hand, and find their code."""
    result, _ = run(spec_of(), FakeBackend(), keep=True)
    assert (result.job_dir / "hosts" / "algo-1" / "code" / "train.py").is_file()


@pytest.mark.parametrize("scenario", ["completed", "failed", "interrupted"])
def test_pipe_fifos_exist_when_the_hosts_start_and_are_gone_however_the_job_ends(
    spec_of: Callable[..., JobSpec], scenario: str
) -> None:
    scripts, options = _scenario(scenario)
    fake = FakeBackend(scripts, **options)
    spec = spec_of(HETERO.replace("    distribution: ShardedByS3Key\n",
                                  "    distribution: ShardedByS3Key\n    input_mode: Pipe\n"))
    at_start: dict[str, list[str]] = {}
    start = fake.start

    def start_seeing_fifos(names: Any) -> None:
        for host in ("algo-1", "algo-2", "algo-3"):
            folder = spec.output_path / JOB / "hosts" / host / "input" / "data"
            at_start[host] = sorted(p.name for p in folder.iterdir() if p.is_fifo())
        start(names)

    fake.start = start_seeing_fifos  # type: ignore[method-assign]
    result, reporter = run(spec, fake)

    assert result.status == {"completed": "Completed", "failed": "Failed", "interrupted": "Stopped"}[scenario]
    assert at_start == {"algo-1": ["training_0"], "algo-2": ["training_0"], "algo-3": []}
    assert not any(p.is_fifo() for p in (result.job_dir / "hosts").rglob("*"))
    assert not any("Pipe" in w for w in reporter.warnings)


def test_exception_while_creating_containers_still_tears_down(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(fail_create={"algo-2": EnvironmentProblem("cannot create container: engine said no")})
    spec = spec_of()
    with pytest.raises(EnvironmentProblem, match="engine said no"):
        run_job(spec, backend=fake, reporter=RecordingReporter())

    assert fake.created == [C["algo-1"]]
    assert fake.start_calls == []
    assert fake.remove_calls == [JOB]
    assert fake.removed == [C["algo-1"]]
    assert torn_down(fake)
    assert not (spec.output_path / JOB / ".staging").exists()


def test_interrupt_while_creating_containers_stops_and_tears_down(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(fail_create={"algo-3": KeyboardInterrupt()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Stopped"
    assert result.exit_code == 130
    assert fake.start_calls == []
    assert torn_down(fake)


def test_keep_skips_removal(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend()
    result, reporter = run(spec_of(), fake, keep=True)

    assert result.status == "Completed"
    assert fake.remove_calls == []
    assert fake.removed == []
    assert set(fake.containers) == set(ALL)
    assert f"hetero-emu-{JOB}" in fake.networks
    assert any(f"clean --job {JOB}" in i for i in reporter.infos)


def test_keep_on_failure_still_stops_the_other_hosts(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-1": exits(1, 0.02), "algo-2": runs_until_stopped(), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake, keep=True)

    assert result.status == "Failed"
    assert fake.stopped_while_running == {C["algo-2"], C["algo-3"]}
    assert fake.remove_calls == []
    assert set(fake.containers) == set(ALL)


# ---------------------------------------------------------------------------------------------------
# Artifacts, job.json, logs


def test_model_is_merged_in_host_order_and_output_comes_from_output_data(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({
        "algo-1": exits(0, 0.0, files={"model/shared.txt": "from algo-1", "model/a.txt": "a"}),
        "algo-2": exits(0, 0.05, files={"model/shared.txt": "from algo-2", "model/sub/b.bin": b"\x00\x01"}),
        "algo-3": exits(0, 0.02, files={
            "model/shared.txt": "from algo-3",
            "model/c.txt": "c",
            "output/data/metrics.json": '{"loss": 0.1}',
            "checkpoints/not-in-any-archive.pt": "ckpt",
        }),
    })
    result, _ = run(spec_of(), fake)

    assert result.model_artifact == result.job_dir / "output" / "model.tar.gz"
    assert result.output_artifact == result.job_dir / "output" / "output.tar.gz"
    model = tar_members(result.model_artifact)
    assert model == {"a.txt": b"a", "c.txt": b"c", "shared.txt": b"from algo-3", "sub/b.bin": b"\x00\x01"}
    assert tar_members(result.output_artifact) == {"metrics.json": b'{"loss": 0.1}'}
    assert job_json(result)["ModelArtifacts"] == {"S3ModelArtifacts": str(result.model_artifact)}
    # each host's /opt/ml is kept as it was left
    assert (result.job_dir / "hosts" / "algo-1" / "model" / "shared.txt").read_text() == "from algo-1"


def test_model_merge_follows_numeric_host_order(spec_of: Callable[..., JobSpec]) -> None:
    text = f"job_name: {JOB}\nentry_point: train.py\nsource_dir: code\n" \
           "instance_type: ml.c5.xlarge\ninstance_count: 11\noutput_path: out\n"
    writers = {h: exits(0, 0.0, files={"model/shared.txt": h}) for h in ("algo-2", "algo-9", "algo-10")}
    result, _ = run(spec_of(text), FakeBackend(writers))

    assert result.status == "Completed"
    # algo-10 comes after algo-9 (not between algo-1 and algo-2): the later host wins
    assert tar_members(result.model_artifact)["shared.txt"] == b"algo-10"  # type: ignore[arg-type]


def test_artifacts_are_collected_from_a_failed_job(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({
        "algo-1": runs_until_stopped(files={"model/partial.pt": "p1"}),
        "algo-2": runs_until_stopped(),
        "algo-3": exits(1, 0.02, files={"model/last.pt": "p3", "output/data/trace.txt": "t"}),
    })
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert tar_members(result.model_artifact) == {"partial.pt": b"p1", "last.pt": b"p3"}  # type: ignore[arg-type]
    assert tar_members(result.output_artifact) == {"trace.txt": b"t"}  # type: ignore[arg-type]


def _clock() -> Callable[[], datetime]:
    base = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    ticks = iter(range(1000))
    return lambda: base + timedelta(seconds=7 * next(ticks))


def test_job_json_has_the_describe_training_job_shape(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-2": exits(4, 0.02), "algo-1": runs_until_stopped(), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake, now=_clock())
    doc = job_json(result)

    for key in ("TrainingJobName", "TrainingJobStatus", "FailureReason", "ResourceConfig", "InputDataConfig",
                "HyperParameters", "ModelArtifacts", "TrainingStartTime", "TrainingEndTime"):
        assert key in doc, key
    assert doc["TrainingJobName"] == JOB
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceCount": 2, "InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge"},
        {"InstanceCount": 1, "InstanceGroupName": "dnn_group", "InstanceType": "ml.p3.2xlarge"},
    ]
    channels = {c["ChannelName"]: c for c in doc["InputDataConfig"]}
    assert set(channels) == {"training", "validation"}
    assert channels["training"]["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert channels["training"]["DataSource"]["S3DataSource"]["InstanceGroupNames"] == ["data_group"]
    assert channels["training"]["ContentType"] == "text/csv"
    assert doc["HyperParameters"]["epochs"] == "2"
    assert doc["HyperParameters"]["lr"] == "0.01"
    assert doc["HyperParameters"]["sagemaker_program"] == '"train.py"'
    start = datetime.fromisoformat(doc["TrainingStartTime"])
    end = datetime.fromisoformat(doc["TrainingEndTime"])
    assert start.tzinfo is not None and start < end
    assert (start, end) == (result.start, result.end)

    assert [h["Host"] for h in doc["Hosts"]] == ["algo-1", "algo-2", "algo-3"]
    for entry in doc["Hosts"]:
        assert {"Host", "InstanceGroupName", "InstanceType", "ExitCode", "FailureReason"} <= set(entry)
    assert host_entry(doc, "algo-2") | {"Seconds": 0} == {
        "Host": "algo-2", "InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "ExitCode": 4,
        "FailureReason": doc["FailureReason"], "Seconds": 0,
    }
    assert host_entry(doc, "algo-3")["InstanceType"] == "ml.p3.2xlarge"


def test_homogeneous_job_json_has_instance_type_and_count(spec_of: Callable[..., JobSpec]) -> None:
    text = f"job_name: {JOB}\nentry_point: train.py\nsource_dir: code\n" \
           "instance_type: ml.m5.large\ninstance_count: 2\noutput_path: out\n"
    result, _ = run(spec_of(text), FakeBackend())
    doc = job_json(result)

    assert doc["ResourceConfig"]["InstanceType"] == "ml.m5.large"
    assert doc["ResourceConfig"]["InstanceCount"] == 2
    assert {h["InstanceGroupName"] for h in doc["Hosts"]} == {"homogeneousCluster"}


def test_logs_are_saved_raw_and_reach_the_reporter_as_lines(spec_of: Callable[..., JobSpec]) -> None:
    chunks1 = [b"hel", b"lo\nwor", b"ld\r\n", b"bad byte \xff here\n", b"no newline at the end"]
    chunks3 = [b"trainer up\n", b"epoch 1 loss 0.5\nepoch 2 loss 0.4\n"]
    fake = FakeBackend({"algo-1": exits(0, 0.0, logs=chunks1), "algo-3": exits(0, 0.0, logs=chunks3)})
    result, reporter = run(spec_of(), fake)

    logs = result.job_dir / "logs"
    assert (logs / "algo-1.log").read_bytes() == b"".join(chunks1)
    assert (logs / "algo-2.log").read_bytes() == b""
    assert (logs / "algo-3.log").read_bytes() == b"".join(chunks3)
    by_host = [line for line in reporter.lines if line[0] == "algo-1"]
    assert by_host == [
        ("algo-1", "data_group", "hello"),
        ("algo-1", "data_group", "world"),
        ("algo-1", "data_group", "bad byte \ufffd here"),
        ("algo-1", "data_group", "no newline at the end"),
    ]
    assert [line for line in reporter.lines if line[0] == "algo-3"] == [
        ("algo-3", "dnn_group", "trainer up"),
        ("algo-3", "dnn_group", "epoch 1 loss 0.5"),
        ("algo-3", "dnn_group", "epoch 2 loss 0.4"),
    ]
    assert reporter.hosts == [("algo-1", "data_group"), ("algo-2", "data_group"), ("algo-3", "dnn_group")]


# ---------------------------------------------------------------------------------------------------
# Refusals before anything is created


def test_existing_job_folder_is_refused_and_left_untouched(spec_of: Callable[..., JobSpec], proj: Path) -> None:
    job_dir = proj / "out" / JOB
    (job_dir / "output").mkdir(parents=True)
    (job_dir / "job.json").write_text('{"TrainingJobStatus": "Completed"}')
    (job_dir / "output" / "model.tar.gz").write_text("precious")
    before = tree_snapshot(job_dir)
    fake = FakeBackend()

    with pytest.raises(UsageError) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())

    assert info.value.exit_code == 2
    assert "already exists" in info.value.message
    assert tree_snapshot(job_dir) == before
    assert not {"create_network", "create_container", "start", "remove", "stop"} & set(fake.call_names())


def test_missing_custom_image_is_refused_before_anything_is_created(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    built: list[object] = []
    fake = FakeBackend(images=())
    spec = spec_of(HETERO + "image_uri: my/custom-trainer:1\n")

    with pytest.raises(ImageMissing) as info:
        run_job(spec, backend=fake, reporter=RecordingReporter(), image_builder=built.append)

    assert info.value.exit_code == 3
    assert "my/custom-trainer:1" in info.value.message
    assert info.value.hint
    assert built == []
    assert not {"create_network", "create_container", "start"} & set(fake.call_names())
    assert not (proj / "out" / JOB).exists()


def test_missing_variant_image_is_refused_with_its_build_command(spec_of: Callable[..., JobSpec]) -> None:
    built: list[object] = []
    fake = FakeBackend(images=())
    spec = spec_of(HETERO + "image_uri: hetero-emu/swarm-node:bookworm\n")

    with pytest.raises(ImageMissing) as info:
        run_job(spec, backend=fake, reporter=RecordingReporter(), image_builder=built.append)

    assert info.value.hint == "build it with `hetero-emu image build --variant swarm-node`"
    assert built == []  # another recipe's image is never built on the fly, unlike the default image
    assert not {"create_network", "create_container", "start"} & set(fake.call_names())


def test_a_job_naming_a_framework_image_builds_it_when_missing(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(images=())
    built: list[str] = []

    def builder(framework: FrameworkImage, rep: object) -> None:
        built.append(framework.tag)
        fake.images.add(framework.tag)

    result, _ = run(spec_of(HETERO + f"image_uri: {PYTORCH_IMAGE}\n"), fake, framework_builder=builder)
    assert result.status == "Completed" and built == [PYTORCH_IMAGE] and result.image_notes == ()


AWS_PYTORCH = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
LOCAL_PYTORCH = "hetero-emu/pytorch-training:1.11.0-py39"


def test_a_missing_ecr_image_runs_as_its_framework_image_built_once_and_said(
    spec_of: Callable[..., JobSpec],
) -> None:
    fake = FakeBackend(images=())
    built: list[FrameworkImage] = []

    def builder(framework: FrameworkImage, rep: object) -> None:
        built.append(framework)
        fake.images.add(framework.tag)

    result, reporter = run(spec_of(HETERO + f"image_uri: {AWS_PYTORCH}\n"), fake, framework_builder=builder)

    assert result.status == "Completed"
    assert [b.tag for b in built] == [LOCAL_PYTORCH]
    assert fake.call_names().index("images.present") < fake.call_names().index("create_network")
    assert ("images.labels", LOCAL_PYTORCH) in fake.calls  # the launchers checked on the image that runs
    notes = (f"{LOCAL_PYTORCH} stands in for {AWS_PYTORCH}, which is not in the Docker engine",
             "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)")
    # The Python a job's code runs on is a warning (what the SDK sessions print of a job's driver), once.
    assert [i for i in reporter.infos if i in notes] == [notes[0]], reporter.infos
    assert reporter.warnings.count(notes[1]) == 1, reporter.warnings
    assert result.image_notes == notes
    doc = job_json(result)
    # DescribeTrainingJob names the image as the job named it; what ran is the emulator's note.
    assert doc["AlgorithmSpecification"]["TrainingImage"] == AWS_PYTORCH
    assert doc["Emulator"]["Image"] == LOCAL_PYTORCH
    assert doc["Emulator"]["StandIn"] == {"For": AWS_PYTORCH, "Image": LOCAL_PYTORCH, "Notes": list(notes)}


def test_an_ecr_image_the_engine_has_runs_as_it_is(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(images=(AWS_PYTORCH,))
    built: list[object] = []

    result, _ = run(spec_of(HETERO + f"image_uri: {AWS_PYTORCH}\n"), fake, framework_builder=built.append)

    assert result.status == "Completed" and built == [] and result.image_notes == ()
    assert job_json(result)["Emulator"]["Image"] == AWS_PYTORCH
    assert "StandIn" not in job_json(result)["Emulator"]


def test_a_missing_framework_image_with_no_build_is_refused_with_its_build_command(
    spec_of: Callable[..., JobSpec],
) -> None:
    fake = FakeBackend(images=())
    with pytest.raises(ImageMissing) as info:
        run_job(spec_of(HETERO + f"image_uri: {AWS_PYTORCH}\n"), RunOptions(build_image=False), backend=fake,
                reporter=RecordingReporter(), framework_builder=lambda *_: None)
    assert info.value.hint is not None
    assert "hetero-emu image build --framework pytorch:1.11.0 --python py38" in info.value.hint
    assert not {"create_network", "create_container"} & set(fake.call_names())


def test_missing_default_image_is_built_with_the_image_builder(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(images=())
    reporter = RecordingReporter()
    built: list[object] = []

    def builder(rep: object) -> None:
        built.append(rep)
        fake.images.add(DEFAULT_IMAGE)

    result, _ = run(spec_of(), fake, reporter=reporter, image_builder=builder)

    assert built == [reporter]
    assert result.status == "Completed"
    assert fake.call_names().index("images.present") < fake.call_names().index("create_network")


@pytest.mark.parametrize("build_image", [True, False])
def test_missing_default_image_without_a_builder_is_an_environment_problem(
    spec_of: Callable[..., JobSpec], build_image: bool,
) -> None:
    fake = FakeBackend(images=())
    built: list[object] = []
    builder = None if build_image else built.append

    with pytest.raises(ImageMissing) as info:
        run_job(spec_of(), RunOptions(build_image=build_image), backend=fake, reporter=RecordingReporter(),
                image_builder=builder)

    assert info.value.exit_code == 3
    assert "image build" in (info.value.hint or "")
    assert built == []
    assert "create_network" not in fake.call_names()


def test_no_engine_is_an_environment_problem(spec_of: Callable[..., JobSpec], proj: Path) -> None:
    fake = FakeBackend(engine_up=False)
    with pytest.raises(DockerUnavailable) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())
    assert info.value.exit_code == 3
    assert not (proj / "out" / JOB).exists()


def test_leftovers_of_other_jobs_are_reported(spec_of: Callable[..., JobSpec]) -> None:
    old = Resource("container", "old-job-algo-1", "old-job", {"io.hetero-emu.job": "old-job"})
    result, reporter = run(spec_of(), FakeBackend(leftovers=[old]))

    assert result.status == "Completed"
    assert any("old-job" in w and "clean" in w for w in reporter.warnings)


# ---------------------------------------------------------------------------------------------------
# Data staging


def test_user_data_is_untouched_and_sharding_staging_is_removed(spec_of: Callable[..., JobSpec], proj: Path) -> None:
    data = proj / "data"
    before = checksums(data)
    fake = FakeBackend({"algo-1": exits(0, 0.02), "algo-2": exits(0, 0.02), "algo-3": exits(0, 0.02)})
    result, _ = run(spec_of(), fake)

    assert result.status == "Completed"
    assert checksums(data) == before
    assert all(os.stat(p).st_nlink == 1 for p in data.rglob("*") if p.is_file())
    assert not (result.job_dir / ".staging").exists()
    # while the job ran, the data hosts each saw a disjoint share of the sharded channel, together all
    share1 = fake.mounts_seen["algo-1"]["/opt/ml/input/data/training"]
    share2 = fake.mounts_seen["algo-2"]["/opt/ml/input/data/training"]
    assert share1 and share2
    assert not set(share1) & set(share2)
    assert sorted(share1 + share2) == TRAIN_FILES
    # and only the dnn host got the validation channel
    assert "/opt/ml/input/data/validation" not in fake.mounts_seen["algo-1"]
    assert fake.mounts_seen["algo-3"]["/opt/ml/input/data/validation"] == ["val.csv"]
    assert "/opt/ml/input/data/training" not in fake.mounts_seen["algo-3"]


def test_user_data_is_untouched_after_a_failure(spec_of: Callable[..., JobSpec], proj: Path) -> None:
    before = checksums(proj / "data")
    fake = FakeBackend({"algo-1": exits(1, 0.02), "algo-2": runs_until_stopped(), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert checksums(proj / "data") == before
    assert not (result.job_dir / ".staging").exists()


# ---------------------------------------------------------------------------------------------------
# Host order


def _groups_on_disk(job_dir: Path) -> dict[str, str]:
    out = {}
    for path in job_dir.glob("hosts/algo-*/input/config/resourceconfig.json"):
        config = json.loads(path.read_text())
        out[config["current_host"]] = config["current_group_name"]
    return out


def test_shuffled_host_order_records_the_chosen_seed(spec_of: Callable[..., JobSpec]) -> None:
    result, reporter = run(spec_of(), FakeBackend(), host_order="shuffled")
    doc = job_json(result)

    seed = doc["Emulator"]["Seed"]
    assert isinstance(seed, int)
    assert seed == result.seed
    assert doc["Emulator"]["HostOrder"] == "shuffled"
    assert any(str(seed) in i for i in reporter.infos)
    assert {h["Host"]: h["InstanceGroupName"] for h in doc["Hosts"]} == _groups_on_disk(result.job_dir)


def test_shuffled_host_order_with_a_given_seed_is_replayable(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    first, _ = run(spec_of(), FakeBackend(), host_order="shuffled", seed=1234)
    groups1 = _groups_on_disk(first.job_dir)
    second, _ = run(spec_of(HETERO.replace("output_path: out", "output_path: out2")), FakeBackend(),
                    host_order="shuffled", seed=1234)

    assert job_json(first)["Emulator"]["Seed"] == 1234
    assert _groups_on_disk(second.job_dir) == groups1
    assert sorted(groups1.values()) == ["data_group", "data_group", "dnn_group"]


def test_spec_host_order_records_no_seed(spec_of: Callable[..., JobSpec]) -> None:
    result, _ = run(spec_of(), FakeBackend())
    doc = job_json(result)
    assert doc["Emulator"]["Seed"] is None
    assert _groups_on_disk(result.job_dir) == {"algo-1": "data_group", "algo-2": "data_group", "algo-3": "dnn_group"}


# ---------------------------------------------------------------------------------------------------
# Regressions: bugs found while writing these tests, now fixed.


def test_hosts_exiting_in_the_same_poll_as_the_failing_one_are_not_stopped(
    spec_of: Callable[..., JobSpec],
) -> None:
    # algo-1 fails and algo-2 finishes at the same moment; only algo-3 is still running.
    fake = FakeBackend({"algo-1": exits(1, 0.05), "algo-2": exits(0, 0.05), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert fake.stop_calls[0].names == (C["algo-3"],)
    algo2 = next(h for h in result.hosts if h.host == "algo-2")
    assert (algo2.exit_code, algo2.failure_reason) == (0, None)


def test_vanished_container_is_reported_as_disappeared(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-1": runs_until_stopped(), "algo-2": HostScript(after=0.05, disappear=True),
                        "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    reason = result.failure_reason or ""
    assert "algo-2" in reason and "data_group" in reason
    assert "disappeared" in reason


def test_failed_create_does_not_remove_another_runs_containers(spec_of: Callable[..., JobSpec]) -> None:
    # Another driver is running the same job name with another output_path.
    fake = FakeBackend()
    fake.add_foreign_network(f"hetero-emu-{JOB}", JOB)
    for name in ALL:
        fake.add_foreign_container(name, JOB)

    with pytest.raises(EnvironmentProblem):
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())

    assert fake.stopped_while_running == set()
    assert set(fake.containers) == set(ALL)
    assert f"hetero-emu-{JOB}" in fake.networks


def test_fake_clock_values_are_used_for_job_times(spec_of: Callable[..., JobSpec]) -> None:
    clock = _clock()
    seen: list[datetime] = []

    def now() -> datetime:
        seen.append(clock())
        return seen[-1]

    result, _ = run(spec_of(), FakeBackend(), now=now)
    assert result.start in seen and result.end in seen
    assert result.seconds > 0


class _RemoveFails(FakeBackend):
    def remove(self, plan: Any) -> None:
        super().remove(plan)
        raise EnvironmentProblem("could not remove everything: network busy", hint="run `hetero-emu clean`")


def test_a_removal_problem_warns_without_changing_the_outcome(spec_of: Callable[..., JobSpec]) -> None:
    reporter = RecordingReporter()
    result = run_job(spec_of(), backend=_RemoveFails(), reporter=reporter)
    assert result.status == "Completed"
    assert result.exit_code == 0
    assert any("network busy" in w and "hetero-emu clean" in w for w in reporter.warnings)


class _SecondInterrupt(FakeBackend):
    def stop(self, names: Any, grace: float) -> None:
        super().stop(names, grace)
        raise KeyboardInterrupt


def test_a_second_interrupt_while_stopping_still_collects_and_tears_down(spec_of: Callable[..., JobSpec]) -> None:
    fake = _SecondInterrupt({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")},
                            interrupt_on_states_call=2)
    result, reporter = run(spec_of(), fake)
    assert result.status == "Stopped"
    assert (result.job_dir / "job.json").is_file()
    assert torn_down(fake)
    assert any("again" in w for w in reporter.warnings)


# ---------------------------------------------------------------------------------------------------
# Leftovers of a job of the same name, and of other jobs (live drivers are left alone)

NETWORK = f"hetero-emu-{JOB}"


def resource(kind: str, name: str, job: str, alive: bool | None) -> Resource:
    return Resource(kind, name, job, {"io.hetero-emu.managed": "true", "io.hetero-emu.job": job},
                    "exited" if kind == "container" else "", driver_alive=alive)


def nothing_created(fake: FakeBackend) -> bool:
    return not {"create_network", "create_container", "start", "guard", "remove"} & set(fake.call_names())


def test_orphaned_resources_of_the_same_job_name_are_refused_before_the_job_folder_exists(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    left = [resource("container", C["algo-1"], JOB, False), resource("network", NETWORK, JOB, False)]
    fake = FakeBackend(leftovers=left)

    with pytest.raises(EnvironmentProblem) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())

    assert info.value.exit_code == 3
    assert "earlier job" in info.value.message
    assert C["algo-1"] in info.value.message and NETWORK in info.value.message
    assert f"hetero-emu clean --job {JOB}" in (info.value.hint or "")
    assert not (proj / "out" / JOB).exists()
    assert nothing_created(fake)


@pytest.mark.parametrize("alive", [[True, True], [False, True], [None, False]],
                         ids=["live", "one-live-one-orphaned", "other-machine"])
def test_a_job_of_the_same_name_that_is_running_now_is_refused(
    spec_of: Callable[..., JobSpec], proj: Path, alive: list[bool | None],
) -> None:
    left = [resource("container", C["algo-1"], JOB, alive[0]), resource("network", NETWORK, JOB, alive[1])]
    fake = FakeBackend(leftovers=left)

    with pytest.raises(EnvironmentProblem) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())

    assert f"a job named {JOB} is running now" in info.value.message
    assert C["algo-1"] in info.value.message
    assert "clean" not in (info.value.hint or "")  # never advise removing a running job
    assert f"hetero-emu stop {JOB}" in (info.value.hint or "")
    assert not (proj / "out" / JOB).exists()
    assert nothing_created(fake)


def test_orphaned_leftovers_of_other_jobs_are_named_in_one_warning(spec_of: Callable[..., JobSpec]) -> None:
    left = [resource("container", "old-a-algo-1", "old-a", False), resource("network", "hetero-emu-old-a", "old-a",
            False), resource("container", "old-b-algo-1", "old-b", False),
            resource("container", "busy-algo-1", "busy", True)]
    result, reporter = run(spec_of(), FakeBackend(leftovers=left))

    assert result.status == "Completed"
    warnings = [w for w in reporter.warnings if "earlier jobs" in w]
    assert len(warnings) == 1
    assert "old-a" in warnings[0] and "old-b" in warnings[0]
    assert "busy" not in warnings[0]  # a job whose driver runs is no leftover
    assert "hetero-emu clean" in warnings[0]


@pytest.mark.parametrize("alive", [True, None], ids=["live-here", "other-machine"])
def test_live_resources_of_other_jobs_give_no_warning(spec_of: Callable[..., JobSpec], alive: bool | None) -> None:
    left = [resource("container", "busy-algo-1", "busy", alive), resource("network", "hetero-emu-busy", "busy", alive)]
    fake = FakeBackend(leftovers=left)
    result, reporter = run(spec_of(), fake)

    assert result.status == "Completed"
    assert reporter.warnings == []
    assert fake.removed == ALL  # only this run's own containers were removed, none of "busy"


# ---------------------------------------------------------------------------------------------------
# The engine stops answering mid-job


def test_engine_lost_mid_job_still_writes_job_json_and_artifacts_and_hands_over(
    spec_of: Callable[..., JobSpec], proj: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)  # so that ownership would be fixed if the engine answered
    fake = FakeBackend({
        "algo-1": exits(0, 0.0, files={"model/weights.pt": "w1", "output/data/metrics.json": "{}"}),
        "algo-2": runs_until_stopped(),
        "algo-3": runs_until_stopped(),
    }, lose_engine_on_states_call=2)
    reporter = RecordingReporter()

    with pytest.raises(DockerUnavailable) as info:
        run_job(spec_of(), RunOptions(grace=1), backend=fake, reporter=reporter)

    assert info.value.exit_code == 3
    job_dir = proj / "out" / JOB
    doc = json.loads((job_dir / "job.json").read_text())
    assert doc["TrainingJobStatus"] == "Failed"
    assert "stopped answering" in doc["FailureReason"]
    assert tar_members(job_dir / "output" / "model.tar.gz") == {"weights.pt": b"w1"}
    assert tar_members(job_dir / "output" / "output.tar.gz") == {"metrics.json": b"{}"}
    assert host_entry(doc, "algo-1")["ExitCode"] == 0
    assert not (job_dir / ".staging").exists()
    # Nothing could be removed: the guard closed with every resource still held (the watcher's job).
    assert fake.guards_left == [sorted([*ALL, NETWORK])]
    assert fake.guards_open == 0
    assert fake.ownership_calls == []  # no chown container on an engine that does not answer
    assert any("stopped answering" in w for w in reporter.warnings)


# ---------------------------------------------------------------------------------------------------
# The guard (a watcher removes what a killed driver created)


def test_a_run_opens_one_guard_and_closes_it_with_nothing_held(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-2": exits(1, 0.02), "algo-1": runs_until_stopped(), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert fake.call_names().count("guard") == 1
    calls = fake.call_names()
    assert calls.index("guard") < calls.index("create_network")
    assert fake.guards_left == [[]]
    assert fake.guards_open == 0


def test_keep_opens_no_guard(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend()
    result, _ = run(spec_of(), fake, keep=True)

    assert result.status == "Completed"
    assert "guard" not in fake.call_names()
    assert fake.guards_left == []
    assert set(fake.containers) == set(ALL)  # kept, and nobody will remove them behind the user's back


# ---------------------------------------------------------------------------------------------------
# Ownership of what the hosts (root) wrote


class _OwnershipWatch(FakeBackend):
    """Notes which of the job's containers were still running when fix_ownership was called."""

    running_at_fix: list[str] | None = None

    def fix_ownership(self, plan: Any, uid: int, gid: int) -> None:
        self.running_at_fix = [n for n, c in self.containers.items() if c.running]
        super().fix_ownership(plan, uid, gid)


class _OwnershipFails(FakeBackend):
    def fix_ownership(self, plan: Any, uid: int, gid: int) -> None:
        super().fix_ownership(plan, uid, gid)
        raise EnvironmentProblem("cannot start the chown container: image has no chown")


@pytest.fixture
def record_collect(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeBackend], None]:
    """Records artifact collection in the fake's call list, to check the order of calls."""

    def install(fake: FakeBackend) -> None:
        real = runner.artifacts.collect

        def collect(plan: Any, progress: Any = None) -> Any:
            fake.calls.append(("collect_artifacts",))
            return real(plan, progress)

        monkeypatch.setattr(runner.artifacts, "collect", collect)

    return install


def test_ownership_is_fixed_after_the_hosts_exit_and_before_artifacts_are_collected(
    spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch, record_collect: Callable[[FakeBackend], None],
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getgid", lambda: 1234)
    fake = _OwnershipWatch({"algo-1": exits(0, 0.02), "algo-2": exits(0, 0.05), "algo-3": exits(0, 0.08)})
    record_collect(fake)
    result, _ = run(spec_of(), fake)

    assert result.status == "Completed"
    assert fake.ownership_calls == [(JOB, 1000, 1234)]
    assert fake.running_at_fix == []  # every host had exited
    calls = fake.call_names()
    fix = calls.index("fix_ownership")
    last_states = max(i for i, name in enumerate(calls) if name == "states")
    assert last_states < fix
    assert calls.index("wait_logs") < fix < calls.index("collect_artifacts") < calls.index("remove")


def test_ownership_is_fixed_after_a_failure_too(
    spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getgid", lambda: 1000)
    fake = _OwnershipWatch({"algo-1": exits(1, 0.02), "algo-2": runs_until_stopped(), "algo-3": runs_until_stopped()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert fake.ownership_calls == [(JOB, 1000, 1000)]
    assert fake.running_at_fix == []  # the stopped hosts too


def test_root_needs_no_ownership_fix(spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(os, "getgid", lambda: 0)
    fake = FakeBackend()
    result, _ = run(spec_of(), fake)

    assert result.status == "Completed"
    assert fake.ownership_calls == []
    assert "fix_ownership" not in fake.call_names()


def test_no_ownership_fix_when_no_container_was_created(
    spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    fake = FakeBackend(fail_create={"algo-1": KeyboardInterrupt()})
    result, _ = run(spec_of(), fake)

    assert result.status == "Stopped"
    assert fake.ownership_calls == []


def test_a_failed_ownership_fix_warns_and_leaves_the_outcome(
    spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getgid", lambda: 1000)
    fake = _OwnershipFails()
    result, reporter = run(spec_of(), fake)

    assert fake.ownership_calls == [(JOB, 1000, 1000)]
    assert result.status == "Completed"
    assert result.exit_code == 0
    assert job_json(result)["TrainingJobStatus"] == "Completed"
    assert (result.job_dir / "output" / "model.tar.gz").is_file()  # artifacts are still collected
    warning = next(w for w in reporter.warnings if "owned by root" in w)
    assert "image has no chown" in warning
    assert torn_down(fake)


# ---------------------------------------------------------------------------------------------------
# Two runs that draw the same job name

def folder_state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry under `folder`: a file's SHA-256 (or "<dir>") and its mtime in ns."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "<dir>",
                                     p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


GENERATED = HETERO.replace(f"job_name: {JOB}\n", "base_job_name: gen\n")
INSTANT = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def stuck_clock(repeats: int) -> Callable[[], datetime]:
    """The same instant for the first `repeats` calls, then one millisecond later per call."""
    calls = itertools.count()

    def now() -> datetime:
        i = next(calls)
        return INSTANT if i < repeats else INSTANT + timedelta(milliseconds=i)

    return now


def test_two_runs_drawing_the_same_generated_name_both_complete_under_different_names(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    spec = spec_of(GENERATED)
    assert spec.job_name is None
    fake = FakeBackend()
    first, _ = run(spec, fake, now=stuck_clock(2))
    assert first.job_name == "gen-2024-05-01-12-00-00-000"
    before = folder_state(first.job_dir)

    second, _ = run(spec, fake, now=stuck_clock(2))  # draws the first one's name twice, then the next one

    assert (first.status, second.status) == ("Completed", "Completed")
    assert second.job_name != first.job_name
    assert second.job_name.startswith("gen-2024-05-01-12-00-00-")
    assert job_json(second)["TrainingJobName"] == second.job_name
    assert folder_state(first.job_dir) == before
    assert fake.networks_created == [f"hetero-emu-{first.job_name}", f"hetero-emu-{second.job_name}"]
    assert fake.call_names().count("guard") == 2  # the attempts that found the name taken created nothing
    assert torn_down(fake)


def test_a_generated_name_that_stays_taken_gives_up(spec_of: Callable[..., JobSpec]) -> None:
    spec = spec_of(GENERATED)
    fake = FakeBackend()
    run(spec, fake, now=lambda: INSTANT)

    with pytest.raises(JobFolderTaken):
        run_job(spec, backend=fake, reporter=RecordingReporter(), now=lambda: INSTANT)
    # Each run_job asks the engine once before it asks what the machine has, then each attempt once.
    assert fake.call_names().count("ping") == 2 + 1 + runner.NAME_ATTEMPTS
    assert fake.call_names().count("create_network") == 1


def test_an_explicit_job_name_already_used_is_refused_and_the_first_job_is_untouched(
    spec_of: Callable[..., JobSpec],
) -> None:
    spec = spec_of()
    fake = FakeBackend({"algo-1": exits(0, 0.0, files={"model/m.pt": "first"})})
    first, _ = run(spec, fake)
    before = folder_state(first.job_dir)

    with pytest.raises(JobFolderTaken) as info:
        run_job(spec, backend=fake, reporter=RecordingReporter())

    assert info.value.exit_code == 2
    assert str(first.job_dir) in info.value.message
    assert fake.call_names().count("ping") == 2 * 2  # no second attempt under another name
    assert fake.call_names().count("create_network") == 1
    assert folder_state(first.job_dir) == before
    assert tar_members(first.job_dir / "output" / "model.tar.gz") == {"m.pt": b"first"}


# ---------------------------------------------------------------------------------------------------
# Secrets in the FailureReason


def test_failure_reason_masks_a_secret_from_the_failure_file(spec_of: Callable[..., JobSpec]) -> None:
    secret = "s3cr3tvalue"
    spec = spec_of(HETERO + f"environment: {{API_KEY: {secret}}}\n")
    fake = FakeBackend({
        "algo-1": runs_until_stopped(),
        "algo-2": exits(1, 0.02, files={"output/failure": f"auth failed with key {secret}\n"}),
        "algo-3": runs_until_stopped(),
    })
    result, _ = run(spec, fake)

    assert result.status == "Failed"
    reason = result.failure_reason or ""
    assert result.failed_host == "algo-2 (data_group)" and reason.endswith("auth failed with key ***, exit code: 1")
    assert secret not in reason
    text = (result.job_dir / "job.json").read_text()
    assert secret not in text
    doc = json.loads(text)
    assert doc["FailureReason"] == reason
    assert host_entry(doc, "algo-2")["FailureReason"] == reason
    assert next(h for h in result.hosts if h.host == "algo-2").failure_reason == reason


# ---------------------------------------------------------------------------------------------------
# Two faults at once


def test_engine_lost_while_stopping_after_an_interrupt_still_writes_job_json(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")},
                       interrupt_on_states_call=2, lose_engine_on_states_call=3)
    with pytest.raises(DockerUnavailable):
        run(spec_of(), fake, grace=1)

    doc = json.loads((proj / "out" / JOB / "job.json").read_text())
    assert doc["TrainingJobStatus"] == "Stopped"
    assert (proj / "out" / JOB / "output" / "model.tar.gz").is_file()


def test_a_generated_name_whose_run_has_already_created_resources_is_retried(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    spec = spec_of(GENERATED)
    taken = "gen-2024-05-01-12-00-00-000"
    (proj / "out" / taken).mkdir(parents=True)  # the other run staged its folder ...
    fake = FakeBackend(leftovers=[resource("network", f"hetero-emu-{taken}", taken, True)])  # ... and its network

    result, _ = run(spec, fake, now=stuck_clock(1))

    assert result.status == "Completed"
    assert result.job_name != taken


def test_checkpoints_that_cannot_be_copied_back_warn_and_job_json_is_still_written(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    # One host leaves checkpoints/c as a file, the other as a folder: they cannot both land in
    # checkpoint_s3_uri. The job's outcome and job.json must not be lost over it.
    spec = spec_of(HETERO + "checkpoint_s3_uri: ckpt\n")
    fake = FakeBackend({"algo-1": exits(0, files={"checkpoints/c": "file"}),
                        "algo-2": exits(0, files={"checkpoints/c/inner": "folder"})})
    result, reporter = run(spec, fake)

    assert result.status == "Completed"
    assert job_json(result)["TrainingJobStatus"] == "Completed"
    assert any("checkpoints not fully copied to" in w for w in reporter.warnings)


# ---------------------------------------------------------------------------------------------------
# Each interrupt says what it stops; a second one kills at once; streams are followed before the start


def test_a_second_interrupt_during_the_grace_period_kills_at_once_and_records_exit_codes(
        spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: runs_until_stopped(ignore_sigterm=True) for h in ("algo-1", "algo-2", "algo-3")},
                       interrupt_on_states_call=2, interrupt_on_stop=True)
    result, reporter = run(spec_of(), fake, grace=60)
    assert result.status == "Stopped"
    assert sorted(fake.killed) == sorted(ALL)  # killed, not left to the 60 s grace
    assert [h.exit_code for h in result.hosts] == [137, 137, 137]
    assert [h["ExitCode"] for h in job_json(result)["Hosts"]] == [137, 137, 137]
    first, second = reporter.warnings[:2]
    hosts = "algo-1 (data_group), algo-2 (data_group), algo-3 (dnn_group)"
    assert first == f"interrupted: stopping {hosts} (SIGTERM, SIGKILL after 60 s; Ctrl-C again kills them now)"
    assert second == f"interrupted again: killing {hosts} now"
    assert torn_down(fake)


def test_an_interrupt_while_staging_says_nothing_was_started(
        spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.errors import Interrupted
    from emulator.run import staging

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(staging, "_lay_out", interrupted)
    fake = FakeBackend()
    with pytest.raises(Interrupted) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())
    assert info.value.exit_code == 130
    assert "interrupted while staging the hosts: nothing was started" in info.value.message
    assert not {"create_network", "create_container", "start"} & set(fake.call_names())
    job_dir = Path(info.value.message.split("job folder ")[1].split(" was removed")[0])
    assert not job_dir.exists()


def test_every_stream_is_followed_before_the_hosts_start(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({"algo-1": exits(0, logs=["a\n"], stderr=["\rb"])})
    result, reporter = run(spec_of(), fake)
    names = fake.call_names()
    assert max(i for i, n in enumerate(names) if n == "follow_logs") < names.index("start")
    assert (result.job_dir / "logs" / "algo-1.log").read_bytes() == b"a\n\rb"
    assert [line for _, _, line in reporter.lines] == ["a", "b"]


def test_an_interrupt_while_packing_says_what_was_not_written_and_tears_down(
        spec_of: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.errors import Interrupted
    from emulator.run import artifacts

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(artifacts, "collect", interrupted)
    fake = FakeBackend()
    with pytest.raises(Interrupted) as info:
        run_job(spec_of(), backend=fake, reporter=RecordingReporter())
    assert "interrupted while collecting the artifacts (the hosts had finished: Completed): no job.json" \
        in info.value.message
    assert torn_down(fake)


def test_a_log_file_that_could_not_be_written_is_reported(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend()
    fake.stream_errors = {C["algo-2"]: "OSError: [Errno 28] No space left on device"}  # type: ignore[attr-defined]
    result, reporter = run(spec_of(), fake)
    assert result.status == "Completed"  # the job's outcome does not depend on its log file
    assert "logs/algo-2.log is incomplete: writing it failed (OSError: [Errno 28] No space left on device)" \
        in reporter.warnings


# ---------------------------------------------------------------------------------------------------
# progress of start and teardown (emulator.reports.progress through ConsoleReporter)


def test_create_start_and_remove_are_steps_with_counts_and_seconds(spec_of: Callable[..., JobSpec]) -> None:
    err = io.StringIO()
    reporter = ConsoleReporter(out=io.StringIO(), err=err, colour=False, live=False)
    run(spec_of(), FakeBackend(), reporter=reporter)

    lines = err.getvalue().splitlines()
    network = next(line for line in lines if "creating network" in line).split()[3]
    seconds = r"\(\d+\.\d s\)"
    for start, end in [
        (rf"\[\d\] creating network {network} and 3 containers \.\.\.",
         rf"✓ \[\d\] creating network {network} and 3 containers 3/3 {seconds}"),
        (r"\[\d\] starting algo-1, algo-2, algo-3 together \.\.\.",
         rf"✓ \[\d\] starting algo-1, algo-2, algo-3 together {seconds}"),
        (rf"\[\d\] removing 3 containers and network {network} \.\.\.",
         rf"✓ \[\d\] removing 3 containers and network {network} {seconds}"),
    ]:
        first = next(i for i, line in enumerate(lines) if re.fullmatch(start, line))
        assert any(re.fullmatch(end, line) for line in lines[first + 1:]), (end, lines)


def test_quiet_run_prints_no_progress(spec_of: Callable[..., JobSpec]) -> None:
    err = io.StringIO()
    run(spec_of(), FakeBackend(), reporter=ConsoleReporter(out=io.StringIO(), err=err, live=True, quiet=True))
    assert err.getvalue() == ""


def test_a_failed_create_ends_its_step_with_a_cross(spec_of: Callable[..., JobSpec]) -> None:
    err = io.StringIO()
    fake = FakeBackend(fail_create={"algo-2": EnvironmentProblem("no room")})
    with pytest.raises(EnvironmentProblem):
        run_job(spec_of(), backend=fake, reporter=ConsoleReporter(out=io.StringIO(), err=err, live=False))
    assert re.search(r"^✗ \[\d\] creating network \S+ and 3 containers 1/3 \(\d+\.\d s\)$", err.getvalue(), re.M)


def test_no_build_refuses_a_missing_default_image_and_says_how_to_build_it(
    spec_of: Callable[..., JobSpec], proj: Path,
) -> None:
    built: list[object] = []
    fake = FakeBackend(images=())
    with pytest.raises(ImageMissing) as info:
        run_job(spec_of(), RunOptions(build_image=False), backend=fake, reporter=RecordingReporter(),
                image_builder=built.append)
    assert info.value.exit_code == 3
    assert "--no-build" in info.value.message
    assert "hetero-emu image build" in (info.value.hint or "")
    assert built == []
    assert not {"create_network", "create_container"} & set(fake.call_names())
    assert not (proj / "out" / JOB).exists()


def test_a_run_that_builds_the_default_image_says_only_that_it_is_missing(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend(images=())
    reporter = RecordingReporter()
    run(spec_of(), fake, reporter=reporter, image_builder=lambda rep: fake.images.add(DEFAULT_IMAGE))
    # What came of it (built, or waited for another build) is the builder's to say.
    assert reporter.steps[0] == f"the default image {DEFAULT_IMAGE} is missing"
    assert not any("building it" in step for step in reporter.steps)


# --------------------------------------------------------------------------------------------------
# Injected faults: spot interruptions, platform errors and retries (emulator/run/attempts.py)

SPOT = HETERO.replace("max_run: 60", "max_run: 60\nuse_spot_instances: true\nmax_wait: 120")


def statuses(doc: dict[str, Any]) -> list[str]:
    return [t["Status"] for t in doc["SecondaryStatusTransitions"]]


def test_a_spot_interruption_stops_every_host_and_starts_the_job_again_on_new_ones(
        spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: exits(0, after=1.2) for h in ("algo-1", "algo-2", "algo-3")})
    result, reporter = run(spec_of(SPOT), fake, inject=(parse_injection("spot-interruption@0.4s"),))

    assert result.status == "Completed"
    assert len(fake.start_calls) == 2  # the first hosts, then new ones
    assert fake.stopped_while_running == set(ALL)  # SIGTERM with the grace, as the service stops them
    doc = job_json(result)
    assert statuses(doc) == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                             "Training", "Uploading", "Completed"]
    assert doc["Emulator"]["Attempts"][0]["Ended"] == "spot-interruption"
    # The restart between the attempts is not billed; TrainingTimeInSeconds holds it.
    assert result.billable_seconds < result.training_seconds
    assert any("spot interruption" in w for w in reporter.warnings)
    assert torn_down(fake)


def test_a_platform_error_without_a_retry_strategy_fails_the_job_with_the_services_reason(
        spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")})
    result, _ = run(spec_of(), fake, inject=(parse_injection("platform-error@0.3s"),))

    assert result.status == "Failed"
    assert result.failure_reason == runner.INTERNAL_ERROR
    assert len(fake.start_calls) == 1
    assert {h.exit_code for h in result.hosts} == {137}  # lost at once, no grace
    assert "Restarting" not in statuses(job_json(result))


def test_a_retry_strategy_starts_the_job_again_until_its_attempts_run_out(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")})
    faults = tuple(parse_injection(f"platform-error@{t}s") for t in (0.3, 0.6, 0.9))
    result, _ = run(spec_of(HETERO + "max_retry_attempts: 2\n"), fake, inject=faults)

    assert result.status == "Failed" and result.failure_reason == runner.INTERNAL_ERROR
    assert len(fake.start_calls) == 3  # the job and its two retries
    assert statuses(job_json(result)).count("Restarting") == 2


def test_a_retried_job_that_then_runs_through_completes(spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({h: exits(0, after=1.0) for h in ("algo-1", "algo-2", "algo-3")})
    result, _ = run(spec_of(HETERO + "max_retry_attempts: 1\n"), fake,
                    inject=(parse_injection("platform-error@0.3s"),))
    assert result.status == "Completed"
    assert len(fake.start_calls) == 2


def test_a_spot_job_past_its_max_wait_is_stopped_with_the_services_status(spec_of: Callable[..., JobSpec]) -> None:
    # MaxWait counts the restarts too: 3 s after the first start the hosts have run less than max_run.
    spec = spec_of(HETERO.replace("max_run: 60", "max_run: 3\nuse_spot_instances: true\nmax_wait: 3"))
    fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")})
    result, _ = run(spec, fake, inject=(parse_injection("spot-interruption@1s"),))

    assert result.status == "Stopped"
    assert result.secondary_status == "MaxWaitTimeExceeded"
    assert job_json(result)["SecondaryStatus"] == "MaxWaitTimeExceeded"


def test_an_interruption_the_service_could_not_make_is_refused_before_anything_starts(
        spec_of: Callable[..., JobSpec]) -> None:
    fake = FakeBackend({})
    with pytest.raises(UsageError, match="only a managed spot training job is interrupted"):
        run(spec_of(), fake, inject=(parse_injection("spot-interruption@5s"),))
    with pytest.raises(UsageError, match="max_run is 60 s"):
        run(spec_of(SPOT), fake, inject=(parse_injection("spot-interruption@90s"),))
    assert fake.created == []


def test_two_hosts_failing_on_their_own_keep_their_reasons_and_the_first_is_blamed(
        spec_of: Callable[..., JobSpec]) -> None:
    # algo-2 fails first, but the engine reports it only after the poll that saw algo-3 fail.
    fake = FakeBackend({"algo-1": runs_until_stopped(), "algo-2": exits(2, after=0.05), "algo-3": exits(1, after=0.15)},
                       late_report={"algo-2"})
    result, _ = run(spec_of(), fake)

    assert result.status == "Failed"
    assert result.failed_host == "algo-2 (data_group)"
    reasons = {h.host: h.failure_reason or "" for h in result.hosts}
    assert reasons["algo-2"].startswith("AlgorithmError") and "exit code: 2" in reasons["algo-2"]
    assert reasons["algo-3"].startswith("AlgorithmError") and "exit code: 1" in reasons["algo-3"]
    assert reasons["algo-1"] == "stopped by the emulator (exit code 143)"
    assert result.failure_reason == reasons["algo-2"]

"""An image build said while a job waits for it (emulator/run/build_status.py): the Starting StatusMessage
DescribeTrainingJob answers during a build, handed on at most every MIN_INTERVAL seconds, and the
build's end; the runner hands a build's steps to the record of a job CreateTrainingJob recorded, and
the SDK v2's own status functions print each message."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from fake_backend import FakeBackend
from sagemaker.utils import secondary_training_status_changed, secondary_training_status_message

from emulator.aws import stub
from emulator.aws.training import SageMakerTraining
from emulator.backend import image_build
from emulator.jobspec import JobSpec, load_spec_file
from emulator.options import RunOptions
from emulator.planning.described_request import echoed
from emulator.reports.console import RecordingReporter
from emulator.result import SecondaryStatus, Status
from emulator.run import build_status
from emulator.run.runner import run_job
from emulator.state import job_records
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.image_recipes import load_recipe

IMAGE = "hetero-emu/pytorch-training:1.11.0-py39"
VENV = "[framework-bullseye 3/4] venv: pip in a container of hetero-emu/base:framework-bullseye (14 pins)"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def status_with(clock: Clock, interval: float = 10.0) -> tuple[build_status.BuildStatus, list[tuple[str, bool]]]:
    sent: list[tuple[str, bool]] = []
    return build_status.BuildStatus(IMAGE, lambda m, b: sent.append((m, b)), interval=interval, clock=clock), sent


def test_a_step_title_as_the_builder_writes_it_is_read_back() -> None:
    recipe = load_recipe("training")
    title = image_build._title(recipe, 3, "wheels: pip wheel of requirements.txt")
    assert build_status.parse_step(title) == ("3/4", "wheels: pip wheel of requirements.txt")
    assert build_status.parse_step("✓ " + title) == ("3/4", "wheels: pip wheel of requirements.txt")
    assert build_status.parse_step("building hetero-emu/training:py311 from images/training") is None


def test_messages_say_the_step_and_the_minutes_and_are_handed_on_at_most_every_interval() -> None:
    clock = Clock()
    status, sent = status_with(clock)
    status.poll()
    assert sent == [(f"Building image {IMAGE} (0 s)", True)]
    status.step("✓ [framework-bullseye 1/4] base rootfs: image hetero-emu/base:framework-bullseye is up to date")
    clock.now += 2
    status.step(VENV)  # a second step 2 s later: not handed on yet
    assert len(sent) == 1
    for _ in range(8):  # polled every second: one message once the interval is over
        clock.now += 1
        status.poll()
    assert sent[1:] == [(f"Building image {IMAGE}: step 3/4, venv: pip in a container of "
                         "hetero-emu/base:framework-bullseye (14 pins) (10 s)", True)]
    clock.now += 200  # the step runs on: one message a minute at most, with its minutes
    status.poll()
    status.poll()
    assert sent[-1][0].endswith("(14 pins) (3 min)") and len(sent) == 3
    clock.now += 20
    status.poll()  # still 3 min: nothing new to say
    assert len(sent) == 3


def test_a_counted_step_says_its_counter() -> None:
    clock = Clock()
    status, sent = status_with(clock, interval=0)
    task = image_build.Task.__new__(image_build.Task)  # only done/total are read
    task.done, task.total = 5, 12
    status.step("[training 4/4] docker build of images/training", task)
    assert sent[-1][0] == f"Building image {IMAGE}: step 4/4, docker build of images/training 5/12 (0 s)"


def test_the_end_is_handed_on_at_once_whatever_the_interval() -> None:
    clock = Clock()
    status, sent = status_with(clock)
    status.poll()
    clock.now += 361
    status.finish("built")
    assert sent[-1] == (f"Image {IMAGE} built in 6 min", False)
    status.finish("stopped")
    assert sent[-1] == (f"Building image {IMAGE} stopped after 6 min", False)


def test_publishing_passes_everything_on_and_ends_with_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = RecordingReporter()
    sent: list[tuple[str, bool]] = []
    with build_status.publishing(inner, IMAGE, lambda m, b: sent.append((m, b)), interval=0, tick=0.01) as rep:
        rep.info("✓ [framework-bullseye 1/4] base rootfs: up to date")
        with rep.task(VENV):
            pass
        rep.warn("a warning")
    assert inner.infos == ["✓ [framework-bullseye 1/4] base rootfs: up to date"]
    assert inner.steps == [VENV] and inner.warnings == ["a warning"]
    messages = [m for m, _ in sent]
    assert any(": step 1/4, base rootfs: up to date" in m for m in messages)
    assert any(": step 3/4, venv: pip" in m for m in messages)
    assert sent[-1][1] is False and sent[-1][0].startswith(f"Image {IMAGE} built in ")
    assert all(building for _, building in sent[:-1])
    assert not [t for t in threading.enumerate() if t.name.startswith("build status")]


def test_without_a_publisher_the_builder_gets_the_reporter_itself() -> None:
    inner = RecordingReporter()
    with build_status.publishing(inner, IMAGE, None) as rep:
        assert rep is inner


def test_a_failed_build_ends_its_message_too() -> None:
    sent: list[tuple[str, bool]] = []
    with pytest.raises(RuntimeError), \
            build_status.publishing(RecordingReporter(), IMAGE, lambda m, b: sent.append((m, b)), interval=0):
        raise RuntimeError("pip failed")
    assert sent[-1][0].startswith(f"Building image {IMAGE} failed after ")


# -- the job's record and DescribeTrainingJob


def created(name: str, job_dir: Path) -> None:
    """The record CreateTrainingJob makes before the driver runs (emulator/jobs/service.py)."""
    asked = {"TrainingJobName": name, "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
             "RoleArn": "arn:aws:iam::111122223333:role/x"}
    job_records.record(name, job_dir, Status.IN_PROGRESS, Request=echoed(asked),
                       CreationTime="2026-12-05T06:00:00+00:00", SecondaryStatus=SecondaryStatus.STARTING,
                       SecondaryStatusTransitions=[{"Status": "Starting", "StartTime": "2026-12-05T06:00:00+00:00",
                                                    "StatusMessage": "Launching requested ML instances"}])


def describe(tmp_path: Path, name: str) -> dict[str, Any]:
    (tmp_path / "s3").mkdir(exist_ok=True)
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="eu-west-1")
    stub.install(session, [SageMakerTraining(tmp_path / "s3", region="eu-west-1", base_dir=tmp_path)])
    answer: dict[str, Any] = session.client("sagemaker").describe_training_job(TrainingJobName=name)
    return answer


def test_describe_training_job_says_the_build_in_the_starting_message_and_the_sdk_prints_it(tmp_path: Path) -> None:
    created("building", tmp_path / "out" / "building")
    before = describe(tmp_path, "building")
    message = f"Building image {IMAGE}: step 3/4, venv: pip (2 min)"
    build_status.to_record("building")(message, True)
    during = describe(tmp_path, "building")
    assert during["TrainingJobStatus"] == "InProgress" and during["SecondaryStatus"] == "Starting"
    assert [t["StatusMessage"] for t in during["SecondaryStatusTransitions"]] == [message]
    assert "ImageBuild" not in during  # the record's own field, not the API's
    # SDK v2's logs_for_job prints a line when this changes (sagemaker.utils).
    assert secondary_training_status_changed(during, before)
    assert secondary_training_status_message(during, before).endswith(f"Starting - {message}")
    record = job_records.find("building")
    assert record is not None and build_status.building_message(record.doc) == message
    assert record.doc["Request"]["RoleArn"]  # the rest of the record kept


def test_a_job_no_longer_starting_or_in_progress_is_not_written(tmp_path: Path) -> None:
    created("moved-on", tmp_path / "out" / "moved-on")
    job_records.end("moved-on", Status.STOPPED)
    build_status.to_record("moved-on")("Building image x (1 min)", True)
    record = job_records.find("moved-on")
    assert record is not None and record.status == Status.STOPPED and "ImageBuild" not in record.doc
    build_status.to_record("never-created")("Building image x (1 min)", True)
    assert job_records.find("never-created") is None


# -- through the runner


HETERO = """\
entry_point: train.py
source_dir: ./code
instance_groups:
  - {instance_group_name: g, instance_type: ml.c5.xlarge, instance_count: 1}
"""


@pytest.fixture
def spec_of(tmp_path: Path) -> Callable[[str], JobSpec]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")

    def load(name: str) -> JobSpec:
        path = tmp_path / "job.yaml"
        path.write_text(HETERO + f"job_name: {name}\nimage_uri: {IMAGE}\noutput_path: ./out\n")
        return load_spec_file(path)

    return load


def test_a_created_job_s_record_says_each_build_step_while_it_waits(
    spec_of: Callable[[str], JobSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(build_status, "MIN_INTERVAL", 0.0)
    fake = FakeBackend(images=())
    seen: list[str] = []

    def said() -> str:
        record = job_records.find("sdk-built")
        assert record is not None
        return str(record.transitions[-1]["StatusMessage"])

    def builder(framework: FrameworkImage, rep: Any) -> None:
        rep.info("✓ [framework-bullseye 1/4] base rootfs: image hetero-emu/base:framework-bullseye is up to date")
        seen.append(said())
        with rep.task(VENV):
            seen.append(said())
        fake.images.add(framework.tag)

    spec = spec_of("sdk-built")
    created("sdk-built", spec.output_path / "sdk-built")
    when = datetime(2026, 12, 5, 6, 0, tzinfo=timezone.utc)
    result = run_job(spec, RunOptions(created=when, grace=2.5), backend=fake, reporter=RecordingReporter(),
                     framework_builder=builder)
    assert result.status == "Completed"
    assert seen[0].startswith(f"Building image {IMAGE}: step 1/4, base rootfs: image ")
    assert seen[1].startswith(f"Building image {IMAGE}: step 3/4, venv: pip in a container of ")
    record = job_records.find("sdk-built")
    assert record is not None
    # The build's end in the record; the run's own transitions after it, from Starting on.
    assert record.doc["ImageBuild"]["Building"] is False
    assert record.doc["ImageBuild"]["Message"].startswith(f"Image {IMAGE} built in ")
    assert record.transitions[0]["StatusMessage"] == "Preparing the instances for training"
    assert json.loads(json.dumps(record.transitions))[-1]["Status"] == "Completed"


def test_a_cli_job_has_no_record_while_its_image_builds(spec_of: Callable[[str], JobSpec]) -> None:
    fake = FakeBackend(images=())
    during: list[object] = []

    def builder(framework: FrameworkImage, rep: Any) -> None:
        with rep.task(VENV):
            during.append(job_records.find("cli-built"))
        fake.images.add(framework.tag)

    reporter = RecordingReporter()
    result = run_job(spec_of("cli-built"), RunOptions(grace=2.5), backend=fake, reporter=reporter,
                     framework_builder=builder)
    assert result.status == "Completed" and during == [None]
    assert VENV in reporter.steps  # the console has the step, as `hetero-emu run` shows it


def test_a_variant_of_the_default_image_is_built_on_the_fly_and_its_build_said(
    spec_of: Callable[[str], JobSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from emulator.training_images.image_recipes import IMAGES_DIR_ENV, images_dir

    recipes = tmp_path / "images"
    recipes.mkdir()
    for folder in images_dir().iterdir():
        if folder.is_dir():
            (recipes / folder.name).symlink_to(folder, target_is_directory=True)
    (recipes / "variant").mkdir()
    (recipes / "variant" / "recipe.yaml").write_text("tag: my/variant:1\nbase:\n  recipe: training\n")
    monkeypatch.setenv(IMAGES_DIR_ENV, str(recipes))
    fake = FakeBackend(images=(), builds_images=True)
    spec = load_spec_file(_spec_file(tmp_path, "variant-built", "my/variant:1"))
    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(grace=2.5), backend=fake, reporter=reporter)
    assert result.status == "Completed" and fake.images.built == ["my/variant:1"]
    assert "the image my/variant:1 is missing: building it from its recipe variant" in reporter.steps
    # The swarm node is no training image (it carries no launchers): still refused, with its command.
    from emulator.errors import ImageMissing

    with pytest.raises(ImageMissing, match="swarm-node"):
        run_job(load_spec_file(_spec_file(tmp_path, "node-refused", "hetero-emu/swarm-node:bookworm")),
                RunOptions(grace=2.5), backend=FakeBackend(images=(), builds_images=True), reporter=RecordingReporter())


def _spec_file(tmp_path: Path, name: str, image: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(HETERO + f"job_name: {name}\nimage_uri: {image}\noutput_path: ./out\n")
    return path


# -- what the page and SDK v3's console show of it


def test_the_index_page_shows_the_build_a_starting_job_waits_for(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from emulator.serve.page import JobStream, LiveJobs, routes

    created("page-building", tmp_path / "out" / "page-building")
    message = f"Building image {IMAGE}: step 3/4, venv: pip <in> a container (2 min)"
    build_status.to_record("page-building")(message, True)
    source = LiveJobs(SageMakerTraining(tmp_path, region="eu-west-1", base_dir=tmp_path))
    body = TestClient(Starlette(routes=routes(source))).get("/").text
    assert "step 3/4, venv: pip &lt;in&gt; a container (2 min)" in body  # escaped, as every name is
    # The job's own page gets it as its status message, in the status event it streams.
    status = next(e for e in JobStream(source, "page-building").poll()[0] if e.kind == "status")
    assert status.data["secondary"] == "Starting" and status.data["message"] == message
    build_status.to_record("page-building")(f"Image {IMAGE} built in 6 min", False)
    assert "built in 6 min" not in TestClient(Starlette(routes=routes(source))).get("/").text


def test_sdk_v3_s_console_prints_each_build_message_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from emulator.sagemaker.local import LogsWithWarnings

    class Logs:
        def describe_log_streams(self, **params: Any) -> dict[str, Any]:
            return {"logStreams": []}

    created("v3-building", tmp_path / "out" / "v3-building")
    logs = LogsWithWarnings(Logs(), SageMakerTraining(tmp_path, region="eu-west-1", base_dir=tmp_path))
    publish = build_status.to_record("v3-building")
    for message, building in ((f"Building image {IMAGE} (0 s)", True), (f"Building image {IMAGE} (0 s)", True),
                              (f"Building image {IMAGE}: step 3/4, venv (1 min)", True),
                              (f"Image {IMAGE} built in 2 min", False)):
        publish(message, building)
        # TrainingJob.wait(logs=True) asks for the job's streams at each poll until they are there.
        logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="v3-building/")
        logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="v3-building/")
    assert capsys.readouterr().out.splitlines() == [
        f"Building image {IMAGE} (0 s)", f"Building image {IMAGE}: step 3/4, venv (1 min)",
        f"Image {IMAGE} built in 2 min"]


def test_a_job_stopped_while_its_image_builds_ends_stopped(tmp_path: Path) -> None:
    """StopTrainingJob records Stopping and sends the driver SIGTERM; the driver, interrupted in the
    build, ends the job (emulator/driver.py): it must not stay Stopping."""
    created("stopped-building", tmp_path / "out" / "stopped-building")
    build_status.to_record("stopped-building")(f"Building image {IMAGE} (0 s)", True)
    job_records.record("stopped-building", tmp_path / "out" / "stopped-building", Status.STOPPING)
    ended = job_records.end("stopped-building", Status.STOPPED)
    assert ended is not None and ended.status == Status.STOPPED
    assert ended.transitions[-1]["Status"] == "Stopped" and ended.doc["SecondaryStatus"] == "Stopped"

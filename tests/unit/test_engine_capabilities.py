"""The engine contract from above (emulator.backend): callers ask an engine's `Capabilities`, never its
class, and the policy about what an engine reports is the runner's, once for every engine. Against the
in-memory engine, and the two real engines' translations (no engine is asked). The image capability
(emulator/backend/images.py) has its contract here too: the fake's images and the Docker engines'
answer alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest
from fake_backend import FakeBackend

from emulator import api
from emulator.backend import Capabilities, contract_problems, registry
from emulator.backend.docker import container_options
from emulator.backend.docker_images import LocalImages
from emulator.backend.images import Images
from emulator.backend.swarm import service_options
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import ImageMissing, UsageError
from emulator.jobspec import JobSpec, validate
from emulator.planning.container import MPI_ULIMITS, Device, PortBinding
from emulator.planning.plan import make_plan
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job
from emulator.training_images.image_recipes import LAUNCHERS_LABEL

MPI = {"mpi": {"enabled": True}, "instance_groups": ["trainers"]}
MEMLOCK, STACK = MPI_ULIMITS
REFUSAL = ("the Docker engine may not raise ulimit memlock to unlimited (its own limit is lower): hosts keep the "
           "engine's default, which MPI or NCCL pinning memory may find too small")


def spec_with(tmp_path: Path, distribution: dict[str, object] | None = None) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    raw: dict[str, object] = {
        "job_name": "capable", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [
            {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "trainers", "instance_type": "ml.c5.xlarge", "instance_count": 2}],
    }
    if distribution is not None:
        raw["distribution"] = distribution
    return validate(raw, base_dir=tmp_path)


def engine_refusing_memlock() -> FakeBackend:
    return FakeBackend(labels_of={DEFAULT_IMAGE: {LAUNCHERS_LABEL: "mpirun,sshd"}}, refused_ulimits=[MEMLOCK])


# --------------------------------------------------------------------------------------------------
# The shape of the contract


def test_the_fake_engine_has_the_whole_contract() -> None:
    """As every registered engine has (tests/swarm/test_engine_contract.py checks those)."""
    assert contract_problems(FakeBackend()) == []
    assert isinstance(FakeBackend().capabilities, Capabilities)


def test_what_an_engine_lacks_of_the_contract_is_named() -> None:
    class HalfAnEngine:
        capabilities = "everything"

        def ping(self) -> None: ...

        def stop(self, names: list[str]) -> None: ...  # no grace

    problems = contract_problems(HalfAnEngine())
    assert "capabilities: not a Capabilities record" in problems
    assert "stop(): takes (names), the contract says (names, grace)" in problems
    assert "start(): missing" in problems and "stream_errors: missing" in problems
    assert "images: missing" in problems
    assert not [p for p in problems if p.startswith("ping")]


def test_every_registered_engine_gives_images_with_the_whole_image_contract() -> None:
    for name in registry.names():
        assert [p for p in contract_problems(registry.engine(name)) if p.startswith("images")] == [], name


def test_what_an_engine_s_images_lack_of_their_contract_is_named() -> None:
    class HalfTheImages:
        def present(self, image: str) -> bool:
            return False

        def labels(self, name: str) -> None: ...  # `image`, says the contract

    engine = FakeBackend()
    engine.images = HalfTheImages()  # type: ignore[assignment]
    problems = contract_problems(engine)
    assert "images.labels(): takes (name), the contract says (image)" in problems
    assert "images.build_wheelhouse(): missing" in problems and "images.size(): missing" in problems
    assert not [p for p in problems if p.startswith("images.present") or not p.startswith("images.")]


# --------------------------------------------------------------------------------------------------
# The image capability's contract: what an engine's images answer, the same from every engine's


HELD = {"mine:1": {LAUNCHERS_LABEL: "mpirun,sshd"}, "bare:1": {}}


def fake_images(held: Mapping[str, Mapping[str, str]]) -> Images:
    return FakeBackend(images=held, labels_of=held).images


def docker_images(held: Mapping[str, Mapping[str, str]]) -> Images:
    """What both Docker engines give as `images`, over a stand-in for docker-py's `client.images`."""
    def get(name: str) -> SimpleNamespace:
        if name not in held:
            raise docker.errors.ImageNotFound(f"No such image: {name}")
        return SimpleNamespace(labels=dict(held[name]) or None, id=f"sha256:{name}", attrs={"Size": 1000})

    client = SimpleNamespace(images=SimpleNamespace(get=get))
    return LocalImages(lambda: client)  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("make", [fake_images, docker_images], ids=["fake", "docker"])
def test_every_engine_s_images_answer_alike(make: Callable[[Mapping[str, Mapping[str, str]]], Images]) -> None:
    images = make(HELD)
    assert images.present("mine:1") and images.labels("mine:1") == HELD["mine:1"]
    assert images.present("bare:1") and images.labels("bare:1") == {}  # no labels: {}, not None
    assert not images.present("theirs:1") and images.labels("theirs:1") is None
    assert images.image_id("mine:1") != images.image_id("bare:1")
    assert images.size("mine:1") > 0 and images.size("theirs:1") == 0


def test_a_port_or_a_device_is_given_by_docker_and_refused_by_the_swarm(tmp_path: Path) -> None:
    """A port or a device is in docker-py's arguments on the Docker engine, refused on the swarm's
    (services take neither), before anything starts."""
    container = make_plan(spec_with(tmp_path), "capable").hosts[0].container
    with_port = dataclasses.replace(container, ports=(PortBinding("127.0.0.1", 5678, 5678),))
    with_device = dataclasses.replace(container, devices=(Device("/dev/fuse", "/dev/fuse", "rwm"),))
    assert container_options(with_port, "net", {}, "me").host_config["port_bindings"]
    assert container_options(with_device, "net", {}, "me").host_config["devices"]
    for refused in (with_port, with_device):
        with pytest.raises(UsageError):
            service_options(refused, "net", "img", "me", 10)


# --------------------------------------------------------------------------------------------------
# Refused ulimits: the engine reports them, the runner decides and warns, once


def test_a_distributed_job_is_warned_once_per_ulimit_the_engine_refuses(tmp_path: Path) -> None:
    fake = engine_refusing_memlock()
    reporter = RecordingReporter()
    result = run_job(spec_with(tmp_path, MPI), backend=fake, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert reporter.warnings.count(REFUSAL) == 1
    assert not [w for w in reporter.warnings if "ulimit stack" in w]  # the one it gives is not mentioned
    assert [c for c in fake.calls if c[0] == "refused_ulimits"] == [("refused_ulimits", "capable",
                                                                      ("memlock", "stack"))]


def test_a_job_that_pins_no_memory_is_not_warned_and_the_engine_not_asked(tmp_path: Path) -> None:
    fake = engine_refusing_memlock()
    reporter = RecordingReporter()
    result = run_job(spec_with(tmp_path), backend=fake, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert not [w for w in reporter.warnings if "ulimit" in w]
    assert "refused_ulimits" not in fake.call_names()


def test_an_engine_that_probes_no_ulimits_is_never_asked(tmp_path: Path) -> None:
    fake = FakeBackend(labels_of={DEFAULT_IMAGE: {LAUNCHERS_LABEL: "mpirun,sshd"}})
    assert not fake.capabilities.probes_ulimits  # its refused_ulimits raises UsageError when called
    result = run_job(spec_with(tmp_path, MPI), backend=fake, reporter=RecordingReporter())
    assert result.status == "Completed", result.failure_reason
    assert "refused_ulimits" not in fake.call_names()


def test_render_leaves_out_and_warns_about_what_the_engine_refuses_as_run_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = engine_refusing_memlock()
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    warnings: list[str] = []
    plan = api.render(spec_with(tmp_path, MPI), tmp_path / "rendered", engine_name="fake", warn=warnings.append,
                      progress=lambda line: None)

    assert warnings.count(REFUSAL) == 1
    assert {h.container.ulimits for h in plan.hosts} == {(STACK,)}


# --------------------------------------------------------------------------------------------------
# Building images: only an engine that can


def test_run_builds_a_missing_default_image_on_an_engine_that_builds_images(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend(images=(), builds_images=True)
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    result = api.run(spec_with(tmp_path), engine_name="fake", reporter=RecordingReporter())
    assert result.status == "Completed", result.failure_reason
    assert fake.images.built == [DEFAULT_IMAGE]
    # Built once: asked again, the images say it is up to date, as a real build does.
    report = fake.images.build_default_image(RecordingReporter())
    assert report.image == DEFAULT_IMAGE and not report.built and fake.images.built == [DEFAULT_IMAGE]


def test_run_on_an_engine_that_builds_no_images_says_how_to_build_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBackend(images=())
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    with pytest.raises(ImageMissing) as info:
        api.run(spec_with(tmp_path), engine_name="fake", reporter=RecordingReporter())
    assert info.value.hint == "run `hetero-emu image build`"
    assert "images.build" not in fake.call_names()

"""Fixtures shared by the suites that drive the real Docker engine (tests/integration, tests/faults),
and the markers (`docker`, `swarm`, `serial`) each test of those folders gets from where it lies.

Without an engine they skip, unless EMULATOR_REQUIRE_DOCKER=1 (set by .ci/run): then they fail, so
CI can never go green by silently skipping every container test.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.backend.liveness import current_driver, driver_alive
from emulator.planning.plan import LABEL_DRIVER, LABEL_MANAGED

#: The markers every test of a folder carries (pyproject.toml registers them): a lane selects them
#: with `-m`, and no test file has to remember to say it needs an engine.
FOLDER_MARKS: dict[str, tuple[str, ...]] = {
    "integration": ("docker",),
    # Fault tests kill drivers and clean every job: another test's job would be a leftover to them.
    "faults": ("docker", "serial"),
    # The swarm's nodes carry labels of their own and its jobs run inside them: it shares nothing
    # with the other tests but the one cluster of the session (SWARM_GROUP).
    "swarm": ("swarm", "docker"),
}
#: pytest-xdist's `--dist loadgroup` runs the tests of one group on one worker, one after another:
#: the serial tests so that no two of them overlap (scripts/test.sh keeps every other Docker test
#: out of their pass), the swarm tests so that one worker makes the session's cluster, not each.
SERIAL_GROUP, SWARM_GROUP = "serial", "swarm"
#: Files of those folders that need no engine but where a test is marked so: the package tests build,
#: check and unpack the sdist and the wheel without one, and only run the demo and `serve` with one.
NO_ENGINE = {"integration/test_package_data.py"}
TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    read_sdk_data_once()


#: The service models botocore edits in place while a client uses them (handlers.py: S3's requestUri
#: loses its `/{Bucket}`, S3 Control's hostPrefix its account): read anew for each loader, as botocore does.
EDITED_MODELS = {"s3", "s3control"}


def read_sdk_data_once() -> None:
    """botocore's data files parsed once per test process; nothing a test looks at changes.

    botocore gives each session a loader of its own, which parses endpoints.json and each service's
    model (megabytes of JSON) again: the tests make hundreds of sessions (a boto3 client or an
    EmulatorSession each), and parsing took about a quarter of the unit tests' worker time. Each file
    is parsed once per process instead, as one session's loader already shares it between its clients
    (and botocore merges a model's sdk-extras into it the same way each time)."""
    import botocore.loaders

    class ParsedOnce(botocore.loaders.JSONFileLoader):
        parsed: dict[str, Any] = {}

        def load_file(self, file_path: str) -> Any:
            if Path(file_path).parent.parent.name in EDITED_MODELS:
                return super().load_file(file_path)
            if file_path not in self.parsed:
                self.parsed[file_path] = super().load_file(file_path)
            return self.parsed[file_path]

    botocore.loaders.Loader.FILE_LOADER_CLASS = ParsedOnce


# tryfirst: pytest-xdist reads the xdist_group marks in a hook of its own, which must see them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            where = item.path.resolve().relative_to(TESTS)
        except ValueError:  # a test outside tests/ (pytester's own folders)
            continue
        if where.as_posix() in NO_ENGINE:
            continue
        for mark in FOLDER_MARKS.get(where.parts[0], ()):
            if mark not in {m.name for m in item.iter_markers()}:
                item.add_marker(mark)
        marks = {m.name for m in item.iter_markers()}
        # One group each: a serial test of the swarm folder (on this machine's engine) is serial.
        if "serial" in marks:
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        elif "swarm" in marks:
            item.add_marker(pytest.mark.xdist_group(SWARM_GROUP))


@pytest.fixture(scope="session", autouse=True)
def python_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, which the tests that deliver SIGINT to themselves expect, even when
    the suite was started in the background: a non-interactive shell starts background jobs with
    SIGINT ignored, and Python keeps an ignored SIGINT it inherits instead of installing its handler
    (https://docs.python.org/3/library/signal.html#signal.default_int_handler)."""
    inherited = signal.getsignal(signal.SIGINT)
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if inherited is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fails a grouped test that pytest-xdist's `--dist loadgroup` did not group, before it runs: the
    group is a suffix of the node id, which some pytest releases silently drop
    (https://github.com/pytest-dev/pytest-xdist/issues/1386), and the serial tests would overlap."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") \
            and "@" not in item.nodeid:
        pytest.fail("pytest-xdist did not group this test (--dist loadgroup): this pytest breaks it; "
                    "install the pytest that pyproject.toml pins", pytrace=False)


def _engine() -> object | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception:
        return None


@pytest.fixture(scope="session", autouse=True)
def job_records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The record of jobs run (emulator.state.job_records) goes to a folder of the test session, not the user's
    home; set in os.environ so that CLI subprocesses use it too."""
    previous = os.environ.get("HETERO_EMU_STATE_DIR")
    os.environ["HETERO_EMU_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield
    if previous is None:
        del os.environ["HETERO_EMU_STATE_DIR"]
    else:
        os.environ["HETERO_EMU_STATE_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def default_s3_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default S3 root ($XDG_DATA_HOME/hetero-emu/s3) is a folder of the test session, not the
    user's, and no HETERO_EMU_S3_ROOT of the user's shell overrides the specs' local_s3_root."""
    saved = {key: os.environ.get(key) for key in ("XDG_DATA_HOME", "HETERO_EMU_S3_ROOT")}
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("data-home"))
    os.environ.pop("HETERO_EMU_S3_ROOT", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def docker_client() -> object:
    client = _engine()
    if client is None:
        if os.environ.get("EMULATOR_REQUIRE_DOCKER") == "1":
            pytest.fail("EMULATOR_REQUIRE_DOCKER=1 but no Docker engine answers")
        pytest.skip("no Docker engine")
    return client


@pytest.fixture(scope="session")
def training_image(docker_client: object) -> str:
    """The default image, built offline once per session (skipped when it is up to date)."""
    from emulator.backend.image_build import build_default_image

    report = build_default_image(docker_client, progress=lambda m: None)  # type: ignore[arg-type]
    return report.image


@pytest.fixture(scope="session")
def framework_image(docker_client: object) -> Callable[[str, str, str], str]:
    """Builds a framework image (emulator.training_images.frameworks) unless it is up to date, and names it:
    `framework_image("pytorch", "1.11.0", "py38")`. scripts/test.sh builds the ones the tests use."""
    from emulator.backend.framework_build import build_framework_image
    from emulator.training_images.frameworks import choose

    def build(framework: str, version: str, py_version: str) -> str:
        report = build_framework_image(docker_client, choose(framework, version, py_version),  # type: ignore[arg-type]
                                       progress=lambda m: None)
        return str(report.image)

    return build


@pytest.fixture(scope="session")
def pytorch_image(framework_image: Callable[[str, str, str], str]) -> str:
    """The PyTorch 2.x framework image (emulator.defaults.PYTORCH_IMAGE)."""
    return framework_image("pytorch", "2.1.0", "py310")


def managed_resources(client: object) -> list[str]:
    """Names of every container and network carrying the emulator's label, except those of a job
    another process is running right now (someone else's tests or jobs on a shared engine): a
    leftover is what a driver that is gone, or this very process, left behind."""
    filters = {"label": f"{LABEL_MANAGED}=true"}
    api = client.api  # type: ignore[attr-defined]
    me = current_driver()
    found = [(c["Names"][0], c.get("Labels") or {}) for c in api.containers(all=True, filters=filters)]
    found += [(n["Name"], n.get("Labels") or {}) for n in api.networks(filters=filters)]
    return [name for name, labels in found
            if labels.get(LABEL_DRIVER) == me or driver_alive(labels.get(LABEL_DRIVER)) is not True]


@pytest.fixture
def no_leftovers(docker_client: object) -> Iterator[None]:
    """Asserts the test left no container or network of the emulator behind."""
    before = set(managed_resources(docker_client))
    yield
    left = set(managed_resources(docker_client)) - before
    assert not left, f"left behind: {sorted(left)}"


@pytest.fixture(scope="session")
def unlimited_memlock_allowed(docker_client: Any, training_image: str) -> bool:
    """Whether the engine starts a container with memlock unlimited, asked of it directly (`docker run
    --ulimit memlock=-1 IMAGE true`): an engine confined below that (dockerd in a sandbox) refuses to
    start such a container at all, and the emulator then leaves the limit out with a warning."""
    import docker

    container = docker_client.containers.create(training_image, entrypoint=["true"], network_mode="none",
                                                ulimits=[docker.types.Ulimit(name="memlock", soft=-1, hard=-1)])
    try:
        container.start()
    except docker.errors.APIError as err:
        assert "setting rlimit" in str(err), err
        return False
    finally:
        container.remove(force=True)
    return True

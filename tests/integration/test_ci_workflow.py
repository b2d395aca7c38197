"""examples/ci/github-actions.yml run for real: its `run:` lines, in order, in a clean Debian bookworm
container that reaches this machine's Docker engine through its socket (as a runner's job does),
twice: the first time with an empty images cache, the second from what the first saved. The repository
is examples/testing-your-script; hetero-emu is installed from this checkout, pip's cache mounted.

What the harness stands in for: the `uses:` steps (actions/setup-python is a venv of the container's
Python 3.11 on PATH; actions/cache is the cache folder mounted at the workflow's path, a hit when it
holds what the key step names; `sudo` is the root it already is), and `if:` is only ever a cache-miss
or a failure() condition, evaluated as GitHub would. Each line runs as GitHub runs it, `bash -eo
pipefail`, in the repository's folder, with the workflow's `env:`.

The engine is shared with this machine, so the training image is already there in the first run (its
build step finds it up to date; a cold build's time is images' benchmark, docs/benchmarks.md). In the
second run the image's tag is taken off first (the image is kept by another tag), so only the load can
put it back, and the build that follows must find it up to date. The times of every step of both runs
are printed (docs/benchmarks.md, CI cache).

examples/ci/gitlab-ci.yml's script lines run the same way, once, from an empty cache.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator import api
from emulator.defaults import DEFAULT_IMAGE

# serial: the second run takes the default image's tag away for the seconds its load takes.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.serial, pytest.mark.usefixtures("training_image")]

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
GITLAB = ROOT / "examples" / "ci" / "gitlab-ci.yml"
EXAMPLE = ROOT / "examples" / "testing-your-script"
#: A clean Debian bookworm with its Python 3.11 (images/README.md): no registry is reachable to pull one.
RUNNER_IMAGE = "hetero-emu/base:training"
SOURCE = "/src/hetero-emu"
#: A runner's passwordless sudo, for a job that is root already: its options dropped, the command run.
SUDO = '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n'
CA = Path("/etc/ssl/certs/ca-certificates.crt")
FAILING_TEST = '''
def test_fails_on_purpose(hetero_emu):
    """Added by tests/integration/test_ci_workflow.py: its job's folder must be kept for CI."""
    run = hetero_emu.run("../job.yaml")
    assert run.status == "Stopped", "failing on purpose"
'''


@dataclass
class Step:
    name: str
    seconds: float
    exit_code: int | None  # None: skipped by its `if:`
    output: str


def workflow() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    return doc


def checkout_copy(dest: Path) -> Path:
    """This checkout's files (tracked, and new ones not ignored) copied where pip may build in them."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def user_repository(dest: Path, failing: bool) -> Path:
    """A user's repository: examples/testing-your-script with the workflow in .github/workflows/."""
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", "output"))
    (dest / ".github" / "workflows").mkdir(parents=True)
    shutil.copy2(WORKFLOW, dest / ".github" / "workflows" / "training-tests.yml")
    if failing:
        with (dest / "tests" / "test_train.py").open("a") as out:
            out.write(FAILING_TEST)
    return dest


@pytest.fixture
def keep_default_image(docker_client: Any) -> Iterator[str]:
    """The default image's id, held by a second tag while the second run takes its own tag off; the
    tag is put back if a failed load left it off."""
    image = docker_client.images.get(DEFAULT_IMAGE)
    spare = f"hetero-emu-test/ci-keep:{uuid.uuid4().hex[:8]}"
    repository, tag = spare.split(":")
    image.tag(repository, tag)
    try:
        yield str(image.id)
    finally:
        if DEFAULT_IMAGE not in {t for i in docker_client.images.list(name="hetero-emu/training") for t in i.tags}:
            docker_client.images.get(spare).tag(*DEFAULT_IMAGE.split(":"))
        docker_client.images.remove(spare, noprune=True)


PATH = "/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@contextlib.contextmanager
def runner(docker_client: Any, repo: Path, cache: Path, cache_path: str, source: Path,
           env: dict[str, str]) -> Iterator[tuple[Any, Step]]:
    """A fresh runner container: the repository at its own path (the engine bind-mounts the jobs'
    folders by their paths in here), the cache folder at `cache_path` in it, the engine's socket,
    the checkout at SOURCE and pip's cache; its Python set up as a venv on PATH (the step it took)."""
    pip_cache = Path.home() / ".cache" / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    volumes = {
        "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
        str(repo): {"bind": str(repo), "mode": "rw"},
        str(cache): {"bind": str(repo / cache_path), "mode": "rw"},
        str(source): {"bind": SOURCE, "mode": "rw"},
        str(pip_cache): {"bind": "/root/.cache/pip", "mode": "rw"},
        **({str(CA): {"bind": str(CA), "mode": "ro"}} if CA.is_file() else {}),
    }
    if CA.is_file():
        env.update(PIP_CERT=str(CA), REQUESTS_CA_BUNDLE=str(CA))
    container = docker_client.containers.run(RUNNER_IMAGE, ["sleep", "infinity"], detach=True, volumes=volumes,
                                             working_dir=str(repo), labels={"hetero-emu-test": "ci-workflow"})
    try:
        started = time.monotonic()
        code, out = container.exec_run(["sh", "-c", f"python3 -m venv /opt/python && printf %s {shlex.quote(SUDO)} "
                                        "> /usr/local/bin/sudo && chmod +x /usr/local/bin/sudo"], environment=env)
        assert code == 0, out
        yield container, Step("setup-python's stand-in (a venv)", time.monotonic() - started, code, out.decode())
    finally:
        container.remove(force=True)


def run_line(container: Any, name: str, script: str, env: dict[str, str], repo: Path) -> Step:
    """One `run:` (or script line) as the CI runs it: bash -eo pipefail, in the repository's folder."""
    started = time.monotonic()
    code, (out, err) = container.exec_run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                                          environment=env, workdir=str(repo), demux=True)
    text = (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")
    return Step(name, time.monotonic() - started, code, text)


def run_workflow(docker_client: Any, repo: Path, cache: Path, source: Path, *,
                 before_load: Callable[[], None] | None = None) -> list[Step]:
    """Every step of the workflow's job in a fresh container: its `run:` lines timed one by one."""
    doc = workflow()
    env = {**{k: str(v) for k, v in doc["env"].items()}, "HETERO_EMU": SOURCE, "CI": "true",
           "GITHUB_WORKSPACE": str(repo), "GITHUB_OUTPUT": "/tmp/github-output", "PATH": PATH}
    with runner(docker_client, repo, cache, doc["env"]["HETERO_EMU_IMAGES"], source, env) as (container, setup):
        steps = [setup]
        hit = failed = False
        for raw in doc["jobs"]["test"]["steps"]:
            name = raw.get("name") or raw.get("uses")
            condition = str(raw.get("if", ""))
            if "cache-hit != 'true'" in condition and hit or (condition == "failure()") != failed:
                steps.append(Step(name, 0.0, None, ""))
                continue
            if "run" not in raw:
                if raw.get("id") == "cache":  # the restore: a hit when it holds what the key names
                    key = outputs(container).get("key", "")
                    hit = bool(key) and (cache / f"{key}.tar").is_file()
                steps.append(Step(name, 0.0, 0, "hit" if raw.get("id") == "cache" and hit else ""))
                continue
            if before_load is not None and "image load" in raw["run"]:
                before_load()
            steps.append(run_line(container, name, raw["run"], env, repo))
            failed = failed or steps[-1].exit_code != 0
    return steps


def run_gitlab_job(docker_client: Any, repo: Path, cache: Path, source: Path) -> list[Step]:
    """The GitLab job's script lines in a fresh container (its `image:`, python:3.11-bookworm, is this
    bookworm's Python 3.11 in a venv), stopping at the first that fails, as GitLab does."""
    job = yaml.safe_load(GITLAB.read_text())["training-tests"]
    env = {"CI": "true", "CI_PROJECT_DIR": str(repo), "PATH": PATH}
    for name, value in job["variables"].items():  # GitLab expands the variables defined before
        env[name] = re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), ""), str(value))
    # The checkout instead of PyPI's; GitLab's pip cache is this machine's, mounted.
    env.update(HETERO_EMU=SOURCE, PIP_CACHE_DIR="/root/.cache/pip")
    with runner(docker_client, repo, cache, job["variables"]["HETERO_EMU_IMAGES"], source, env) as (container, setup):
        steps = [setup]
        for line in job["script"]:
            steps.append(run_line(container, line[:60], line, env, repo))
            if steps[-1].exit_code != 0:
                break
    return steps


def outputs(container: Any) -> dict[str, str]:
    code, out = container.exec_run(["cat", "/tmp/github-output"])
    lines = out.decode().splitlines() if code == 0 else []
    return dict(line.split("=", 1) for line in lines if "=" in line)


def by_name(steps: list[Step], start: str) -> Step:
    return next(s for s in steps if s.name.startswith(start))


def test_the_github_workflow_builds_once_then_loads_from_its_cache(
        docker_client: Any, keep_default_image: str, tmp_path: Path) -> None:
    source = checkout_copy(tmp_path / "src")
    cache = tmp_path / "cache"
    cache.mkdir()
    key = api.image_key()

    first = run_workflow(docker_client, user_repository(tmp_path / "run1" / "repo", failing=False), cache, source)
    report = {"first": first}
    tests = by_name(first, "Run the training")
    assert tests.exit_code == 0, tests.output[-3000:]
    assert by_name(first, "Install the image build").exit_code == 0  # a miss: the tools are installed
    images = by_name(first, "Load the images")
    assert images.exit_code == 0, images.output
    assert f"not saved: {DEFAULT_IMAGE} (key {key.text})" in images.output
    assert f"saved {DEFAULT_IMAGE} in " in images.output
    assert [p.name for p in cache.iterdir()] == [key.file_name]
    assert by_name(first, "Keep the failed").exit_code is None

    def untag() -> None:  # only the load can give the tag back now
        docker_client.images.remove(DEFAULT_IMAGE, noprune=True)

    repo = user_repository(tmp_path / "run2" / "repo", failing=True)
    second = run_workflow(docker_client, repo, cache, source, before_load=untag)
    report["second"] = second
    assert by_name(second, "Restore the saved images").output == "hit"
    assert by_name(second, "Install the image build").exit_code is None  # a hit: no build tools
    images = by_name(second, "Load the images")
    assert images.exit_code == 0, images.output
    assert f"loaded {DEFAULT_IMAGE} from " in images.output and "(up to date, " in images.output
    assert f"up to date: {DEFAULT_IMAGE}" in images.output  # the build: nothing to do after the load
    assert "building" not in images.output and f"already saved: {DEFAULT_IMAGE}" in images.output
    assert str(docker_client.images.get(DEFAULT_IMAGE).id) == keep_default_image
    assert by_name(second, "Save the images").exit_code is None

    # The failing test fails the step; its folder (its job's logs) is what the artifact keeps.
    tests = by_name(second, "Run the training")
    assert tests.exit_code == 1 and "failing on purpose" in tests.output
    kept = {p.name for p in (repo / "hetero-emu-jobs").iterdir()}
    assert any(name.startswith("test_fails_on_purpose") for name in kept), kept
    assert not any(name.startswith("test_the_line_is_fitted") for name in kept), kept
    assert list((repo / "hetero-emu-jobs").glob("test_fails_on_purpose*/**/logs/algo-1.log")), kept
    assert by_name(second, "Keep the failed").exit_code == 0  # the artifact step runs on failure

    show_times("the workflow's steps", report)


def show_times(what: str, report: dict[str, list[Step]]) -> None:
    print(f"\n{what}, seconds (docs/benchmarks.md):")
    for run, steps in report.items():
        for step in steps:
            print(f"  {run:6} {'skipped' if step.exit_code is None else f'{step.seconds:7.1f}'}  {step.name}")
        print(f"  {run:6} {sum(s.seconds for s in steps):7.1f}  in all")


def test_the_gitlab_job_installs_the_tools_builds_and_saves_from_an_empty_cache(
        docker_client: Any, tmp_path: Path) -> None:
    """The job's script from an empty cache folder: the build's tools installed (no archive of the
    key), the image found up to date on this engine, saved under its key; the tests pass and leave no
    folder of theirs. The line that decides the tools names the archive as `image save` writes it."""
    source = checkout_copy(tmp_path / "src")
    cache = tmp_path / "cache"
    cache.mkdir()
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "output"))
    shutil.copy2(GITLAB, repo / ".gitlab-ci.yml")
    steps = run_gitlab_job(docker_client, repo, cache, source)
    show_times("the GitLab job's script", {"empty": steps})
    assert all(step.exit_code == 0 for step in steps), [(s.name, s.output[-2000:]) for s in steps if s.exit_code]
    assert len(steps) == 1 + len(yaml.safe_load(GITLAB.read_text())["training-tests"]["script"])
    tools = by_name(steps, "test -e")
    assert "mmdebstrap" in tools.output  # installed: the cache held no archive of the key
    assert [p.name for p in cache.iterdir()] == [api.image_key().file_name]
    assert not [p for p in (repo / "hetero-emu-jobs").iterdir() if p.name.startswith("test_")]

"""What `hetero-emu image build` shows: one line per step, the tools' output in a log file, the tail of
a failed step, and a build that only waited for another one saying so.

No Docker and no real rootfs: a small recipe in a temporary images/ folder, an `mmdebstrap` on PATH that
prints a few lines and writes a tarball, and an in-memory stand-in for docker-py's client (the calls
`emulator.backend.image_build` makes: images.get/prune/remove, api.import_image_from_file, api.build).
"""

from __future__ import annotations

import fcntl
import io
import re
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from emulator.backend import image_build
from emulator.errors import ImageBuildError
from emulator.reports.progress import TAIL_LINES, StepPrinter
from emulator.training_images import image_recipes as recipes
from emulator.training_images.image_recipes import load_recipe

TAG = "t/small:1"
FAKE_MMDEBSTRAP = """\
#!{python}
import sys
lines, code = {lines}, {code}
for n in range(lines):
    print(f"Get:{{n}} http://mirror.invalid/debian bookworm/main pkg{{n}}", flush=True)
if code == 0:
    target = next(a for a in sys.argv if a.endswith(".tar.part"))
    open(target, "wb").write(b"rootfs")
sys.exit(code)
"""


class FakeImage:
    def __init__(self, tag: str, labels: dict[str, str]) -> None:
        self.id = f"sha256:{abs(hash(tag)):x}"
        self.labels = labels
        self.attrs = {"Size": 123_000_000}


class FakeClient:
    """docker.DockerClient as far as the image builder uses it; `store` is tag -> labels."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, str]] = {}
        self.images = self
        self.api = self
        self.timeout: float | None = 10  # docker-py's per-request read timeout
        self.slow_prune = False  # the engine outlasts the client's timeout (a ReadTimeout)
        self.prune_timeouts: list[float | None] = []

    def get(self, tag: str) -> FakeImage:
        if tag not in self.store:
            raise docker.errors.ImageNotFound(tag)
        return FakeImage(tag, self.store[tag])

    def prune(self, filters: dict[str, Any]) -> None:
        self.prune_timeouts.append(self.timeout)
        if self.slow_prune:
            raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=10)")

    def remove(self, image_id: str, noprune: bool = False) -> None:
        pass

    def import_image_from_file(self, path: str, repository: str, tag: str, changes: list[str]) -> str:
        label = next(c for c in changes if c.startswith("LABEL "))[len("LABEL "):]
        key, value = label.split("=", 1)
        self.store[f"{repository}:{tag}"] = {key: value}
        return '{"status": "sha256:0123"}'

    def build(self, tag: str, labels: dict[str, str], **kwargs: Any) -> Iterator[dict[str, str]]:
        yield {"stream": "Step 1/2 : ARG BASE_IMAGE\n"}
        yield {"stream": "Step 2/2 : FROM ${BASE_IMAGE}\n ---> 0123\n"}
        yield {"stream": "Successfully built 0123\n"}
        self.store[tag] = dict(labels)


@pytest.fixture
def small_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "images" / "small"
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(f"tag: {TAG}\nbase: {{debian: bookworm}}\npackages: packages.txt\n")
    (folder / "packages.txt").write_text("python3\nopenssh-server\n")
    (folder / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    monkeypatch.setattr(recipes, "images_dir", lambda: tmp_path / "images")
    monkeypatch.setenv(image_build.MIRROR_ENV, "http://mirror.invalid/debian")
    return tmp_path


def fake_mmdebstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: int, code: int) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "mmdebstrap"
    tool.write_text(FAKE_MMDEBSTRAP.format(python=sys.executable, lines=lines, code=code))
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def build(client: FakeClient, cache: Path, out: io.StringIO) -> image_build.BuildReport:
    return image_build.build_image(client, load_recipe("small"), progress=StepPrinter(out, live=False), cache_dir=cache)


def the_log(cache: Path) -> Path:
    logs = list((cache / "logs").glob("build-small-*.log"))
    assert len(logs) == 1, logs
    return logs[0]


def test_build_shows_one_line_per_step_and_the_tool_output_only_in_the_log(
    small_recipe: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_mmdebstrap(small_recipe, monkeypatch, lines=30, code=0)
    client, out, cache = FakeClient(), io.StringIO(), small_recipe / "cache"

    report = build(client, cache, out)

    assert report.built and report.waited_seconds is None
    log = the_log(cache)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"building {TAG} from {small_recipe / 'images' / 'small'}; the tools' output goes to {log}"
    step = r"\(\d+\.\d s\)"
    expected = [
        r"\[small 1/4\] base rootfs: Debian bookworm minbase \+ 2 packages \(mmdebstrap\) \.\.\.",
        rf"✓ \[small 1/4\] base rootfs: Debian bookworm minbase \+ 2 packages \(mmdebstrap\) {step}",
        r"\[small 2/4\] import: docker import bookworm-\w+\.tar as hetero-emu/base:small \.\.\.",
        rf"✓ \[small 2/4\] import: docker import bookworm-\w+\.tar as hetero-emu/base:small {step}",
        r"✓ \[small 3/4\] wheels: none \(the recipe names no requirements\)",
        rf"\[small 4/4\] docker build {TAG} FROM hetero-emu/base:small \.\.\.",
        rf"✓ \[small 4/4\] docker build {TAG} FROM hetero-emu/base:small 2/2 {step}",
        rf"image {TAG} built in \d+\.\d s \(123 MB\)",
    ]
    assert len(lines) == 1 + len(expected), lines
    for line, pattern in zip(lines[1:], expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    assert "Get:" not in out.getvalue() and "Successfully built" not in out.getvalue()
    text = log.read_text()
    assert all(f"Get:{n} http://mirror.invalid/debian" in text for n in range(30))
    assert "Step 2/2 : FROM ${BASE_IMAGE}" in text and "Successfully built 0123" in text
    assert "$ mmdebstrap --variant=minbase" in text


def test_a_prune_that_times_out_after_the_build_does_not_fail_it(
    small_recipe: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_mmdebstrap(small_recipe, monkeypatch, lines=3, code=0)
    client = FakeClient()
    client.slow_prune = True

    report = build(client, small_recipe / "cache", io.StringIO())

    assert report.built and TAG in client.store
    # The housekeeping waited for the engine instead of the 10 s a request gets, then got it back.
    assert client.prune_timeouts and set(client.prune_timeouts) == {None}
    assert client.timeout == 10


def test_verbose_build_streams_the_tool_output_too(small_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mmdebstrap(small_recipe, monkeypatch, lines=3, code=0)
    out = io.StringIO()
    image_build.build_image(FakeClient(), load_recipe("small"), progress=StepPrinter(out, live=False, verbose=True),
                      cache_dir=small_recipe / "cache")
    assert "      Get:2 http://mirror.invalid/debian" in out.getvalue()
    assert "      Successfully built 0123" in out.getvalue()


def test_failed_step_shows_its_tail_and_the_error_names_the_log(
    small_recipe: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_mmdebstrap(small_recipe, monkeypatch, lines=TAIL_LINES + 10, code=1)
    client, out, cache = FakeClient(), io.StringIO(), small_recipe / "cache"

    with pytest.raises(ImageBuildError) as info:
        build(client, cache, out)

    log = the_log(cache)
    assert info.value.exit_code == 3
    assert info.value.message == f"mmdebstrap failed with exit code 1 (the build's whole output: {log})"
    assert info.value.hint and "mmdebstrap" in info.value.hint
    lines = out.getvalue().splitlines()
    failed = next(i for i, line in enumerate(lines) if line.startswith("✗ "))
    assert re.fullmatch(r"✗ \[small 1/4\] base rootfs: .* \(\d+\.\d s\)", lines[failed])
    assert [line.strip() for line in lines[failed + 1:]] == [
        f"Get:{n} http://mirror.invalid/debian bookworm/main pkg{n}" for n in range(10, TAIL_LINES + 10)]
    assert "Get:0 " in log.read_text()
    assert TAG not in client.store  # nothing past the failed step


@pytest.mark.parametrize("other_build_made_it", [True, False])
def test_a_build_that_waited_for_another_says_so(
    small_recipe: Path, monkeypatch: pytest.MonkeyPatch, other_build_made_it: bool,
) -> None:
    fake_mmdebstrap(small_recipe, monkeypatch, lines=1, code=0)
    client, out, cache = FakeClient(), io.StringIO(), small_recipe / "cache"
    cache.mkdir()
    reports: list[image_build.BuildReport] = []
    # Another build holds the lock (flock locks belong to the open file, so a second open here
    # contends exactly as a second process would).
    with open(cache / "build.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: reports.append(build(client, cache, out)))
        waiter.start()
        deadline = time.monotonic() + 10
        while "waiting for another image build" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        if other_build_made_it:
            client.store[TAG] = {image_build.RECIPE_LABEL: image_build.recipe_hash(load_recipe("small"))}
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(10)

    lines = out.getvalue().splitlines()
    assert lines[0] == f"waiting for another image build to finish (lock {cache / 'build.lock'}) ..."
    report = reports[0]
    assert report.waited_seconds is not None and report.waited_seconds >= 0.3
    if other_build_made_it:
        assert not report.built
        assert len(lines) == 2
        assert re.fullmatch(rf"waited \d+ s for another build of {re.escape(TAG)} to finish", lines[1])
        assert not (cache / "logs").exists()
    else:
        assert report.built
        assert re.fullmatch(r"waited \d+ s for another image build to finish", lines[1])
        assert lines[2].startswith(f"building {TAG} from ")
    assert "nothing to build" not in out.getvalue()

"""The spec's rules are pure: what they ask the filesystem goes through the `Probes` they are given.

A fake filesystem stands in for the disk here, with the disk itself made unreachable while the rules
run, and the package imports nothing that runs a process or talks to Docker.
"""

from __future__ import annotations

import builtins
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import SpecError
from emulator.jobspec import request, validate
from emulator.jobspec.paths import Listing
from emulator.jobspec.requirements import Requirements

BASE = Path("/nowhere/project")


@dataclass
class FakeProbes:
    """A filesystem of path -> kind; folders list the keys given in `listings`."""

    kinds: Mapping[str, str]
    listings: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    requirements_of: Mapping[str, Requirements] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def kind_of(self, path: Path) -> str:
        self.asked.append(f"kind_of {path}")
        return self.kinds.get(str(path), "missing")

    def resolve(self, base: Path, text: str) -> Path:
        self.asked.append(f"resolve {text}")
        return Path(os.path.normpath(base / text))

    def folder_problem(self, resolved: Path) -> tuple[str, str | None] | None:
        self.asked.append(f"folder_problem {resolved}")
        return None

    def scan(self, source: Path) -> Listing:
        self.asked.append(f"scan {source}")
        return Listing(files=self.listings.get(str(source), (source.name,)))

    def is_archive(self, path: Path) -> bool:
        return path.name.endswith(".tar.gz")

    def archive_problem(self, archive: Path, entry_point: str | None) -> str | None:
        return None

    def requirements(self, code: Path | None, *, archive: bool, entry_point: str | None,
                     toolkit: bool) -> Requirements | None:
        self.asked.append(f"requirements {code}")
        return self.requirements_of.get(str(code))


RAW: dict[str, Any] = {
    "job_name": "fake-fs",
    "entry_point": "train.py",
    "source_dir": "code",
    "instance_groups": [
        {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
        {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
    ],
    "inputs": {"training": {"s3_data": "data/train", "distribution": "ShardedByS3Key",
                            "instance_groups": ["data_group"]},
               "validation": {"s3_data": "data/val.csv", "instance_groups": ["dnn_group"]}},
    "output_path": "out",
}
FAKE_DISK = {f"{BASE}/code": "dir", f"{BASE}/code/train.py": "file", f"{BASE}/data/train": "dir",
             f"{BASE}/data/val.csv": "file"}


@contextmanager
def no_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every way the rules could reach the disk fails the test while the block runs."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the rules touched the disk: {args}")

    with monkeypatch.context() as patch:
        for name in ("stat", "lstat", "scandir", "listdir", "access", "statvfs", "readlink"):
            patch.setattr(os, name, refuse)
        patch.setattr(builtins, "open", refuse)
        patch.setattr(tarfile, "open", refuse)
        yield


def test_a_spec_validates_against_a_fake_filesystem_without_touching_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = Requirements(f"{BASE}/code", False, "0" * 64)
    probes = FakeProbes(FAKE_DISK, listings={f"{BASE}/data/train": ("a.csv", "b.csv", "c.csv")},
                        requirements_of={f"{BASE}/code": wanted})
    with no_disk(monkeypatch):
        spec = validate(RAW, base_dir=BASE, probes=probes)
    assert spec.source_dir == BASE / "code" and spec.entry_point == "train.py"
    assert spec.requirements == wanted
    assert spec.inputs["training"].files == ("a.csv", "b.csv", "c.csv")
    assert spec.inputs["validation"].single_file and spec.inputs["validation"].files == ("val.csv",)
    assert spec.output_path == BASE / "out"
    assert f"folder_problem {BASE / 'out'}" in probes.asked and f"scan {BASE / 'data' / 'train'}" in probes.asked


def test_a_request_validates_against_a_fake_filesystem(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = FakeProbes(FAKE_DISK)
    raw = {"TrainingJobName": "fake-fs",
           "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
           "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
           "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
           "OutputDataConfig": {"S3OutputPath": "out"}, "RoleArn": "arn:aws:iam::000000000000:role/r",
           "StoppingCondition": {"MaxRuntimeInSeconds": 60}}
    with no_disk(monkeypatch):
        spec = request.validate_request(raw, BASE, probes=probes)
    assert spec.source_dir == BASE / "code" and spec.entry_point == "train.py"


def test_the_fake_gives_the_disks_own_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same missing paths, once on the real disk and once in the fake: the same problems, word for word.
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    raw = {**RAW, "inputs": {"training": {"s3_data": "data/missing"}}, "entry_point": "nope.py"}
    with pytest.raises(SpecError) as on_disk:
        validate(raw, base_dir=tmp_path)
    fake = {f"{tmp_path}/code": "dir", f"{tmp_path}/code/train.py": "file"}
    with no_disk(monkeypatch), pytest.raises(SpecError) as in_fake:
        validate(raw, base_dir=tmp_path, probes=FakeProbes(fake))
    assert [str(p) for p in in_fake.value.problems] == [str(p) for p in on_disk.value.problems]
    assert any("channel data not found" in str(p) for p in on_disk.value.problems)


def test_the_spec_package_imports_nothing_that_runs_a_process_or_talks_to_docker() -> None:
    probe = ("import sys, emulator.jobspec, emulator.jobspec.request, emulator.jobspec.probes; "
             "print(' '.join(sorted(m for m in sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                timeout=60).stdout.split())
    assert not loaded & {"subprocess", "docker", "requests", "emulator.run.wheelhouse"}
    ours = {m for m in loaded if m.startswith("emulator")}
    # The spec sits on the lowest layer alone (tests/unit/test_layers.py).
    allowed = {"emulator", "emulator.defaults", "emulator.errors", "emulator.result"}
    assert {m for m in ours if not m.startswith("emulator.jobspec")} <= allowed

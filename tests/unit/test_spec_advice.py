"""Warnings about what a valid spec allows but probably does not mean (`emulator.jobspec.spec_warnings`),
and that `run` and `render` report them (`validate` in test_cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, exits

from emulator import api
from emulator.backend import registry
from emulator.jobspec import JobSpec, spec_warnings, validate
from emulator.reports.console import RecordingReporter


def make_spec(tmp_path: Path, files: int = 2, counts: tuple[int, int] = (3, 1), **fields: Any) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "t.py").write_text("")
    (tmp_path / "data").mkdir(exist_ok=True)
    for i in range(files):
        (tmp_path / "data" / f"part-{i}.csv").write_text(f"{i}\n")
    raw: dict[str, Any] = {
        "job_name": "advice", "entry_point": "t.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [
            {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "instance_count": counts[0]},
            {"instance_group_name": "gpu", "instance_type": "ml.p3.2xlarge", "instance_count": counts[1]},
        ],
        **fields,
    }
    return validate(raw, base_dir=tmp_path)


def messages(spec: JobSpec) -> list[str]:
    return [str(p) for p in spec_warnings(spec)]


def test_a_sharded_channel_with_fewer_files_than_its_hosts_says_how_many_get_none(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, files=2, inputs={"train": {"s3_data": "data", "distribution": "ShardedByS3Key",
                                                          "instance_groups": ["cpu"]}})
    assert messages(spec) == ["inputs.train: ShardedByS3Key over 3 hosts but only 2 files: 1 host gets no file "
                              "(split the data into at least as many files as hosts, or use FullyReplicated)"]


def test_a_sharded_channel_counts_the_hosts_of_every_group_it_reaches(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, files=1, inputs={"train": {"s3_data": "data", "distribution": "ShardedByS3Key"}})
    assert "over 4 hosts but only 1 file: 3 hosts get no file" in messages(spec)[0]


@pytest.mark.parametrize(("files", "distribution"), [(3, "ShardedByS3Key"), (4, "ShardedByS3Key"),
                                                      (1, "FullyReplicated")])
def test_enough_files_or_a_replicated_channel_is_no_warning(tmp_path: Path, files: int, distribution: str) -> None:
    spec = make_spec(tmp_path, files=files, inputs={"train": {"s3_data": "data", "distribution": distribution,
                                                              "instance_groups": ["cpu"]}})
    assert messages(spec) == []


def test_a_channel_aimed_at_a_group_of_count_zero(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, counts=(2, 0), inputs={"train": {"s3_data": "data", "instance_groups": ["gpu"]}})
    assert messages(spec) == ["inputs.train.instance_groups: instance group 'gpu' has instance_count 0: no host of "
                              "it receives this channel (give the group hosts, or leave it out of the channel's "
                              "instance_groups)"]


def test_a_distribution_aimed_at_a_group_of_count_zero(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, counts=(2, 0), distribution={"torch_distributed": {"enabled": True},
                                                             "instance_groups": ["gpu"]})
    assert messages(spec) == ["distribution.instance_groups: instance group 'gpu' has instance_count 0: the "
                              "distribution launches on no host (give the group hosts, or aim the distribution "
                              "at another group)"]


def test_run_and_render_report_the_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(0)})
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    spec = make_spec(tmp_path, files=1, counts=(2, 0),
                     inputs={"train": {"s3_data": "data", "distribution": "ShardedByS3Key"}})
    expected = messages(spec)
    assert len(expected) == 1
    reporter = RecordingReporter()
    result = api.run(spec, engine_name="fake", reporter=reporter)
    assert result.status == "Completed"
    assert reporter.warnings[: len(expected)] == expected
    warned: list[str] = []
    api.render(spec, tmp_path / "rendered", warn=warned.append)
    assert warned == expected


def test_spot_training_without_checkpoints_warns_that_work_restarts_from_zero(tmp_path: Path) -> None:
    spot = {"use_spot_instances": True, "max_wait": 86400}  # at least max_run, the SDK's default 1 day
    [warning] = messages(make_spec(tmp_path, **spot))
    assert warning.startswith("use_spot_instances: managed spot training without checkpoint_s3_uri: an interrupted "
                              "job starts again from zero")
    (tmp_path / "ckpt").mkdir()
    assert messages(make_spec(tmp_path, checkpoint_s3_uri="ckpt", **spot)) == []
    assert messages(make_spec(tmp_path)) == []  # on-demand: nothing to say

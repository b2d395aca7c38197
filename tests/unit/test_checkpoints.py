"""Checkpoints synced while the job runs (emulator/checkpoints.py): one look at a time, no thread, no
engine. A file is copied once it has not changed between two looks, and again when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from emulator.checkpoints import LiveSync, live
from emulator.plan import make_plan
from emulator.spec import JobSpec, validate


def spec_with(tmp_path: Path, checkpoints: bool = True) -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    raw = {"job_name": "ckpt-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
           "instance_type": "ml.c5.xlarge", "instance_count": 2}
    if checkpoints:
        raw["checkpoint_s3_uri"] = "ckpt"
    return validate(raw, base_dir=tmp_path)


def host_folder(plan_dir: Path, host: str) -> Path:
    folder = plan_dir / "hosts" / host / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_settled_file_is_copied_at_the_next_look_and_a_changed_one_again(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    sync = LiveSync(plan)
    mine = host_folder(Path(plan.job_dir), "algo-1")
    (mine / "epoch-1").mkdir()
    (mine / "epoch-1" / "model.pt").write_bytes(b"weights 1")
    sync.scan()  # first look: the file might still be written
    assert not (tmp_path / "ckpt" / "epoch-1").exists()
    sync.scan()  # unchanged since: copied
    assert (tmp_path / "ckpt" / "epoch-1" / "model.pt").read_bytes() == b"weights 1"
    sync.scan()
    assert sync.copies == 1  # not copied again while it stays the same
    (mine / "epoch-1" / "model.pt").write_bytes(b"weights 1, longer")
    sync.scan()
    assert (tmp_path / "ckpt" / "epoch-1" / "model.pt").read_bytes() == b"weights 1"  # still changing
    sync.scan()
    assert (tmp_path / "ckpt" / "epoch-1" / "model.pt").read_bytes() == b"weights 1, longer"


def test_a_file_still_growing_is_not_copied_half_written(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    sync = LiveSync(plan)
    growing = host_folder(Path(plan.job_dir), "algo-2") / "big.ckpt"
    for size in range(1, 5):
        growing.write_bytes(b"x" * size * 1000)
        os.utime(growing, ns=(size * 10**9, size * 10**9))
        sync.scan()
        assert not (tmp_path / "ckpt" / "big.ckpt").exists()


def test_no_link_is_followed(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    (host_folder(Path(plan.job_dir), "algo-1") / "leak").symlink_to(secret)
    sync = LiveSync(plan)
    sync.scan()
    sync.scan()
    assert not (tmp_path / "ckpt" / "leak").exists()


def test_without_a_checkpoint_uri_nothing_runs(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path, checkpoints=False), "ckpt-job")
    with live(plan) as syncs:
        assert syncs == []


def test_tensorboard_files_reach_their_output_path_as_they_settle(tmp_path: Path) -> None:
    """TensorBoardOutputConfig (the SDK's TensorBoardOutputConfig): each host's files under the local
    path (default /opt/ml/output/tensorboard, in the host's folder) are copied while the job runs, under
    `<S3OutputPath>/<job>/tensorboard-output/` as the service puts them (the SDK's
    latest_job_tensorboard_artifacts_path())."""
    from emulator.checkpoints import syncs

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    raw = {"job_name": "tb-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
           "instance_type": "ml.c5.xlarge", "instance_count": 2,
           "tensorboard_output_config": {"s3_output_path": "tb"}}
    plan = make_plan(validate(raw, base_dir=tmp_path), "tb-job")
    [board] = syncs(plan)
    assert (board.folder, board.target) == ("output/tensorboard", tmp_path / "tb" / "tb-job" / "tensorboard-output")
    events = Path(plan.job_dir) / "hosts" / "algo-2" / "output" / "tensorboard" / "events.out.tfevents.1"
    events.parent.mkdir(parents=True)
    events.write_bytes(b"scalars")
    board.scan()
    board.scan()
    assert (board.target / "events.out.tfevents.1").read_bytes() == b"scalars"


def test_every_hosts_files_reach_the_uri(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    sync = LiveSync(plan)
    for host in ("algo-1", "algo-2"):
        (host_folder(Path(plan.job_dir), host) / f"{host}.ckpt").write_text(host)
    sync.scan()
    sync.scan()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["algo-1.ckpt", "algo-2.ckpt"]


def test_a_restored_checkpoint_a_host_never_touched_does_not_overwrite_a_newer_one(tmp_path: Path) -> None:
    # Every host starts with the URI's checkpoints; only rank 0 (algo-1) writes new ones. The
    # service uploads only what changed since the download, so algo-2's stale copy must not win.
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    for host in ("algo-1", "algo-2"):
        (host_folder(Path(plan.job_dir), host) / "state.json").write_text('{"epoch": 2}')  # restored
    sync = LiveSync(plan)
    (host_folder(Path(plan.job_dir), "algo-1") / "state.json").write_text('{"epoch": 5}')
    sync.scan()
    sync.scan()
    assert (tmp_path / "ckpt" / "state.json").read_text() == '{"epoch": 5}'
    (host_folder(Path(plan.job_dir), "algo-1") / "state.json").write_text('{"epoch": 8}')
    assert sync.final() == []  # the end of the job: changed files, settled or not, in host order
    assert (tmp_path / "ckpt" / "state.json").read_text() == '{"epoch": 8}'


def test_the_final_copy_takes_what_the_looks_had_not_settled_yet(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    sync = LiveSync(plan)
    (host_folder(Path(plan.job_dir), "algo-2") / "last.pt").write_bytes(b"written just before the end")
    sync.scan()  # seen once: not settled, not copied
    assert not (tmp_path / "ckpt" / "last.pt").exists()
    sync.final()
    assert (tmp_path / "ckpt" / "last.pt").read_bytes() == b"written just before the end"

"""Checkpoints synced while the job runs (emulator/run/checkpoints.py): one look at a time, no thread, no
engine. A file is copied once it has not changed between two looks, and again when it changes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from emulator.jobspec import JobSpec, validate
from emulator.planning.plan import make_plan
from emulator.run.checkpoints import LiveSync, live, syncs


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


def tensorboard_sync(tmp_path: Path) -> tuple[LiveSync, Path]:
    """A two-host job's one sync, its TensorBoard files', and algo-2's event file (not written yet)."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    raw = {"job_name": "tb-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
           "instance_type": "ml.c5.xlarge", "instance_count": 2,
           "tensorboard_output_config": {"s3_output_path": "tb"}}
    plan = make_plan(validate(raw, base_dir=tmp_path), "tb-job")
    [board] = syncs(plan)
    events = Path(plan.job_dir) / "hosts" / "algo-2" / "output" / "tensorboard" / "events.out.tfevents.1"
    events.parent.mkdir(parents=True)
    return board, events


def test_tensorboard_files_reach_their_output_path_as_they_settle(tmp_path: Path) -> None:
    """TensorBoardOutputConfig (the SDK's TensorBoardOutputConfig): each host's files under the local
    path (default /opt/ml/output/tensorboard, in the host's folder) are copied while the job runs, under
    `<S3OutputPath>/<job>/tensorboard-output/` as the service puts them (the SDK's
    latest_job_tensorboard_artifacts_path())."""
    board, events = tensorboard_sync(tmp_path)
    assert (board.folder, board.target) == ("output/tensorboard", tmp_path / "tb" / "tb-job" / "tensorboard-output")
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


# Deletes (docs/outputs.md, Checkpoints): the service keeps the checkpoint folder in sync with S3, so
# what a host deletes there is deleted at the URI, as far as that host had it.


def restored(tmp_path: Path, plan_dir: Path, files: dict[str, str]) -> None:
    """`files` at the URI and in every host's folder, as staging restores them before the hosts start."""
    for root in (tmp_path / "ckpt", host_folder(plan_dir, "algo-1"), host_folder(plan_dir, "algo-2")):
        for relative, content in files.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(content)


def at_uri(tmp_path: Path) -> list[str]:
    """Every entry under the URI, folders with a slash, sorted."""
    uri = tmp_path / "ckpt"
    return sorted(str(p.relative_to(uri)) + ("/" if p.is_dir() else "") for p in uri.rglob("*"))


def test_a_checkpoint_a_host_deletes_is_deleted_at_the_uri_after_two_looks(tmp_path: Path) -> None:
    # Rank 0 prunes: a restored checkpoint every host had, and one it wrote during the job.
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"epoch-1.pt": "1", "epoch-2.pt": "2"})
    sync = LiveSync(plan)
    mine = host_folder(Path(plan.job_dir), "algo-1")
    (mine / "epoch-3.pt").write_text("3")
    sync.scan()
    sync.scan()
    assert at_uri(tmp_path) == ["epoch-1.pt", "epoch-2.pt", "epoch-3.pt"]
    (mine / "epoch-1.pt").unlink()
    (mine / "epoch-3.pt").unlink()
    sync.scan()  # gone at one look: it may be written again at once
    assert at_uri(tmp_path) == ["epoch-1.pt", "epoch-2.pt", "epoch-3.pt"]
    sync.scan()
    assert at_uri(tmp_path) == ["epoch-2.pt"]
    assert sync.deleted == 2
    # algo-2 still holds its restored epoch-1.pt, untouched: it does not go back.
    sync.scan()
    assert sync.final() == []
    assert at_uri(tmp_path) == ["epoch-2.pt"]


def test_a_checkpoint_deleted_and_written_again_between_two_looks_stays(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"latest.pt": "old"})
    sync = LiveSync(plan)
    latest = host_folder(Path(plan.job_dir), "algo-1") / "latest.pt"
    latest.unlink()
    sync.scan()
    latest.write_text("new")
    sync.scan()
    sync.scan()
    assert (tmp_path / "ckpt" / "latest.pt").read_text() == "new"
    assert sync.deleted == 0


def test_a_deleted_folder_is_deleted_at_the_uri_with_the_folders_it_leaves_empty(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"run/step-1/model.pt": "m", "run/step-1/optim/state.pt": "o",
                                            "run/step-2/model.pt": "m2"})
    sync = LiveSync(plan)
    shutil.rmtree(host_folder(Path(plan.job_dir), "algo-2") / "run" / "step-1")
    sync.scan()
    sync.scan()
    assert at_uri(tmp_path) == ["run/", "run/step-2/", "run/step-2/model.pt"]
    shutil.rmtree(host_folder(Path(plan.job_dir), "algo-2") / "run")
    sync.scan()
    sync.scan()
    assert at_uri(tmp_path) == []  # S3 has no empty folders; the URI's own folder stays
    assert (tmp_path / "ckpt").is_dir()


def test_a_file_another_host_wrote_is_not_deleted_by_a_host_that_never_had_it(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    sync = LiveSync(plan)
    (host_folder(Path(plan.job_dir), "algo-2") / "theirs.pt").write_text("algo-2's")
    host_folder(Path(plan.job_dir), "algo-1")  # algo-1 has its folder, never that file
    for _ in range(3):
        sync.scan()
    sync.final()
    assert at_uri(tmp_path) == ["theirs.pt"]
    assert sync.deleted == 0


def test_a_file_replaced_by_a_folder_of_its_name_is_deleted_and_the_folder_copied(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"best": "a file"})
    sync = LiveSync(plan)
    mine = host_folder(Path(plan.job_dir), "algo-1")
    (mine / "best").unlink()
    (mine / "best").mkdir()
    (mine / "best" / "model.pt").write_text("in a folder")
    for _ in range(3):
        sync.scan()
    assert sync.final() == []
    assert at_uri(tmp_path) == ["best/", "best/model.pt"]


def test_the_final_copy_applies_deletes_at_once(tmp_path: Path) -> None:
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"a.pt": "a", "sub/b.pt": "b"})
    sync = LiveSync(plan)
    (host_folder(Path(plan.job_dir), "algo-1") / "a.pt").unlink()
    shutil.rmtree(host_folder(Path(plan.job_dir), "algo-2") / "sub")
    assert sync.final() == []  # no look at all: the end of the job (or of an attempt) deletes
    assert at_uri(tmp_path) == []


def test_a_link_in_the_hosts_folder_deletes_nothing_and_nothing_outside_the_uri(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "run").mkdir(parents=True)
    (outside / "run" / "model.pt").write_text("not yours")
    (outside / "gone.pt").write_text("not yours")
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"run/model.pt": "m", "latest.pt": "l", "gone.pt": "g"})
    sync = LiveSync(plan)
    mine = host_folder(Path(plan.job_dir), "algo-1")
    # A folder swapped for a link, and a file swapped for one: what is behind cannot be told.
    shutil.rmtree(mine / "run")
    (mine / "run").symlink_to(outside / "run")
    (mine / "latest.pt").unlink()
    (mine / "latest.pt").symlink_to(outside / "gone.pt")
    # At the URI, a folder the user made a link to elsewhere: a delete does not go through it.
    (mine / "gone.pt").unlink()
    (tmp_path / "ckpt" / "gone.pt").unlink()
    (tmp_path / "ckpt" / "gone.pt").symlink_to(outside / "gone.pt")
    for _ in range(3):
        sync.scan()
    sync.final()
    assert at_uri(tmp_path) == ["gone.pt", "latest.pt", "run/", "run/model.pt"]
    assert (tmp_path / "ckpt" / "gone.pt").is_symlink()
    assert (outside / "run" / "model.pt").read_text() == (outside / "gone.pt").read_text() == "not yours"


def test_a_link_on_the_way_at_the_uri_is_not_followed_by_a_delete(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt").write_text("not yours")
    plan = make_plan(spec_with(tmp_path), "ckpt-job")
    restored(tmp_path, Path(plan.job_dir), {"run/model.pt": "m"})
    shutil.rmtree(tmp_path / "ckpt" / "run")
    (tmp_path / "ckpt" / "run").symlink_to(outside)
    sync = LiveSync(plan)
    shutil.rmtree(host_folder(Path(plan.job_dir), "algo-1") / "run")
    sync.final()
    assert (outside / "model.pt").read_text() == "not yours"
    assert (tmp_path / "ckpt" / "run").is_symlink()


def test_tensorboard_files_stay_at_their_output_path_when_a_host_deletes_them(tmp_path: Path) -> None:
    # Upload-only, as the service's TensorBoard output is (emulator/run/checkpoints.py, LiveSync).
    board, events = tensorboard_sync(tmp_path)
    events.write_bytes(b"scalars")
    board.scan()
    board.scan()
    events.unlink()
    board.scan()
    board.scan()
    board.final()
    assert board.target is not None
    assert (board.target / "events.out.tfevents.1").read_bytes() == b"scalars"

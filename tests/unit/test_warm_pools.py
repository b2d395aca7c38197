"""Warm pools (emulator/run/warm_pools.py): a job with a keep-alive keeps its hosts' persistent cache for
a later matching job, with the WarmPoolStatus life the service documents
(https://docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import JobSpec
from emulator.result import Status
from emulator.run import warm_pools
from emulator.state import job_records

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
HOSTS = ["algo-1", "algo-2", "algo-3"]


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own job records: pools are found across every recorded job."""
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def spec(load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any]) -> JobSpec:
    return load({**valid_raw, "keep_alive_period_in_seconds": 600})


def begin(spec: JobSpec, job: str, tmp_path: Path, at: datetime) -> tuple[Path, warm_pools.Pool | None]:
    """A job starts as the runner starts it: its record first, then its pool."""
    job_dir = tmp_path / "out" / job
    job_dir.mkdir(parents=True)
    job_records.record(job, job_dir, Status.IN_PROGRESS)
    return job_dir, warm_pools.start(spec, job, job_dir, HOSTS, now=at)


def test_a_job_with_a_keep_alive_has_a_pool_in_use_then_available(spec: JobSpec, tmp_path: Path) -> None:
    job_dir, reused = begin(spec, "first", tmp_path, T0)
    assert reused is None
    assert sorted(p.name for p in (job_dir / "warm-pool").iterdir()) == HOSTS
    assert warm_pools.status("first", now=T0) == {"Status": "InUse", "ResourceRetainedBillableTimeInSeconds": 0}
    warm_pools.retain("first", now=T0 + timedelta(seconds=30))
    later = T0 + timedelta(seconds=130)
    assert warm_pools.status("first", now=later) == {"Status": "Available",
                                                     "ResourceRetainedBillableTimeInSeconds": 100}
    assert [p.job for p in warm_pools.available(now=later)] == ["first"]


def test_a_job_without_a_keep_alive_neither_takes_nor_makes_a_pool(spec: JobSpec, tmp_path: Path) -> None:
    begin(spec, "first", tmp_path, T0)
    warm_pools.retain("first", now=T0)
    job_dir, reused = begin(replace(spec, keep_alive_period_in_seconds=0), "plain", tmp_path, T0)
    assert reused is None and not (job_dir / "warm-pool").exists()
    assert warm_pools.status("plain", now=T0) is None
    assert warm_pools.status("first", now=T0)["Status"] == "Available"  # type: ignore[index]


def test_a_matching_job_reuses_the_pool_and_its_cache(spec: JobSpec, tmp_path: Path) -> None:
    first_dir, _ = begin(spec, "first", tmp_path, T0)
    (first_dir / "warm-pool" / "algo-2" / "weights.bin").write_bytes(b"cached")
    warm_pools.retain("first", now=T0 + timedelta(seconds=10))

    second_dir, reused = begin(spec, "second", tmp_path, T0 + timedelta(seconds=70))
    assert reused is not None and reused.job == "first"
    # The cache moved with the pool: the second job's algo-2 finds what the first one's left.
    assert (second_dir / "warm-pool" / "algo-2" / "weights.bin").read_bytes() == b"cached"
    assert not (first_dir / "warm-pool").exists()
    at = T0 + timedelta(seconds=500)
    assert warm_pools.status("first", now=at) == {"Status": "Reused", "ReusedByJob": "second",
                                                  "ResourceRetainedBillableTimeInSeconds": 60}
    assert warm_pools.status("second", now=at)["Status"] == "InUse"  # type: ignore[index]
    # Reused once: a third job finds nothing to take while the second runs.
    _, third = begin(spec, "third", tmp_path, at)
    assert third is None


@pytest.mark.parametrize("change", [
    {"instance_count": 3},  # another instance count in a group
    {"instance_type": "ml.m5.xlarge"},  # another instance type
])
def test_a_job_with_another_cluster_does_not_match(
    spec: JobSpec, tmp_path: Path, change: dict[str, Any],
) -> None:
    begin(spec, "first", tmp_path, T0)
    warm_pools.retain("first", now=T0)
    groups = (replace(spec.instance_groups[0], **change), *spec.instance_groups[1:])
    _, reused = begin(replace(spec, instance_groups=groups), "other", tmp_path, T0 + timedelta(seconds=5))
    assert reused is None
    assert warm_pools.status("first", now=T0 + timedelta(seconds=5))["Status"] == "Available"  # type: ignore[index]


def test_another_role_or_volume_in_the_request_does_not_match(spec: JobSpec, tmp_path: Path) -> None:
    with_role = replace(spec, pool_match=(("RoleArn", '"arn:aws:iam::111111111111:role/a"'),))
    begin(with_role, "first", tmp_path, T0)
    warm_pools.retain("first", now=T0)
    other = replace(spec, pool_match=(("RoleArn", '"arn:aws:iam::111111111111:role/b"'),))
    assert begin(other, "other", tmp_path, T0)[1] is None
    assert begin(with_role, "same", tmp_path, T0)[1] is not None


def test_a_pool_past_its_keep_alive_is_terminated_and_its_folders_removed(spec: JobSpec, tmp_path: Path) -> None:
    first_dir, _ = begin(spec, "first", tmp_path, T0)
    warm_pools.retain("first", now=T0)
    late = T0 + timedelta(seconds=601)
    _, reused = begin(spec, "late", tmp_path, late)
    assert reused is None
    assert not (first_dir / "warm-pool").exists()
    # Billed for the keep-alive it was Available, not for the time until someone looked.
    assert warm_pools.status("first", now=late + timedelta(hours=1)) == {
        "Status": "Terminated", "ResourceRetainedBillableTimeInSeconds": 600}


def test_update_to_zero_ends_an_available_pool_and_a_new_keep_alive_counts_from_its_start(
    spec: JobSpec, tmp_path: Path,
) -> None:
    begin(spec, "first", tmp_path, T0)
    warm_pools.retain("first", now=T0)
    warm_pools.update("first", 900, now=T0 + timedelta(seconds=10))
    assert warm_pools.status("first", now=T0 + timedelta(seconds=700))["Status"] == "Available"  # type: ignore[index]
    ended = warm_pools.update("first", 0, now=T0 + timedelta(seconds=720))
    assert ended.status == "Terminated"
    assert warm_pools.status("first", now=T0 + timedelta(seconds=800)) == {
        "Status": "Terminated", "ResourceRetainedBillableTimeInSeconds": 720}
    with pytest.raises(LookupError, match="is Terminated"):
        warm_pools.update("first", 60, now=T0 + timedelta(seconds=800))
    with pytest.raises(LookupError, match="no warm pool"):
        warm_pools.update("nobody", 60)


def test_a_job_that_the_service_keeps_no_pool_for_terminates_it_at_once(spec: JobSpec, tmp_path: Path) -> None:
    job_dir, _ = begin(spec, "broken", tmp_path, T0)
    warm_pools.retain("broken", now=T0, kept=False)
    assert warm_pools.status("broken", now=T0)["Status"] == "Terminated"  # type: ignore[index]
    assert not (job_dir / "warm-pool").exists()


def test_clean_ends_the_available_pools_of_one_job_or_all(spec: JobSpec, tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        begin(spec, name, tmp_path, T0)
    for name in ("a", "b", "c"):  # all three ran at once: none could take another's pool
        warm_pools.retain(name, now=T0)
    assert sorted(p.job for p in warm_pools.available(now=T0)) == ["a", "b", "c"]
    assert [p.job for p in warm_pools.terminate("b", now=T0)] == ["b"]
    assert sorted(p.job for p in warm_pools.terminate(now=T0)) == ["a", "c"]
    assert warm_pools.available(now=T0) == []

"""Warm pools: what a job with `KeepAlivePeriodInSeconds` keeps after it ends, and the later job that
reuses it (docs/service-features.md, Warm pools;
https://docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html).

On the service a warm pool is the job's instances, kept running for the keep-alive period. A later
job that matches them runs on them and finds each instance's persistent cache,
`/opt/ml/sagemaker/warmpoolcache`, as the last job left it. Here no container outlives its job: a
pool is each host's cache folder (`<job folder>/warm-pool/algo-N`, mounted at that path) and the
pool's state in the job's record. A job that reuses the pool gets new containers and the pool's
folders, moved into its own job folder.

A pool's life, in its job's record (`WarmPool`):

- `InUse` while its job runs; `Available` from the job's end, for `KeepAlivePeriodInSeconds`.
- `Reused` once a matching job took it (`ReusedByJob`); that job's own pool is then `InUse`.
- `Terminated` when the keep-alive runs out, UpdateTrainingJob sets it to 0, or `hetero-emu clean`
  removes it. The folders go with it.

`ResourceRetainedBillableTimeInSeconds` is how long the pool was `Available` (DescribeTrainingJob's
WarmPoolStatus). Expiry is checked whenever pools are looked at (a claim, `ps` and `clean` look at
every pool, describe at its own job's): nothing has to run in the background for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from emulator.jobspec import JobSpec
from emulator.planning.plan import WARM_POOL_CACHE, WARM_POOL_FOLDER
from emulator.state import blocking, job_records

FIELD = "WarmPool"  # the pool's state in its job's record
FOLDER = WARM_POOL_FOLDER  # under the job folder: one cache folder per host
CACHE_TARGET = WARM_POOL_CACHE  # where each host finds its folder

IN_USE, AVAILABLE, REUSED, TERMINATED = "InUse", "Available", "Reused", "Terminated"


def match_key(spec: JobSpec) -> str:
    """What a later job must have the same of to reuse the pool: the cluster (each group's instance type
    and count) and the request's resource, role and network fields (`spec.pool_match`)."""
    groups = [[g.instance_group_name, g.instance_type, g.instance_count] for g in spec.instance_groups]
    return json.dumps({"groups": groups, "isolation": spec.enable_network_isolation,
                       **dict(spec.pool_match)}, sort_keys=True)


@dataclass(frozen=True)
class Pool:
    """A job's warm pool as its record holds it."""

    job: str
    job_dir: Path
    key: str
    keep_alive: int
    status: str
    since: datetime | None = None  # became Available (its job ended)
    ended: datetime | None = None  # stopped being Available (reused or terminated)
    reused_by: str | None = None

    @property
    def expires(self) -> datetime | None:
        return None if self.since is None else self.since + timedelta(seconds=self.keep_alive)

    def now_status(self, now: datetime) -> str:
        """The status at `now`: an Available pool past its keep-alive is Terminated."""
        if self.status == AVAILABLE and self.expires is not None and now >= self.expires:
            return TERMINATED
        return self.status

    def retained_seconds(self, now: datetime) -> int:
        """ResourceRetainedBillableTimeInSeconds: how long it has been (or was) Available."""
        if self.since is None:
            return 0
        end = self.ended or now
        if self.expires is not None:
            end = min(end, self.expires)
        return max(0, int((end - self.since).total_seconds()))

    def describe(self, now: datetime) -> dict[str, Any]:
        """DescribeTrainingJob's WarmPoolStatus."""
        doc: dict[str, Any] = {"Status": self.now_status(now),
                               "ResourceRetainedBillableTimeInSeconds": self.retained_seconds(now)}
        if self.reused_by:
            doc["ReusedByJob"] = self.reused_by
        return doc

    def cache(self) -> Path:
        return self.job_dir / FOLDER


def _text(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _pool(record: job_records.JobRecord) -> Pool | None:
    doc = record.doc.get(FIELD)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("KeepAlive"), int):
        return None
    return Pool(record.job_name, record.job_dir, str(doc.get("Key", "")), doc["KeepAlive"], str(doc.get("Status")),
                _time(doc.get("Since")), _time(doc.get("Ended")), doc.get("ReusedByJob"))


def _store(pool: Pool) -> None:
    record = job_records.find(pool.job)
    if record is None:
        return
    job_records.record(pool.job, record.job_dir, record.status, **{FIELD: {
        "Key": pool.key, "KeepAlive": pool.keep_alive, "Status": pool.status, "Since": _text(pool.since),
        "Ended": _text(pool.ended), "ReusedByJob": pool.reused_by}})


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One process at a time changes pools: two jobs starting together never take one pool twice."""
    path = job_records.state_dir() / "warm-pools.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def find(job: str) -> Pool | None:
    record = job_records.find(job)
    return None if record is None else _pool(record)


def _terminate(pool: Pool, when: datetime) -> Pool:
    """The pool ends: its folders go (the emulator made them; a link in them is not followed)."""
    shutil.rmtree(pool.cache(), ignore_errors=True)
    ended = pool.expires if pool.expires is not None and pool.expires < when else when
    done = Pool(pool.job, pool.job_dir, pool.key, pool.keep_alive, TERMINATED, pool.since, ended, pool.reused_by)
    _store(done)
    return done


def expire(now: datetime | None = None) -> list[Pool]:
    """Terminate every Available pool past its keep-alive; returns the pools still Available."""
    now = now or datetime.now(timezone.utc)
    left = []
    with _locked():
        for record in job_records.all_jobs():
            pool = _pool(record)
            if pool is None or pool.status != AVAILABLE:
                continue
            if pool.now_status(now) == TERMINATED:
                _terminate(pool, now)
            else:
                left.append(pool)
    return left


def start(spec: JobSpec, job: str, job_dir: Path, hosts: list[str], now: datetime | None = None) -> Pool | None:
    """A job with a keep-alive starts: take the Available pool it matches (the oldest), moving its
    cache folders into this job's folder, or start a new pool; either way this job's pool is InUse.
    Returns the pool reused, or None. A job without a keep-alive neither takes nor makes a pool."""
    if spec.keep_alive_period_in_seconds <= 0:
        return None
    now = now or datetime.now(timezone.utc)
    key = match_key(spec)
    taken: Pool | None = None
    with _locked():
        candidates = []
        for record in job_records.all_jobs():
            pool = _pool(record)
            if pool is None or pool.job == job or pool.key != key or pool.status != AVAILABLE:
                continue
            if pool.now_status(now) == TERMINATED:
                _terminate(pool, now)
            else:
                candidates.append(pool)
        target = job_dir / FOLDER
        if candidates:
            taken = min(candidates, key=lambda p: p.since or now)
            if taken.cache().is_dir() and not target.exists():
                shutil.move(str(taken.cache()), str(target))
            _store(Pool(taken.job, taken.job_dir, taken.key, taken.keep_alive, REUSED, taken.since, now, job))
        for host in hosts:
            (target / host).mkdir(parents=True, exist_ok=True)
        _store(Pool(job, job_dir, key, spec.keep_alive_period_in_seconds, IN_USE))
    return taken


def retain(job: str, now: datetime | None = None, *, kept: bool = True) -> Pool | None:
    """The job ended: its pool is Available for its keep-alive (`kept`), or Terminated at once (a job
    the service keeps no pool for)."""
    now = now or datetime.now(timezone.utc)
    with _locked():
        pool = find(job)
        if pool is None or pool.status != IN_USE:
            return pool
        if not kept or pool.keep_alive == 0:
            return _terminate(Pool(pool.job, pool.job_dir, pool.key, pool.keep_alive, IN_USE, now), now)
        ready = Pool(pool.job, pool.job_dir, pool.key, pool.keep_alive, AVAILABLE, now)
        _store(ready)
        return ready


def update(job: str, keep_alive: int, now: datetime | None = None) -> Pool:
    """UpdateTrainingJob's KeepAlivePeriodInSeconds: a new keep-alive for an Available pool, counted
    from when it became Available; 0 terminates it. LookupError for a job with no pool that can be
    changed (none, or no longer Available), naming its status."""
    now = now or datetime.now(timezone.utc)
    with _locked():
        pool = find(job)
        status = pool.now_status(now) if pool is not None else None
        if pool is None or status not in (AVAILABLE, IN_USE):
            raise LookupError(f"training job {job} has no warm pool to update" if pool is None else
                              f"the warm pool of training job {job} is {status}: only an Available or InUse pool "
                              "can be updated")
        if keep_alive == 0 and pool.status == AVAILABLE:
            return _terminate(pool, now)  # ends now: retained until now, under the keep-alive it had
        changed = Pool(pool.job, pool.job_dir, pool.key, keep_alive, pool.status, pool.since)
        _store(changed)
        return changed


def terminate(job: str | None = None, now: datetime | None = None) -> list[Pool]:
    """`hetero-emu clean`: end the Available pools (of one job, or all); returns those ended."""
    now = now or datetime.now(timezone.utc)
    ended = []
    with _locked():
        for record in job_records.all_jobs():
            pool = _pool(record)
            if pool is not None and pool.status == AVAILABLE and job in (None, pool.job):
                ended.append(_terminate(pool, now))
    return ended


def status(job: str, now: datetime | None = None, *,
           record: job_records.JobRecord | None = None) -> dict[str, Any] | None:
    """DescribeTrainingJob's WarmPoolStatus of a job as it is now (None: the job asked for no pool),
    its pool terminated first if it is past its keep-alive. Only this job's record is read: a
    ListTrainingJobs describes every job, and looking at every pool for each would read every
    record once per job. `record`: the job's record as the caller has just read it."""
    now = now or datetime.now(timezone.utc)
    pool = _pool(record) if record is not None and record.job_name == job else find(job)
    if pool is not None and pool.status == AVAILABLE and pool.now_status(now) == TERMINATED:
        blocking.may_block()  # the lock, and the pool's folders to remove
        with _locked():
            pool = find(job)  # again under the lock: another process may have ended or taken it
            if pool is not None and pool.status == AVAILABLE and pool.now_status(now) == TERMINATED:
                pool = _terminate(pool, now)
    return None if pool is None else pool.describe(now)


def available(now: datetime | None = None) -> list[Pool]:
    """The pools a matching job would reuse now (expired ones terminated first), newest first."""
    return expire(now)


def folder_size(pool: Pool) -> int:
    """Bytes in the pool's cache folders (links not followed)."""
    total = 0
    for top, _, files in os.walk(pool.cache()):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total

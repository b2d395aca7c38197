"""CloudWatch Logs answered locally, from the jobs' own log files: what a training job's hosts print
is in `<job folder>/logs/algo-N.log`, and here it is read as SageMaker's log streams.

On the service each host's output goes to the log group `/aws/sagemaker/TrainingJobs`, one stream
per host named `<job>/algo-N-<epoch seconds>`. The SDKs read a job's logs that way: v3's
`TrainingJob.wait(logs=True)` (which `ModelTrainer.train` calls) lists the streams with the prefix
`<job>/` until there is one per host, then pages through each with GetLogEvents; boto3 code and
SDK v2's `sagemaker.logs` do the same. Here the streams are the job's log files (a job is found by
name in the local record, `emulator.state.job_records`, whichever way it was started), each line an event.

What differs from the service, and why:
- The files keep no time per line, so every event of a stream has the stream's creation time (the
  job's CreationTime) as its timestamp: stable from one read to the next, which the SDK v2's
  position keeping (a timestamp and the count of events seen at it) needs. `ingestionTime` is when
  the file last grew.
- A stream exists from the moment the job's hosts start (the files are made together), not from a
  host's first line: a host that prints nothing still has its (empty) stream, so a reader waiting
  for one stream per host is not kept waiting.
- While the job runs, a host's unfinished last line is held back; it is an event once the job has
  ended. Empty lines are no events (CloudWatch takes none).

Paging tokens are byte offsets into the file (`f/<offset>` forward, `b/<offset>` backward): the
files only grow, so a token stays valid, and a forward token at the end is given back unchanged,
the way CloudWatch tells a reader it has seen everything for now.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.aws.sts import ACCOUNT
from emulator.aws.stub import ApiError, Operation, Service
from emulator.planning import contract
from emulator.result import Status
from emulator.state import blocking, job_records

GROUP = "/aws/sagemaker/TrainingJobs"
MAX_EVENTS = 10_000  # GetLogEvents' largest (and default) page
MAX_PAGE_BYTES = 1 << 20  # GetLogEvents' largest response
EVENT_OVERHEAD = 26  # bytes CloudWatch counts per event on top of its message
MAX_STREAMS = 50  # DescribeLogStreams' largest (and default) page
STREAM_NAME = re.compile(r"(?P<job>[^/]+)/(?P<host>algo-\d+)-(?P<epoch>\d+)")
TOKEN = re.compile(r"(?P<direction>[fb])/(?P<offset>\d{1,19})")
NO_GROUP = "The specified log group does not exist."
NO_STREAM = "The specified log stream does not exist."


class Logs(Service):
    name = "logs"
    quick = frozenset({"GetLogEvents", "DescribeLogStreams"})

    def __init__(self, *, region: str) -> None:
        self.region = region

    def operations(self) -> Mapping[str, Operation]:
        return {"DescribeLogGroups": self.describe_log_groups, "DescribeLogStreams": self.describe_log_streams,
                "GetLogEvents": self.get_log_events}

    def describe_log_groups(self, params: dict[str, Any]) -> dict[str, Any]:
        """The training jobs' group, once a job has been run."""
        prefix = str(params.get("logGroupNamePrefix") or "")
        if not GROUP.startswith(prefix) or not job_records.all_jobs():
            return {"logGroups": []}
        created = min(_millis(_created(r)) for r in job_records.all_jobs())
        return {"logGroups": [{"logGroupName": GROUP, "creationTime": created, "storedBytes": 0,
                               "arn": f"{self.group_arn()}:*", "logGroupArn": self.group_arn()}]}

    def describe_log_streams(self, params: dict[str, Any]) -> dict[str, Any]:
        self.group(params)
        prefix = params.get("logStreamNamePrefix")
        order = params.get("orderBy") or "LogStreamName"
        if prefix and order == "LastEventTime":
            raise ApiError("InvalidParameterException", "Cannot order by LastEventTime with a logStreamNamePrefix.")
        streams = [s for record in _jobs_for(str(prefix or "")) for s in self.streams(record)
                   if s["logStreamName"].startswith(str(prefix or ""))]
        if order == "LastEventTime":
            streams.sort(key=lambda s: (s["lastEventTimestamp"], s["logStreamName"]))
        else:
            streams.sort(key=lambda s: _name_key(s["logStreamName"]))
        if params.get("descending"):
            streams.reverse()
        start = _index_token(params.get("nextToken"))
        size = min(int(params.get("limit") or MAX_STREAMS), MAX_STREAMS)
        answer: dict[str, Any] = {"logStreams": streams[start:start + size]}
        if start + size < len(streams):
            answer["nextToken"] = str(start + size)
        return answer

    def get_log_events(self, params: dict[str, Any]) -> dict[str, Any]:
        self.group(params)
        name = str(params.get("logStreamName") or "")
        record, path = self.stream_file(name)
        created = _millis(_created(record))
        size = _size(path)
        limit = min(int(params.get("limit") or MAX_EVENTS), MAX_EVENTS)
        token = params.get("nextToken")
        if token is not None:
            direction, offset = _offset_token(token, size)
        elif params.get("startFromHead"):
            direction, offset = "f", 0
        else:
            direction, offset = "b", size  # the API's default: the newest events
        ended = record.status != Status.IN_PROGRESS
        if min(size - offset if direction == "f" else offset, MAX_PAGE_BYTES) > blocking.QUICK_BYTES:
            blocking.may_block()  # a page this large takes a while to read and write
        lines, first, after = _page(path, direction, offset, limit, ended)
        ingested = _millis_of(os.stat(path).st_mtime) if os.path.exists(path) else created
        start, end = params.get("startTime"), params.get("endTime")
        in_window = (start is None or created >= int(start)) and (end is None or created < int(end))
        events = [{"timestamp": created, "message": line, "ingestionTime": ingested}
                  for line in lines] if in_window else []
        return {"events": events, "nextForwardToken": f"f/{after}", "nextBackwardToken": f"b/{first}"}

    # ----------------------------------------------------------------------------------------------

    def group(self, params: Mapping[str, Any]) -> None:
        given = params.get("logGroupName") or params.get("logGroupIdentifier")
        if given not in (GROUP, self.group_arn()):
            raise ApiError("ResourceNotFoundException", NO_GROUP)

    def group_arn(self) -> str:
        return f"arn:aws:logs:{self.region}:{ACCOUNT}:log-group:{GROUP}"

    def streams(self, record: job_records.JobRecord) -> list[dict[str, Any]]:
        created = _created(record)
        out = []
        for host, path in _host_files(record):
            name = stream_name(record.job_name, host, created)
            try:
                changed = _millis_of(os.stat(path).st_mtime)
            except OSError:
                continue
            out.append({"logStreamName": name, "creationTime": _millis(created), "firstEventTimestamp":
                        _millis(created), "lastEventTimestamp": _millis(created), "lastIngestionTime": changed,
                        "arn": f"{self.group_arn()}:log-stream:{name}", "storedBytes": 0})
        return out

    def stream_file(self, name: str) -> tuple[job_records.JobRecord, Path]:
        """The job and the log file a stream name stands for."""
        match = STREAM_NAME.fullmatch(name)
        record = job_records.find(match["job"]) if match else None
        if match is None or record is None:
            raise ApiError("ResourceNotFoundException", NO_STREAM)
        path = record.job_dir / "logs" / f"{match['host']}.log"
        if name != stream_name(record.job_name, match["host"], _created(record)) or not path.is_file():
            raise ApiError("ResourceNotFoundException", NO_STREAM)
        return record, path


def stream_name(job: str, host: str, created: datetime) -> str:
    """`<job>/algo-N-<epoch seconds>`, as SageMaker names a host's stream."""
    return f"{job}/{host}-{int(created.timestamp())}"


def _jobs_for(prefix: str) -> list[job_records.JobRecord]:
    """The jobs whose streams can start with `prefix`: one job when it names one (`<job>/...`)."""
    if "/" in prefix:
        record = job_records.find(prefix.split("/", 1)[0])
        return [record] if record is not None else []
    return [r for r in job_records.all_jobs() if r.job_name.startswith(prefix)]


def _host_files(record: job_records.JobRecord) -> list[tuple[str, Path]]:
    folder = record.job_dir / "logs"
    try:
        names = [n[:-4] for n in os.listdir(folder) if re.fullmatch(r"algo-\d+\.log", n)]
    except OSError:
        return []
    return [(host, folder / f"{host}.log") for host in sorted(names, key=contract.host_sort_key)]


def _created(record: job_records.JobRecord) -> datetime:
    text = record.creation_time
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return datetime.fromtimestamp(0, timezone.utc)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _name_key(name: str) -> tuple[str, tuple[str, int]]:
    """Streams of a job in host order (algo-2 before algo-10), jobs by name."""
    job, _, rest = name.partition("/")
    return job, contract.host_sort_key(rest.rsplit("-", 1)[0])


def _millis(stamp: datetime) -> int:
    return int(stamp.timestamp() * 1000)


def _millis_of(seconds: float) -> int:
    return int(seconds * 1000)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _index_token(token: object) -> int:
    if token is None:
        return 0
    # The index this service gave: ASCII digits only (str.isdigit takes other scripts' digits too).
    if isinstance(token, str) and token.isascii() and token.isdigit():
        return int(token)
    raise ApiError("InvalidParameterException", "The specified nextToken is invalid.")


def _offset_token(token: object, size: int) -> tuple[str, int]:
    match = TOKEN.fullmatch(token) if isinstance(token, str) else None
    if match is None or int(match["offset"]) > size:
        raise ApiError("InvalidParameterException", "The specified nextToken is invalid.")
    return match["direction"], int(match["offset"])


# The pages read, kept while their file stays as it was: the SDKs read a finished job's stream page by
# page, and one still running again and again from the same token, which the file answers the same way
# until it grows. A page is keyed on the file's identity (`job_records.identity`: inode, size, mtime)
# and the request; a file that grew or was rewritten has another key, so it is read again: never a
# stale page. Its lines are a
# tuple: every answer shares them.
_PAGES: dict[tuple[Any, ...], tuple[tuple[str, ...], int, int]] = {}
_PAGES_KEPT = 64  # pages (at most 1 MiB of text each); more are read again, after the cache is emptied


def _page(path: Path, direction: str, offset: int, limit: int, ended: bool) -> tuple[tuple[str, ...], int, int]:
    """`_forward` or `_backward`'s page, from `_PAGES` while the file is the same."""
    try:
        known = job_records.identity(os.stat(path))
    except OSError:
        known = None
    key = (str(path), known, direction, offset, limit, ended) if known else None
    cached = _PAGES.get(key) if key else None
    if cached is not None:
        return cached
    # Read after the stat: a file that grew in between is kept under the old key, which the next stat
    # no longer matches (the files only grow).
    lines, first, after = (_forward if direction == "f" else _backward)(path, offset, limit, ended)
    page = (tuple(lines), first, after)
    if key:
        if len(_PAGES) >= _PAGES_KEPT:
            _PAGES.clear()
        _PAGES[key] = page
    return page


def _lines(data: bytes, base: int) -> Iterator[tuple[int, int, str]]:
    """(start offset, end offset, message) of each newline-ended line in `data`, which starts at
    `base` in the file; empty lines are skipped."""
    position = 0
    while (newline := data.find(b"\n", position)) >= 0:
        text = data[position:newline].rstrip(b"\r")
        if text:
            yield base + position, base + newline + 1, text.decode("utf-8", errors="replace")
        position = newline + 1


def _forward(path: Path, offset: int, limit: int, ended: bool) -> tuple[list[str], int, int]:
    """Up to `limit` events from `offset` on: (messages, offset of the first, offset after the last)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(MAX_PAGE_BYTES)
        at_end = not f.read(1)
    read = len(data)
    if ended and at_end and data and not data.endswith(b"\n"):
        data += b"\n"  # the job is over: its unfinished last line is a line
    elif read == MAX_PAGE_BYTES and b"\n" not in data:
        data += b"\n"  # a line longer than a page is cut into page-sized events
    out: list[str] = []
    first, after, used = offset, offset, 0
    for start, end, message in _lines(data, offset):
        used += len(message.encode()) + EVENT_OVERHEAD
        if out and (len(out) == limit or used > MAX_PAGE_BYTES):
            break
        if not out:
            first = start
        out.append(message)
        after = end
    else:
        # Every line read is taken: the next read starts after the last newline (past empty lines too).
        after = offset + data.rfind(b"\n") + 1
    return out, first, min(after, offset + read)


def _backward(path: Path, offset: int, limit: int, ended: bool) -> tuple[list[str], int, int]:
    """Up to `limit` events ending at `offset`: (messages, offset of the first, offset after the last)."""
    base = max(0, offset - MAX_PAGE_BYTES)
    with open(path, "rb") as f:
        f.seek(max(0, base - 1))
        inside_line = base > 0 and f.read(1) != b"\n"
        data = f.read(offset - base)
    if not data.endswith(b"\n"):
        if ended and offset == _size(path):
            data += b"\n"  # the job is over: its unfinished last line is a line
        else:
            data = data[:data.rfind(b"\n") + 1]  # an unfinished line is no event yet
    found = list(_lines(data, base))
    if inside_line and found and found[0][0] == base:
        found = found[1:]  # the page began inside a line: it is the page before's
    found = found[-limit:]
    if not found:
        return [], offset, offset
    return [m for _, _, m in found], found[0][0], min(found[-1][1], offset)

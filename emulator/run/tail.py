"""Follow a job's host log files as they grow (`logs/algo-N.log`), line by line: what the SDK
session's `logs_for_job` prints while a job runs, since the job's driver is another process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from emulator.planning import contract

# One read per host per poll; a host writing faster is read on the next poll.
CHUNK = 1 << 20


class LogTail:
    """New complete lines of each `algo-N.log` under `log_dir`, in host order, on each `poll()`;
    `poll(final=True)` also gives each file's unfinished last line."""

    def __init__(self, log_dir: Path, group_of: Callable[[str], str] = lambda host: "?") -> None:
        self.log_dir = log_dir
        self.group_of = group_of
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}

    def hosts(self) -> list[str]:
        found = [p.stem for p in self.log_dir.glob("algo-*.log")] if self.log_dir.is_dir() else []
        return sorted(found, key=contract.host_sort_key)

    def poll(self, final: bool = False) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for host in self.hosts():
            data = self._read(host)
            while final and (more := self._read(host)):  # the end of the job: each file to its end
                data += more
            text = self.partial.pop(host, b"") + data
            lines = text.split(b"\n")
            rest = lines.pop()
            if rest and not final:
                self.partial[host] = rest
            elif rest:
                lines.append(rest)
            group = self.group_of(host)
            out.extend((host, group, line.decode(errors="replace").rstrip("\r")) for line in lines)
        return out

    def _read(self, host: str) -> bytes:
        try:
            with open(self.log_dir / f"{host}.log", "rb") as f:
                f.seek(self.offsets.get(host, 0))
                data = f.read(CHUNK)
        except OSError:
            return b""
        self.offsets[host] = self.offsets.get(host, 0) + len(data)
        return data

"""Pipe input mode: a channel's files streamed into FIFOs the container reads, as the service does.

A channel whose input mode is Pipe is neither mounted nor staged (`plan.HostPlan.pipes`). Its data
reaches the script through named pipes `/opt/ml/input/data/<channel>_<epoch>`, epoch 0, 1, 2, ...: the
name sagemaker-tensorflow-extensions' PipeModeDataset opens (src/pipemode_op/Dataset/src/
pipemode_dataset_op_kernel.cpp, BuildPipeName: `channel + "_" + pipe_index` in the channel directory
/opt/ml/input/data). Each epoch is the channel's files for this host, whole and concatenated in S3 key
order: the list File mode would stage, so a ShardedByS3Key channel gives each host its share.

Where: the FIFOs are made in the host's `input/data` folder on this machine, which the plan bind-mounts
at /opt/ml/input/data (read-only: a FIFO is read, never written, through it), so they appear there in
the container. How: one feeder thread per (host, Pipe channel) splices each file from the page cache
into the pipe (`os.splice`): nothing is copied to disk or through Python on the way.

Epochs: epoch 0's FIFO exists before the containers start. Epoch N+1's FIFO appears once the reader
took epoch N's last byte, and only then is N's write end closed (the reader's EOF), so a script that
opens the next epoch as soon as it sees EOF finds it; or, when the reader closes epoch N early, once
the feeder sees it gone (a reader should then wait for the name to appear, as PipeModeDataset's
RecordReader::WaitForFile does). Epoch N's name is removed when N+1 appears.

RecordWrapperType RecordIO (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_Channel.html
#sagemaker-Type-Channel-RecordWrapperType: "SageMaker wraps each individual S3 object in a RecordIO
record") frames each file as MXNet's RecordIO does, the framing SageMaker's readers decode
(sagemaker-tensorflow-extensions src/pipemode_op/RecordReader/RecordIOReader.cpp; the SDK's writer
sagemaker/amazon/common.py `_write_recordio`): a little-endian uint32 magic 0xced7230a, a uint32 whose
low 29 bits are the payload length and top 3 bits a flag, the payload, zero padding to a multiple of 4.
A file longer than the 29-bit length is split into a multipart record (flags 1 start, 2 middle, 3 end,
which RecordIOReader.cpp joins); a whole record has flag 0.

Teardown never hangs: no feeder blocks in open() or write(). The write end is opened non-blocking
(ENXIO while nobody reads, retried), writes wait in poll() with a timeout, and `Feeders.close()` stops
every thread and removes every FIFO.

The feeders run in a process of their own (`serve`, `python emulator/run/pipes.py`), not in the driver: a
feeder wakes up once per pipe-full (1 MiB), and in the driver each wake-up would wait for the GIL
behind the log, console and engine threads (measured: a third of the rate with one busy thread). The
process reads its orders on stdin and stops when stdin ends: when the `with` block ends, and also
when the driver dies, so no feeder outlives its job.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# The feeding process runs this file as a script (`serve`): it imports the standard library alone,
# not the emulator package, whose import takes a second.
if TYPE_CHECKING:
    from emulator.planning.plan import Plan

RECORDIO_MAGIC = 0xCED7230A
RECORDIO_MAX_LENGTH = (1 << 29) - 1  # the length word's low 29 bits
FLAG_WHOLE, FLAG_START, FLAG_MIDDLE, FLAG_END = 0, 1, 2, 3
# The pipe's buffer: 1 MiB (the default /proc/sys/fs/pipe-max-size) instead of 64 KiB, so each
# wake-up moves 16 times more data. Best effort: a smaller limit only costs speed.
PIPE_BUFFER = 1 << 20
SPLICE_CHUNK = 1 << 24
POLL_MS = 100  # how often a waiting feeder looks at the stop flag
OPEN_RETRY_MAX = 0.02  # seconds between tries to open a FIFO nobody reads yet (growing from 1 ms)
JOIN_TIMEOUT = 5.0


def fifo_name(channel: str, epoch: int) -> str:
    """`<channel>_<epoch>`: PipeModeDataset's BuildPipeName."""
    return f"{channel}_{epoch}"


def record_parts(size: int) -> list[tuple[int, int, int]]:
    """(offset, length, flag) of the RecordIO record(s) holding one file of `size` bytes."""
    if size <= RECORDIO_MAX_LENGTH:
        return [(0, size, FLAG_WHOLE)]
    offsets = range(0, size, RECORDIO_MAX_LENGTH)
    last = len(offsets) - 1
    return [(offset, min(RECORDIO_MAX_LENGTH, size - offset),
             FLAG_START if i == 0 else FLAG_END if i == last else FLAG_MIDDLE)
            for i, offset in enumerate(offsets)]


def record_header(length: int, flag: int) -> bytes:
    return struct.pack("<II", RECORDIO_MAGIC, (flag << 29) | length)


def record_padding(length: int) -> bytes:
    return b"\0" * (-length % 4)


@dataclass(frozen=True)
class PipeSource:
    """What one host's FIFOs of one channel stream: `files` (keys under `root`, in order), or `root`
    itself when the channel is a single file."""

    folder: Path  # the host's input/data folder, /opt/ml/input/data in its container
    channel: str
    root: Path
    files: tuple[str, ...]
    single_file: bool = False
    record_io: bool = False
    label: str = ""  # "algo-1 train", for messages

    def paths(self) -> list[Path]:
        return [self.root] if self.single_file else [self.root / key for key in self.files]

    def fifo(self, epoch: int) -> Path:
        return self.folder / fifo_name(self.channel, epoch)


def sources(plan: Plan) -> list[PipeSource]:
    """Every (host, Pipe channel) of a plan."""
    out = []
    for host in plan.hosts:
        for name, files in host.pipes.items():
            channel = plan.spec.inputs[name]
            out.append(PipeSource(Path(host.host_dir) / "input" / "data", name, channel.source, files,
                                  channel.single_file, channel.record_wrapping == "RecordIO", f"{host.name} {name}"))
    return out


class _Stopped(Exception):
    """The feeders are closing."""


class _ReaderGone(Exception):
    """The reader closed the FIFO: the epoch is over."""


class Feeder(threading.Thread):
    """Streams one PipeSource, epoch after epoch, until stopped. `epochs` counts the epochs finished
    (read to the end or closed early), `sent` the bytes written; `error` says why feeding ended early."""

    def __init__(self, source: PipeSource, stop: threading.Event) -> None:
        super().__init__(name=f"pipe {source.label}", daemon=True)
        self.source = source
        self.stop = stop
        self.epochs = 0
        self.sent = 0
        self.error: str | None = None

    def run(self) -> None:
        source = self.source
        path = source.fifo(0)  # made by `Feeders.start`, before any container starts
        try:
            for epoch in itertools.count():
                fd = self._open(path)
                if fd is None:
                    return
                following = source.fifo(epoch + 1)
                try:
                    try:
                        self._stream(fd)
                        self._drained(fd)
                    except _ReaderGone:
                        pass
                    # N+1 exists before N's reader sees EOF: a script that opens it at once finds it.
                    os.mkfifo(following, 0o644)
                finally:
                    # Gone before its EOF: a reader that saw EOF finds only the next epoch.
                    _remove(path)
                    os.close(fd)
                self.epochs += 1
                path = following
        except _Stopped:
            pass
        except OSError as err:
            self.error = f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
        finally:
            _remove(path)

    def _open(self, path: Path) -> int | None:
        """The FIFO's write end, once a reader has opened it; None when stopped first. Non-blocking:
        a blocking open() would wait for a reader forever."""
        delay = 0.001
        while not self.stop.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as err:
                if err.errno != errno.ENXIO:  # no reader yet
                    raise
                self.stop.wait(delay)
                delay = min(delay * 2, OPEN_RETRY_MAX)
                continue
            with suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BUFFER)
            return fd
        return None

    def _stream(self, fd: int) -> None:
        for path in self.source.paths():
            src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(src).st_size
                if not self.source.record_io:
                    self._splice(src, fd, 0, size, path)
                    continue
                for offset, length, flag in record_parts(size):
                    self._write(fd, record_header(length, flag))
                    self._splice(src, fd, offset, length, path)
                    self._write(fd, record_padding(length))
            finally:
                os.close(src)

    def _splice(self, src: int, fd: int, offset: int, count: int, path: Path) -> None:
        """`count` bytes of `src` from `offset` into the pipe, kernel to kernel."""
        end = offset + count
        while offset < end:
            try:
                moved = os.splice(src, fd, min(end - offset, SPLICE_CHUNK), offset_src=offset,
                                  flags=os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE)
            except BlockingIOError:
                self._wait_writable(fd)
                continue
            except BrokenPipeError:
                raise _ReaderGone from None
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                # A file system splice(2) cannot read from (some FUSE ones): through a buffer instead.
                chunk = os.pread(src, min(end - offset, PIPE_BUFFER), offset)
                self._write(fd, chunk)
                moved = len(chunk)
                self.sent -= moved  # counted by _write already
            if moved == 0:
                raise OSError(errno.EIO, "the file got shorter while it was streamed", str(path))
            offset += moved
            self.sent += moved

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                self._wait_writable(fd)
                continue
            except BrokenPipeError:
                raise _ReaderGone from None
            view = view[written:]
            self.sent += written

    def _wait_writable(self, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        while True:
            if self.stop.is_set():
                raise _Stopped
            for _, events in poller.poll(POLL_MS):
                if events & (select.POLLERR | select.POLLHUP):  # no reader left
                    raise _ReaderGone
                if events & select.POLLOUT:
                    return

    def _drained(self, fd: int) -> None:
        """Wait until the reader took the last byte (the pipe is empty) or closed it."""
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR is always reported: the last reader closed
        delay = 1
        while _unread(fd):
            if self.stop.is_set():
                raise _Stopped
            if poller.poll(delay):
                return
            delay = min(delay * 2, 20)


def _unread(fd: int) -> int:
    """Bytes in the pipe not read yet (FIONREAD works on either end of a pipe)."""
    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, "little")


def _remove(path: Path) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


class Feeders:
    """Every feeder of a job. `start` makes each epoch-0 FIFO, then starts the threads; `close` stops
    them, waits for them and removes every FIFO left."""

    def __init__(self, pipe_sources: Sequence[PipeSource]) -> None:
        self.stop = threading.Event()
        self.feeders = [Feeder(source, self.stop) for source in pipe_sources]

    def start(self) -> None:
        for feeder in self.feeders:
            os.mkfifo(feeder.source.fifo(0), 0o644)
        for feeder in self.feeders:
            feeder.start()

    def close(self) -> list[str]:
        """Stop feeding; returns a line per problem (a feeder that failed or did not stop)."""
        self.stop.set()
        problems = []
        for feeder in self.feeders:
            if feeder.is_alive() or feeder.ident is not None:
                feeder.join(JOIN_TIMEOUT)
            if feeder.is_alive():
                problems.append(f"the feeder of Pipe channel {feeder.source.label} did not stop")
            elif feeder.error:
                problems.append(f"Pipe channel {feeder.source.label}: feeding stopped in epoch {feeder.epochs}: "
                                f"{feeder.error}")
        for feeder in self.feeders:
            # A feeder removes its own FIFO as it ends; one that did not stop in time leaves one.
            _remove_fifos(feeder.source)
        return problems


READY = "ready"
STOP_TIMEOUT = JOIN_TIMEOUT + 5.0


@contextmanager
def serve(plan: Plan, warn: Callable[[str], None]) -> Iterator[None]:
    """Feed the plan's Pipe channels for the duration of the `with` block, from a process of its own
    (nothing is started when the plan has none). Each epoch-0 FIFO exists when the block begins;
    when it ends, the process has stopped and every FIFO is gone; `warn` gets a line per problem."""
    pipe_sources = sources(plan)
    if not pipe_sources:
        yield
        return
    from emulator.errors import EnvironmentProblem

    proc = subprocess.Popen(
        # -I: neither the user's site-packages nor the working directory can shadow a module it uses.
        [sys.executable, "-I", str(Path(__file__).resolve())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
        # Its own session: the Ctrl-C meant for the driver must not stop the feeding before the driver
        # has stopped the hosts.
        start_new_session=True, cwd="/",
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps([{**asdict(src), "folder": str(src.folder), "root": str(src.root)}
                                     for src in pipe_sources]) + "\n")
        proc.stdin.flush()
        first = proc.stdout.readline().strip()
        if first != READY:
            raise EnvironmentProblem(f"the Pipe mode feeder did not start: {first or 'it exited'}",
                                     hint="each host's input/data folder under the job folder must be writable")
        yield
    finally:
        try:
            # communicate() closes stdin first: the feeder's signal to stop.
            told, _ = proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            told, _ = proc.communicate()
            warn("the Pipe mode feeder did not stop: killed")
        for line in told.splitlines():
            warn(json.loads(line))
        if proc.returncode not in (0, -signal.SIGKILL):
            warn(f"the Pipe mode feeder failed (exit code {proc.returncode})")
        for src in pipe_sources:  # left by a feeder that was killed
            _remove_fifos(src)


def _remove_fifos(source: PipeSource) -> None:
    for fifo in source.folder.glob(f"{source.channel}_*"):
        epoch = fifo.name[len(source.channel) + 1:]
        if epoch.isdigit() and fifo.is_fifo():
            _remove(fifo)


def main() -> None:
    """The feeding process: one JSON line of PipeSources on stdin, `ready` once every epoch-0 FIFO is
    made, feeding until stdin ends, then a JSON string per problem on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    orders = json.loads(sys.stdin.readline() or "[]")
    feeders = Feeders([PipeSource(**{**order, "folder": Path(order["folder"]), "root": Path(order["root"]),
                                     "files": tuple(order["files"])}) for order in orders])
    try:
        feeders.start()
    except OSError as err:
        print(f"{err.strerror}: {err.filename}", flush=True)
        feeders.close()
        return
    print(READY, flush=True)
    while sys.stdin.readline():
        pass
    for problem in feeders.close():
        print(json.dumps(problem), flush=True)


if __name__ == "__main__":
    main()

"""Reading an attached stream (backend/docker.py): the engine's multiplexed frames, split anywhere by
the socket, become ordered chunks per stream; a sink that fails stops the reader and closes the
socket (an attached stream must never be left open and unread: the container's writes would block)."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any
from unittest import mock

from emulator.backend.docker import DockerBackend
from emulator.backend.docker_parts import demultiplex_socket as _demultiplex


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def test_frames_split_across_reads_are_delivered_in_order_per_stream() -> None:
    data = frame(1, b"out 1\n") + frame(1, b"out 2\n") + frame(2, b"\rbar 10%") + frame(1, b"x" * 70_000)
    ours, engine = socket.socketpair()
    got: list[tuple[int, bytes]] = []

    def send() -> None:
        for i in range(0, len(data), 5):  # headers and payloads cut at every 5th byte
            engine.sendall(data[i:i + 5])
        engine.close()

    sender = threading.Thread(target=send)
    sender.start()
    _demultiplex(ours, lambda chunk, stream: got.append((stream, chunk)))
    sender.join()
    by_stream: dict[int, bytes] = {}
    for stream, chunk in got:
        by_stream[stream] = by_stream.get(stream, b"") + chunk
    assert by_stream == {1: b"out 1\nout 2\n" + b"x" * 70_000, 2: b"\rbar 10%"}
    # Order across streams is kept: stdout's first lines come before stderr's bar.
    assert got[0][0] == 1 and b"out 1\n" in got[0][1]


def test_a_failing_sink_stops_the_reader_closes_the_stream_and_is_reported() -> None:
    ours, engine = socket.socketpair()
    backend = DockerBackend(client=mock.MagicMock())
    backend.api.attach_socket.return_value = ours  # type: ignore[attr-defined]

    def full_disk(name: str, chunk: bytes, stream: int = 1) -> None:
        raise OSError(28, "No space left on device")

    backend.follow_logs("job-algo-1", full_disk)
    engine.sendall(frame(1, b"hello\n"))
    assert backend.wait_logs(timeout=5) == []
    assert "No space left on device" in backend.stream_errors["job-algo-1"]
    engine.settimeout(5)
    assert engine.recv(10) == b""  # our end was closed: the engine stops writing to it
    engine.close()


def test_wait_logs_closes_a_stream_that_does_not_end() -> None:
    ours, engine = socket.socketpair()
    backend = DockerBackend(client=mock.MagicMock())
    backend.api.attach_socket.return_value = ours  # type: ignore[attr-defined]
    backend.api.inspect_container.return_value = {"State": {"Status": "exited"}}  # type: ignore[attr-defined]
    chunks: list[Any] = []
    backend.follow_logs("job-algo-1", lambda name, chunk, stream=1: chunks.append(chunk))
    assert backend.wait_logs(timeout=0.3) == ["job-algo-1"]
    engine.settimeout(5)
    assert engine.recv(10) == b""
    engine.close()

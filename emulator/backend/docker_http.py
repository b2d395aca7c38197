"""The engine calls docker-py has no public method for, as typed methods over its low-level client
(`docker.APIClient`). docker-py offers `_get`, `_post`, `_url` and `_raise_for_status` to itself only;
every use of them, and of the socket under a streamed answer, is here, so that a docker-py release
that changes them breaks one small module, and the engines read as calls of the Engine API. The
client's read timeout, which docker-py keeps in an attribute, is raised for a slow call here too
(`read_timeout`).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any, BinaryIO

import docker
import requests


def raw_socket(attached: Any) -> socket.socket:
    """The socket under what `attach_socket` / `exec_start(socket=True)` return: docker-py hands back
    the socket's file object (or, over TLS, the socket itself)."""
    raw: socket.socket = getattr(attached, "_sock", attached)
    return raw


def hang_up(response: requests.Response) -> None:
    """End a streamed answer another thread is reading: shut its socket down, which wakes that
    reader (who then closes the answer). Closing it from here instead waits for the reader: for ever
    on a `--follow` stream, which the engine never ends while the service exists."""
    raw: Any = response.raw
    with contextlib.suppress(Exception):
        raw._fp.fp.raw._sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def read_timeout(api: docker.APIClient, seconds: float | None) -> Iterator[None]:
    """The client's read timeout raised to at least `seconds` (None: no limit) for the calls made
    inside, and given back after: docker-py reads `APIClient.timeout` at each request, and a commit
    of gigabytes, or pip silent over a large wheel, answers only when it is done. Never lowered: a
    client without a limit keeps none."""
    saved = api.timeout
    api.timeout = None if seconds is None or saved is None else max(saved, seconds)
    try:
        yield
    finally:
        api.timeout = saved


class EngineHttp:
    """The calls of the Engine API that docker-py's `APIClient` lacks (or makes without a timeout)."""

    def __init__(self, api: docker.APIClient) -> None:
        self.api = api

    def service_logs(self, service: str, *, follow: bool, timeout: float | None) -> requests.Response:
        """A service's whole log (stdout and stderr, multiplexed as an attached stream), streamed;
        with `follow`, kept open for what the service writes next (GET /services/{id}/logs)."""
        params = {"follow": follow, "stdout": True, "stderr": True, "timestamps": False, "tail": "all"}
        return self._checked(self.api._get(self.api._url("/services/{0}/logs", service), params=params,
                                           stream=True, timeout=timeout))

    def save_image(self, name: str, *, timeout: float) -> requests.Response:
        """`docker save NAME`, streamed (GET /images/{name}/get): docker-py's get_image takes no timeout."""
        return self._checked(self.api._get(self.api._url("/images/{0}/get", name), stream=True, timeout=timeout))

    def load_image(self, data: BinaryIO, *, timeout: float) -> None:
        """`docker load` of a saved image read from `data` as it is sent (POST /images/load)."""
        self.api._post(self.api._url("/images/load"), data=data, params={"quiet": True},
                       timeout=timeout).raise_for_status()

    def _checked(self, response: requests.Response) -> requests.Response:
        """The answer, or docker-py's APIError (NotFound, ...) for an error status."""
        self.api._raise_for_status(response)
        return response

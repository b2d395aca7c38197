"""backend/docker_http.py `read_timeout`: the one way the engines give a slow call more time than the
client's read timeout, and give the client its own back."""

from __future__ import annotations

import docker
import pytest

from emulator.backend.docker_http import read_timeout


def client(timeout: float | None) -> docker.APIClient:
    # No call is made: docker-py connects at the first request, not when the client is made.
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    api.timeout = timeout  # type: ignore[assignment]
    return api


def test_a_short_timeout_is_raised_for_the_calls_inside_and_given_back_after() -> None:
    api = client(10)
    with read_timeout(api, 600):
        assert api.timeout == 600
    assert api.timeout == 10


def test_a_longer_timeout_of_the_client_is_never_shortened() -> None:
    api = client(900)
    with read_timeout(api, 600):
        assert api.timeout == 900
    assert api.timeout == 900


def test_none_lifts_the_limit_and_a_client_without_one_keeps_none() -> None:
    limited, unlimited = client(10), client(None)
    with read_timeout(limited, None), read_timeout(unlimited, 600):
        assert limited.timeout is None
        assert unlimited.timeout is None
    assert (limited.timeout, unlimited.timeout) == (10, None)


def test_the_clients_timeout_comes_back_when_the_call_inside_fails() -> None:
    api = client(10)
    with pytest.raises(docker.errors.APIError), read_timeout(api, None):
        raise docker.errors.APIError("the engine refused")
    assert api.timeout == 10

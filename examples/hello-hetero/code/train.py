"""hello-hetero: what a host of a heterogeneous SageMaker cluster learns about itself, and a first TCP hop.

Every host runs this same script. It asks the sagemaker-training toolkit (``Environment()``) where
it runs and prints the answer, one ``HELLO key=value`` line per fact plus one ``HELLO_JSON {...}``
line with all of them. Then:

* the first host of ``instance_group_1`` serves a greeting on TCP port 7000 until every host of
  ``instance_group_2`` has said hello once;
* every host of ``instance_group_2`` connects to it by its ``algo-N`` name (retrying while the
  server starts) and prints ``HELLO_TCP reply=...``;
* the other hosts of ``instance_group_1`` only print.

Each host writes ``<model_dir>/<host>.txt`` and ``<output_data_dir>/<host>.txt``.

Testing outside a container: ``HETERO_EXAMPLE_ADDRS='{"algo-1": "127.0.0.1:17000"}'`` maps host
names to ``address:port`` (the server listens on its own mapped address). ``HELLO_TIMEOUT`` sets
the client's connect deadline in seconds (default 60); the server waits at most 2x that.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from sagemaker_training import environment

PREFIX = "HELLO"
SERVER_GROUP = "instance_group_1"
CLIENT_GROUP = "instance_group_2"
PORT = 7000
IO_TIMEOUT = 10.0


def log(message: str) -> None:
    print(message, flush=True)


def fail(message: str) -> NoReturn:
    print(f"{PREFIX} ERROR {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def address(host: str, port: int) -> tuple[str, int]:
    """Where ``host`` listens: its ``algo-N`` name, unless HETERO_EXAMPLE_ADDRS maps it elsewhere."""
    mapping: dict[str, str] = json.loads(os.environ.get("HETERO_EXAMPLE_ADDRS", "{}"))
    if host in mapping:
        name, _, mapped_port = mapping[host].rpartition(":")
        return name, int(mapped_port)
    return host, port


def group_hosts(env: environment.Environment, group: str) -> list[str]:
    hosts: list[str] = env.instance_groups_dict.get(group, {}).get("hosts", [])
    return list(hosts)


SM_VARIABLES = (
    "SM_CURRENT_HOST",
    "SM_CURRENT_INSTANCE_TYPE",
    "SM_CURRENT_INSTANCE_GROUP",
    "SM_CURRENT_INSTANCE_GROUP_HOSTS",
    "SM_INSTANCE_GROUPS",
    "SM_IS_HETERO",
    "SM_HOSTS",
    "SM_CHANNELS",
    "SM_CHANNEL_TRAINING",
    "SM_HP_EPOCHS",
    "SM_MODEL_DIR",
)


def describe(env: environment.Environment) -> dict[str, Any]:
    channel_files = {
        channel: sorted(p.name for p in Path(path).iterdir()) if Path(path).is_dir() else []
        for channel, path in env.channel_input_dirs.items()
    }
    return {
        "is_hetero": env.is_hetero,
        "current_host": env.current_host,
        "hostname": socket.gethostname(),
        "current_instance_type": env.current_instance_type,
        "current_instance_group": env.current_instance_group,
        "current_instance_group_hosts": env.current_instance_group_hosts,
        "instance_groups": env.instance_groups,
        "instance_groups_dict": env.instance_groups_dict,
        "distribution_instance_groups": env.distribution_instance_groups,
        "distribution_hosts": env.distribution_hosts,
        "hosts": env.hosts,
        "channel_input_dirs": env.channel_input_dirs,
        "channel_files": channel_files,
        "hyperparameters": env.hyperparameters,
        # What `train` put in this script's environment (the SM_* variables a script usually reads).
        "sm_env": {k: v for k, v in sorted(os.environ.items()) if k in SM_VARIABLES},
    }


def serve(env: environment.Environment, greeting: str, deadline_s: float) -> list[str]:
    """Answer one greeting per connection until every client host has connected once."""
    expected = set(group_hosts(env, CLIENT_GROUP))
    seen: list[str] = []
    if not expected:
        log(f"{PREFIX}_TCP no host in {CLIENT_GROUP}: nobody to serve")
        return seen
    host, port = address(env.current_host, PORT)
    bind_host = host if host != env.current_host else ""
    deadline = time.monotonic() + deadline_s
    with socket.create_server((bind_host, port)) as server:
        server.settimeout(0.5)
        log(f"{PREFIX}_TCP listening on port {port}, waiting for {sorted(expected)}")
        while expected - set(seen):
            if time.monotonic() > deadline:
                fail(f"waited {deadline_s:.0f}s; {sorted(expected - set(seen))} never connected")
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(IO_TIMEOUT)
                try:
                    client = conn.makefile("r", encoding="utf-8").readline().strip()
                    reply = f"{greeting} {client}, this is {env.current_host} of {env.current_instance_group}"
                    conn.sendall((reply + "\n").encode("utf-8"))
                except OSError as exc:
                    log(f"{PREFIX}_TCP connection from {peer[0]} broke: {exc}")
                    continue
            log(f"{PREFIX}_TCP greeted {client} ({peer[0]})")
            if client not in seen:
                seen.append(client)
    return seen


def greet(env: environment.Environment, server_host: str, deadline_s: float) -> str:
    """Connect to the server host by name, retrying while it starts; return its reply."""
    target = address(server_host, PORT)
    deadline = time.monotonic() + deadline_s
    attempt = 0
    while True:
        attempt += 1
        try:
            with socket.create_connection(target, timeout=IO_TIMEOUT) as conn:
                conn.sendall((env.current_host + "\n").encode("utf-8"))
                reply = conn.makefile("r", encoding="utf-8").readline().strip()
            if reply:
                return reply
            error = "empty reply"
        except OSError as exc:  # not resolvable yet, refused, reset: the server is still starting
            error = str(exc)
        if time.monotonic() > deadline:
            fail(
                f"could not greet {server_host} at {target[0]}:{target[1]} in {deadline_s:.0f}s "
                f"({attempt} attempts, last error: {error})"
            )
        time.sleep(0.5)


def main() -> None:
    env = environment.Environment()
    info = describe(env)
    for key, value in info.items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        log(f"{PREFIX} {key}={text}")
    log(f"{PREFIX}_JSON {json.dumps(info, sort_keys=True)}")

    greeting = str(env.hyperparameters.get("greeting", "hello"))
    timeout = float(os.environ.get("HELLO_TIMEOUT", "60"))
    host = env.current_host
    group = env.current_instance_group
    server_hosts = group_hosts(env, SERVER_GROUP)
    server = server_hosts[0] if server_hosts else None

    summary = f"{host} of {group} ({env.current_instance_type})"
    if group == SERVER_GROUP and host == server:
        seen = serve(env, greeting, 2 * timeout)
        summary += f" greeted {seen}"
    elif group == CLIENT_GROUP:
        if server is None:
            fail(f"{SERVER_GROUP} has no host to greet")
        reply = greet(env, server, timeout)
        log(f"{PREFIX}_TCP reply={reply}")
        summary += f" got {reply!r}"
    else:
        log(f"{PREFIX} nothing more to do on {host}")

    for directory in (env.model_dir, env.output_data_dir):
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / f"{host}.txt").write_text(summary + "\n", encoding="utf-8")
    log(f"{PREFIX} done: {summary}")


if __name__ == "__main__":
    main()

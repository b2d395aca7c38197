"""data-offload: CPU hosts prepare and serve the data, GPU hosts train (the pattern of AWS's
heterogeneous-cluster examples, with the standard library and numpy only).

Every host runs this script and branches on its instance group:

* ``data_group`` hosts (the "data servers") each read their own shard of the ``training`` channel
  (``ShardedByS3Key``: a disjoint share of the CSV files, label first, no header), standardise the
  features with numpy and serve mini-batches over TCP port 6000;
* ``dnn_group`` hosts (the "trainers") connect to every data server by its ``algo-N`` name, pull
  mini-batches round-robin from all of them and train a logistic regression for ``epochs`` epochs.
  With several trainers, each gets a disjoint share of every server's rows; the first trainer
  (the first host of ``dnn_group`` in the resource config) collects the others' weights on port
  6001, averages them, evaluates the result on all the data, saves it and then tells every data
  server to shut down. Every host then exits 0.

Every wait is bounded by ``timeout`` seconds (hyperparameter, default 120): a host that waits
longer prints ``... ERROR ...`` and exits 1, so a broken job fails instead of hanging.

Hyperparameters: ``epochs`` (int), ``learning_rate`` (float), ``batch_size`` (int), ``seed`` (int),
``timeout`` (seconds), ``data_group`` / ``dnn_group`` (group names, default as above).

Outputs: the first trainer writes ``model.json`` and ``model.npy`` (weights then bias) to the model
directory; every trainer writes ``local-<host>.npy``; every host writes a JSON summary to
``<output_data_dir>/<host>.json``. Log lines start with ``DATA`` (servers) or ``DNN`` (trainers);
the first trainer ends with one ``DNN_RESULT {...}`` JSON line.

Testing outside a container: ``HETERO_EXAMPLE_ADDRS='{"algo-1": "127.0.0.1:16001", ...}'`` maps
host names to ``address:port`` (a host listens on its own mapped address).
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from sagemaker_training import environment

DATA_PORT = 6000
COORDINATOR_PORT = 6001
CHANNEL = "training"
HEADER = struct.Struct("!I")

Header = dict[str, Any]
Message = tuple[Header, list[np.ndarray]]


# --------------------------------------------------------------------------- plumbing


def log(prefix: str, message: str) -> None:
    print(f"{prefix} {message}", flush=True)


def fail(prefix: str, message: str) -> NoReturn:
    print(f"{prefix} ERROR {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def address(host: str, port: int) -> tuple[str, int]:
    """Where ``host`` listens: its ``algo-N`` name, unless HETERO_EXAMPLE_ADDRS maps it elsewhere."""
    mapping: dict[str, str] = json.loads(os.environ.get("HETERO_EXAMPLE_ADDRS", "{}"))
    if host in mapping:
        name, _, mapped_port = mapping[host].rpartition(":")
        return name, int(mapped_port)
    return host, port


def listen(host: str, port: int) -> socket.socket:
    name, real_port = address(host, port)
    bind_to = name if name != host else ""  # in the cluster: every interface
    server = socket.create_server((bind_to, real_port))
    server.settimeout(0.5)
    return server


def connect(prefix: str, host: str, port: int, deadline_s: float) -> socket.socket:
    """Connect to ``host`` by name, retrying while it starts, for at most ``deadline_s`` seconds."""
    target = address(host, port)
    deadline = time.monotonic() + deadline_s
    attempts = 0
    while True:
        attempts += 1
        try:
            sock = socket.create_connection(target, timeout=5)
            sock.settimeout(deadline_s)
            if attempts > 1:
                log(prefix, f"connected to {host} after {attempts} attempts")
            return sock
        except OSError as exc:  # not resolvable yet, refused: the peer is still starting
            if time.monotonic() > deadline:
                fail(
                    prefix,
                    f"could not reach {host} at {target[0]}:{target[1]} within {deadline_s:.0f}s "
                    f"({attempts} attempts, last error: {exc})",
                )
            time.sleep(0.5)


def send(sock: socket.socket, header: Header, arrays: Sequence[np.ndarray] = ()) -> None:
    """One message: 4-byte length, a JSON header describing the arrays, then their raw bytes."""
    meta = dict(header, arrays=[[a.dtype.str, list(a.shape)] for a in arrays])
    head = json.dumps(meta).encode("utf-8")
    sock.sendall(b"".join([HEADER.pack(len(head)), head, *(np.ascontiguousarray(a).tobytes() for a in arrays)]))


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection")
        got += n
    return bytes(buf)


def recv(sock: socket.socket) -> Message:
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    header: Header = json.loads(_recv_exact(sock, size))
    arrays = []
    for dtype_str, shape in header.pop("arrays"):
        dtype = np.dtype(dtype_str)
        raw = _recv_exact(sock, dtype.itemsize * math.prod(shape))
        arrays.append(np.frombuffer(raw, dtype=dtype).reshape(shape))
    return header, arrays


def request(sock: socket.socket, header: Header, arrays: Sequence[np.ndarray] = ()) -> Message:
    send(sock, header, arrays)
    return recv(sock)


def group_hosts(env: environment.Environment, group: str) -> list[str]:
    hosts: list[str] = env.instance_groups_dict.get(group, {}).get("hosts", [])
    return list(hosts)


def write_json(directory: str, name: str, payload: dict[str, Any]) -> None:
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / name).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- data servers


def load_shard(channel_dir: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """This host's share of the CSV files: (features, labels, file names)."""
    root = Path(channel_dir)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")) if root.is_dir() else []
    blocks = [np.loadtxt(p, delimiter=",", ndmin=2) for p in files]
    blocks = [b for b in blocks if b.size]
    if not blocks:
        return np.zeros((0, 0)), np.zeros(0), [str(p.relative_to(root)) for p in files]
    table = np.concatenate(blocks)
    return table[:, 1:], table[:, 0], [str(p.relative_to(root)) for p in files]


def standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not len(x):
        return x, np.zeros(x.shape[1]), np.ones(x.shape[1])
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std == 0] = 1.0
    return (x - mean) / std, mean, std


class DataServer:
    """Serves one shard's mini-batches to any number of trainers, until one says shut down."""

    prefix = "DATA"

    def __init__(self, env: environment.Environment, x: np.ndarray, y: np.ndarray, idle_s: float) -> None:
        self.env = env
        self.x = x.astype(np.float32)
        self.y = y.astype(np.float32)
        self.idle_s = idle_s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.batches_served = 0
        self.clients: set[str] = set()

    def touch(self) -> None:
        with self.lock:
            self.last_activity = time.monotonic()

    def serve_forever(self) -> None:
        threads: list[threading.Thread] = []
        with listen(self.env.current_host, DATA_PORT) as server:
            log(
                self.prefix,
                f"{self.env.current_host} serving {len(self.x)} rows on port {server.getsockname()[1]}",
            )
            while not self.stop.is_set():
                with self.lock:
                    idle = time.monotonic() - self.last_activity
                if idle > self.idle_s:
                    fail(
                        self.prefix,
                        f"no request and no shutdown for {self.idle_s:.0f}s; trainers seen: {sorted(self.clients)}",
                    )
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                self.touch()
                thread = threading.Thread(target=self.handle, args=(conn,), daemon=True)
                thread.start()
                threads.append(thread)
        for thread in threads:
            thread.join(timeout=2)

    def handle(self, conn: socket.socket) -> None:
        peer = "?"
        with conn:
            try:
                while True:
                    header, _ = recv(conn)
                    self.touch()
                    op = header.get("op")
                    if op == "hello":
                        peer = str(header.get("host", "?"))
                        with self.lock:
                            self.clients.add(peer)
                        send(
                            conn,
                            {
                                "op": "hello",
                                "host": self.env.current_host,
                                "rows": len(self.x),
                                "features": int(self.x.shape[1]) if len(self.x) else 0,
                            },
                        )
                    elif op == "stream":
                        self.stream(conn, header)
                    elif op == "shutdown":
                        log(self.prefix, f"shutdown requested by {peer}")
                        send(conn, {"op": "bye", "batches_served": self.batches_served})
                        self.stop.set()
                        return
                    else:
                        send(conn, {"op": "error", "message": f"unknown op {op!r}"})
            except (ConnectionError, OSError):
                return  # the trainer closed its connection (or went away): nothing to do

    def stream(self, conn: socket.socket, header: Header) -> None:
        rank, world = int(header["rank"]), int(header["world"])
        batch_size = max(1, int(header["batch_size"]))
        rows = np.arange(len(self.x))[rank::world]
        if header.get("shuffle", True):
            rows = np.random.default_rng(int(header.get("seed", 0))).permutation(rows)
        count = 0
        for start in range(0, len(rows), batch_size):
            index = rows[start : start + batch_size]
            send(conn, {"op": "batch"}, [self.x[index], self.y[index]])
            count += 1
            self.touch()
        with self.lock:
            self.batches_served += count
        send(conn, {"op": "end", "batches": count, "rows": len(rows)})


def run_data_server(env: environment.Environment, dnn_hosts: list[str], timeout: float) -> None:
    prefix = DataServer.prefix
    channel_dir = env.channel_input_dirs.get(CHANNEL)
    if channel_dir is None:
        fail(
            prefix,
            f"no {CHANNEL!r} channel on {env.current_host}; channels: {sorted(env.channel_input_dirs)}",
        )
    started = time.monotonic()
    x_raw, y, files = load_shard(channel_dir)
    x, mean, std = standardise(x_raw)
    log(
        prefix,
        f"{env.current_host} shard: files={files} rows={len(x)} features={x.shape[1] if len(x) else 0} "
        f"positives={int(y.sum())}",
    )
    log(prefix, f"standardised with mean={np.round(mean, 3).tolist()} std={np.round(std, 3).tolist()}")
    summary: dict[str, Any] = {
        "host": env.current_host,
        "role": "data",
        "files": files,
        "rows": len(x),
        "mean": mean.tolist(),
        "std": std.tolist(),
    }
    if not dnn_hosts:
        log(prefix, "no trainer in the cluster: nothing to serve")
    else:
        server = DataServer(env, x, y, idle_s=2 * timeout)
        server.serve_forever()
        summary.update(batches_served=server.batches_served, trainers=sorted(server.clients))
        log(prefix, f"{env.current_host} served {server.batches_served} batches to {sorted(server.clients)}")
    summary["seconds"] = round(time.monotonic() - started, 3)
    write_json(env.output_data_dir, f"{env.current_host}.json", summary)
    log(prefix, f"{env.current_host} done")


# --------------------------------------------------------------------------- trainers


def sigmoid(z: np.ndarray) -> np.ndarray:
    result: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
    return result


def metrics(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Predicted probabilities, summed log-loss and number of correct predictions of a batch."""
    p = sigmoid(x @ theta[:-1] + theta[-1])
    eps = 1e-7
    loss = float(-(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)).sum())
    correct = float(((p >= 0.5) == (y >= 0.5)).sum())
    return p, loss, correct


class Coordinator:
    """On the first trainer: collects the other trainers' final weights."""

    def __init__(self, env: environment.Environment, expected: list[str]) -> None:
        self.env = env
        self.expected = expected
        self.reports: dict[str, tuple[np.ndarray, int]] = {}
        self.lock = threading.Lock()
        self.server = listen(env.current_host, COORDINATOR_PORT)
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)
        self.stopping = threading.Event()

    def start(self) -> None:
        self.thread.start()

    def accept_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(30)
                    header, arrays = recv(conn)
                    if header.get("op") == "done" and arrays:
                        with self.lock:
                            self.reports[str(header["host"])] = (arrays[0].copy(), int(header["rows"]))
                        send(conn, {"op": "ack"})
                        log("DNN", f"{header['host']} reported completion ({header['rows']} rows)")
                except (ConnectionError, OSError) as exc:
                    log("DNN", f"a completion report broke off: {exc}")

    def wait(self, timeout: float) -> dict[str, tuple[np.ndarray, int]]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                missing = [h for h in self.expected if h not in self.reports]
                if not missing:
                    return dict(self.reports)
            if time.monotonic() > deadline:
                fail("DNN", f"waited {timeout:.0f}s for completion of {missing}")
            time.sleep(0.1)

    def close(self) -> None:
        self.stopping.set()
        self.server.close()


class Trainer:
    prefix = "DNN"

    def __init__(
        self, env: environment.Environment, data_hosts: list[str], dnn_hosts: list[str], timeout: float
    ) -> None:
        hp = env.hyperparameters
        self.env = env
        self.host = env.current_host
        self.rank = dnn_hosts.index(self.host)
        self.world = len(dnn_hosts)
        self.dnn_hosts = dnn_hosts
        self.data_hosts = data_hosts
        self.timeout = timeout
        self.epochs = int(hp.get("epochs", 5))
        self.learning_rate = float(hp.get("learning_rate", 0.5))
        self.batch_size = int(hp.get("batch_size", 64))
        self.seed = int(hp.get("seed", 0))
        self.servers: dict[str, socket.socket] = {}
        self.rows_per_server: dict[str, int] = {}

    def connect_all(self) -> int:
        features: dict[str, int] = {}
        for host in self.data_hosts:
            sock = connect(self.prefix, host, DATA_PORT, self.timeout)
            header, _ = request(sock, {"op": "hello", "host": self.host})
            self.servers[host] = sock
            self.rows_per_server[host] = int(header["rows"])
            if header["rows"]:
                features[host] = int(header["features"])
        log(
            self.prefix,
            f"{self.host} (trainer {self.rank + 1}/{self.world}) connected to data servers {self.rows_per_server}",
        )
        if not features:
            fail(self.prefix, f"the data servers {self.data_hosts} have no rows at all")
        if len(set(features.values())) != 1:
            fail(self.prefix, f"data servers disagree on the number of features: {features}")
        return next(iter(features.values()))

    def passes(self, rank: int, world: int, seed: int, shuffle: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield (x, y) batches from every server, round-robin, for one pass over this share."""
        open_streams = []
        for host, sock in self.servers.items():
            if self.rows_per_server[host]:
                send(
                    sock,
                    {
                        "op": "stream",
                        "rank": rank,
                        "world": world,
                        "batch_size": self.batch_size,
                        "seed": seed,
                        "shuffle": shuffle,
                    },
                )
                open_streams.append(sock)
        while open_streams:
            for sock in list(open_streams):
                header, arrays = recv(sock)
                if header["op"] == "end":
                    open_streams.remove(sock)
                elif header["op"] == "batch":
                    yield arrays[0].astype(np.float64), arrays[1].astype(np.float64)
                else:
                    fail(self.prefix, f"unexpected message from a data server: {header}")

    def train(self, features: int) -> tuple[np.ndarray, int, list[dict[str, float]]]:
        theta = np.zeros(features + 1)
        history = []
        rows = 0
        for epoch in range(1, self.epochs + 1):
            started = time.monotonic()
            loss_sum = correct = 0.0
            rows = batches = 0
            for x, y in self.passes(self.rank, self.world, self.seed * 1_000_003 + epoch * 7919 + self.rank, True):
                p, loss, right = metrics(theta, x, y)  # measured before the update, as Keras does
                theta[:-1] -= self.learning_rate * (x.T @ (p - y)) / len(y)
                theta[-1] -= self.learning_rate * float((p - y).mean())
                loss_sum += loss
                correct += right
                rows += len(y)
                batches += 1
            if not rows:
                fail(self.prefix, f"{self.host} got no rows to train on in epoch {epoch}")
            entry = {
                "epoch": epoch,
                "loss": loss_sum / rows,
                "accuracy": correct / rows,
                "rows": rows,
                "batches": batches,
                "seconds": time.monotonic() - started,
            }
            history.append(entry)
            log(
                self.prefix,
                f"epoch={epoch}/{self.epochs} loss={entry['loss']:.4f} "
                f"accuracy={entry['accuracy']:.4f} rows={rows} batches={batches} host={self.host}",
            )
        return theta, rows, history

    def evaluate(self, theta: np.ndarray) -> tuple[float, float, int]:
        loss_sum = correct = 0.0
        rows = 0
        for x, y in self.passes(0, 1, 0, False):
            _, loss, right = metrics(theta, x, y)
            loss_sum += loss
            correct += right
            rows += len(y)
        return loss_sum / max(rows, 1), correct / max(rows, 1), rows

    def shutdown_servers(self) -> None:
        for host, sock in self.servers.items():
            try:
                header, _ = request(sock, {"op": "shutdown"})
                log(
                    self.prefix,
                    f"data server {host} shut down ({header.get('batches_served')} batches served)",
                )
            except (ConnectionError, OSError) as exc:
                log(self.prefix, f"data server {host} did not confirm its shutdown: {exc}")

    def close(self) -> None:
        for sock in self.servers.values():
            sock.close()


def run_trainer(env: environment.Environment, data_hosts: list[str], dnn_hosts: list[str], timeout: float) -> None:
    prefix = Trainer.prefix
    if not data_hosts:
        fail(prefix, "there is no data server (the data group has no host)")
    started = time.monotonic()
    trainer = Trainer(env, data_hosts, dnn_hosts, timeout)
    first = trainer.rank == 0
    coordinator = Coordinator(env, dnn_hosts[1:]) if first else None
    if coordinator is not None:
        coordinator.start()
    model_dir = Path(env.model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    try:
        features = trainer.connect_all()
        theta, rows, history = trainer.train(features)
        np.save(model_dir / f"local-{trainer.host}.npy", theta)
        summary: dict[str, Any] = {
            "host": trainer.host,
            "role": "trainer",
            "rank": trainer.rank,
            "history": history,
        }
        if coordinator is None:
            sock = connect(prefix, dnn_hosts[0], COORDINATOR_PORT, timeout)
            with sock:
                header, _ = request(sock, {"op": "done", "host": trainer.host, "rows": rows}, [theta])
            log(prefix, f"{trainer.host} reported completion to {dnn_hosts[0]} ({header.get('op')})")
        else:
            reports = coordinator.wait(timeout)
            reports[trainer.host] = (theta, rows)
            total = sum(r for _, r in reports.values())
            stacked = np.stack([t for t, _ in reports.values()])
            counts = np.array([r for _, r in reports.values()], dtype=np.float64)
            final: np.ndarray = (counts / total) @ stacked if total else theta
            loss, accuracy, eval_rows = trainer.evaluate(final)
            result = {
                "loss": loss,
                "accuracy": accuracy,
                "rows": eval_rows,
                "trainers": sorted(reports),
                "epochs": trainer.epochs,
                "data_servers": data_hosts,
                "seconds": round(time.monotonic() - started, 3),
            }
            log(
                prefix,
                f"final loss={loss:.4f} accuracy={accuracy:.4f} rows={eval_rows} "
                f"trainers={len(reports)} (weights averaged)",
            )
            np.save(model_dir / "model.npy", final)
            write_json(
                str(model_dir),
                "model.json",
                {
                    "weights": final[:-1].tolist(),
                    "bias": float(final[-1]),
                    "features": features,
                    "note": "features standardised per data shard by each data server",
                    **result,
                },
            )
            summary["result"] = result
            print("DNN_RESULT " + json.dumps(result, sort_keys=True), flush=True)
            trainer.shutdown_servers()
        write_json(env.output_data_dir, f"{trainer.host}.json", summary)
    except (ConnectionError, OSError) as exc:
        if first:
            trainer.shutdown_servers()  # best effort, so the servers do not wait for their idle limit
        fail(prefix, f"{trainer.host} lost a connection: {exc!r}")
    except SystemExit:
        if first:
            trainer.shutdown_servers()
        raise
    finally:
        trainer.close()
        if coordinator is not None:
            coordinator.close()
    log(prefix, f"{trainer.host} done")


# --------------------------------------------------------------------------- main


def main() -> None:
    env = environment.Environment()
    hp = env.hyperparameters
    data_group = str(hp.get("data_group", "data_group"))
    dnn_group = str(hp.get("dnn_group", "dnn_group"))
    timeout = float(hp.get("timeout", 120))
    data_hosts = group_hosts(env, data_group)
    dnn_hosts = group_hosts(env, dnn_group)
    group = env.current_instance_group
    print(
        f"ROLE host={env.current_host} group={group} type={env.current_instance_type} "
        f"data_hosts={data_hosts} dnn_hosts={dnn_hosts}",
        flush=True,
    )
    if group == data_group:
        run_data_server(env, dnn_hosts, timeout)
    elif group == dnn_group:
        run_trainer(env, data_hosts, dnn_hosts, timeout)
    else:
        print(f"ROLE {env.current_host} is in neither {data_group} nor {dnn_group}: nothing to do", flush=True)


if __name__ == "__main__":
    main()

"""fit-line: a line fitted on a heterogeneous cluster, the script examples/testing-your-script/tests test.

Every host runs this script and branches on its instance group:

* ``data_group`` hosts each read their share of the ``training`` channel (``ShardedByS3Key``: CSV
  files of ``x,y`` rows), reduce it to the sums a least-squares line needs (n, sum x, sum y, sum x*x,
  sum x*y), write them to ``<output_data_dir>/<host>.json``, print ``DATA <host>: rows=<rows>
  files=<files>`` and send them to the first host of ``train_group`` over TCP port 7100;
* the first ``train_group`` host collects the sums of every data host, fits ``y = slope * x +
  intercept`` and writes ``model.json`` to the model directory (``TRAIN fitted ...``).

A row that is not two numbers fails its host with ``DATA <host>: bad row in <file> line <n>: ...``
(exit 1). Every wait is bounded by the ``timeout`` hyperparameter (seconds, default 60).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

from sagemaker_training import environment

DATA_GROUP = "data_group"
TRAIN_GROUP = "train_group"
PORT = 7100
Sums = dict[str, float]


def log(message: str) -> None:
    print(message, flush=True)


def fail(message: str) -> NoReturn:
    print(message, file=sys.stderr, flush=True)
    sys.exit(1)


def read_sums(host: str, folder: Path) -> tuple[int, Sums]:
    """The least-squares sums of every `x,y` row of the CSV files under `folder`, and the file count."""
    sums = {"n": 0.0, "x": 0.0, "y": 0.0, "xx": 0.0, "xy": 0.0}
    files = sorted(p for p in folder.rglob("*.csv") if p.is_file())
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                x, y = (float(value) for value in line.split(","))
            except ValueError:
                fail(f"DATA {host}: bad row in {path.name} line {number}: {line!r}")
            sums["n"] += 1
            sums["x"] += x
            sums["y"] += y
            sums["xx"] += x * x
            sums["xy"] += x * y
    return len(files), sums


def send(trainer: str, host: str, sums: Sums, deadline: float) -> None:
    """Send the sums to the trainer, retrying while it starts listening."""
    while True:
        try:
            with socket.create_connection((trainer, PORT), timeout=10) as conn:
                conn.sendall((json.dumps({"host": host, "sums": sums}) + "\n").encode())
                return
        except OSError as err:
            if time.monotonic() > deadline:
                fail(f"DATA {host}: could not reach {trainer}:{PORT}: {err}")
            time.sleep(0.3)


def collect(expected: list[str], deadline: float) -> dict[str, Sums]:
    """The sums of every data host, one connection each."""
    received: dict[str, Sums] = {}
    with socket.create_server(("", PORT)) as server:
        server.settimeout(0.5)
        while set(expected) - set(received):
            if time.monotonic() > deadline:
                fail(f"TRAIN: no sums from {sorted(set(expected) - set(received))}")
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, conn.makefile("r") as stream:
                message = json.loads(stream.readline())
            received[message["host"]] = message["sums"]
    return received


def fit(sums: Sums) -> tuple[float, float]:
    n, sx, sy, sxx, sxy = sums["n"], sums["x"], sums["y"], sums["xx"], sums["xy"]
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return slope, (sy - slope * sx) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=60.0)
    args, _ = parser.parse_known_args()
    env = environment.Environment()
    host, group = env.current_host, env.current_instance_group
    groups = env.instance_groups_dict
    data_hosts = list(groups.get(DATA_GROUP, {}).get("hosts", []))
    trainer = groups[TRAIN_GROUP]["hosts"][0]
    deadline = time.monotonic() + args.timeout

    if group == DATA_GROUP:
        count, sums = read_sums(host, Path(env.channel_input_dirs["training"]))
        log(f"DATA {host}: rows={int(sums['n'])} files={count}")
        out = Path(env.output_data_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{host}.json").write_text(json.dumps(sums))
        send(trainer, host, sums, deadline)
    elif host == trainer:
        received = collect(data_hosts, deadline)
        total = {key: sum(s[key] for s in received.values()) for key in ("n", "x", "y", "xx", "xy")}
        slope, intercept = fit(total)
        log(f"TRAIN fitted y = {slope:.3f} * x + {intercept:.3f} on {int(total['n'])} rows "
            f"from {', '.join(sorted(received))}")
        model = {"slope": slope, "intercept": intercept, "rows": int(total["n"])}
        Path(env.model_dir, "model.json").write_text(json.dumps(model))


if __name__ == "__main__":
    main()

"""MPI inside one instance group, for real: the guide's cluster B shape, scaled down, under the REAL
toolkit's `train` in the default image (Open MPI, sshd, mpi4py).

One host of group `data` runs the script as a plain process; the 2 hosts of group `trainers` run it
under `mpirun` with 2 processes each, started by the toolkit's MPI runner on the first host of that
group (its workers run sshd and wait for `orted`), with the per-job key pair the emulator mounts. An
allreduce over the 4 ranks proves the ranks really talk across containers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import JobSpec, validate
from emulator.options import RunOptions
from emulator.planning.plan import assign_hosts
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

DATA, TRAINERS = "data", "trainers"
PROCESSES_PER_HOST = 2
RANKS = 2 * PROCESSES_PER_HOST
DATA_PORT = 7000

# Every host runs this through the toolkit's `train`. On the trainers it runs once per MPI rank.
TRAIN = '''\
import json
import os
import socket
import sys
import time

from sagemaker_training import environment

env = environment.Environment()
me = socket.gethostname()
data_host = env.instance_groups_dict["data"]["hosts"][0]
# Every host has /opt/ml/input/config/hyperparameters.json; a rank started over ssh gets the job's
# `environment:` through /etc/environment, which the toolkit's MPI worker writes and PAM reads.
offload = env.hyperparameters.get("offload", False)

if env.current_instance_group == "data":
    print("PLAIN_JSON " + json.dumps({"host": me, "under_mpi": "OMPI_COMM_WORLD_RANK" in os.environ}), flush=True)
    if offload:
        # The data-offload pattern: this group prepares batches and serves them to the trainers.
        server = socket.create_server(("0.0.0.0", __PORT__))
        for _ in range(__RANKS__):
            conn, _ = server.accept()
            with conn:
                rank = int(conn.recv(16).decode())
                conn.sendall(json.dumps([rank * 10 + i for i in range(5)]).encode())
    sys.exit(0)

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if env.hyperparameters.get("fail_rank") == rank:
    sys.exit(f"rank {rank} on {me} gives up")
if offload:
    for _ in range(300):
        try:
            conn = socket.create_connection((data_host, __PORT__), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    with conn:
        conn.sendall(str(rank).encode())
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    mine = sum(json.loads(b"".join(chunks)))
else:
    mine = rank + 1
total = comm.allreduce(mine)
hosts = comm.gather(me)
steps = comm.gather(os.environ.get("STEPS"))
if rank == 0:
    print("MPI_JSON " + json.dumps({"size": comm.Get_size(), "total": total, "hosts": hosts, "master": me,
                                    "steps": dict(zip(hosts, steps))}), flush=True)
'''.replace("__PORT__", str(DATA_PORT)).replace("__RANKS__", str(RANKS))


def mpi_spec(tmp_path: Path, **fields: Any) -> JobSpec:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    raw = {
        "base_job_name": "mpi",
        "entry_point": "train.py",
        "source_dir": "code",
        "output_path": str(tmp_path / "out"),
        "instance_groups": [
            {"instance_group_name": DATA, "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": TRAINERS, "instance_type": "ml.c5.2xlarge", "instance_count": 2},
        ],
        "distribution": {"mpi": {"enabled": True, "processes_per_host": PROCESSES_PER_HOST},
                         "instance_groups": [TRAINERS]},
        **fields,
    }
    return validate(raw, base_dir=tmp_path)


# mpirun --tag-output prefixes every chunk a rank writes, not every line. Under PYTHONUNBUFFERED a
# print() is two writes (the text, then "\n"); when orted reads them apart the line ends in a second,
# empty tag: `[1,0]<stdout>:MPI_JSON {...}[1,0]<stdout>:` (seen in CI). SageMaker shows the same.
MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def tagged(reporter: RecordingReporter, tag: str) -> dict[str, list[dict[str, Any]]]:
    """host -> the JSON of each line carrying `<tag> {...}`, mpirun's tags taken out."""
    found: dict[str, list[dict[str, Any]]] = {}
    for host, _group, tagged_line in reporter.lines:
        line = MPI_TAG.sub("", tagged_line)
        at = line.find(tag + " ")
        if at >= 0:
            found.setdefault(host, []).append(json.loads(line[at + len(tag) + 1:]))
    return found


def assert_mpi_ran(reporter: RecordingReporter, trainers: list[str], data_hosts: list[str], total: int) -> None:
    mpi = tagged(reporter, "MPI_JSON")
    master = trainers[0]
    # The toolkit's MPI runner starts mpirun on the first host of the distribution group; every rank's
    # output comes back through it.
    assert list(mpi) == [master], mpi
    (result,) = mpi[master]
    assert result["size"] == RANKS
    assert result["total"] == total
    assert sorted(result["hosts"]) == sorted(trainers * PROCESSES_PER_HOST), result["hosts"]
    assert result["master"] == master
    plain = tagged(reporter, "PLAIN_JSON")
    assert sorted(plain) == data_hosts
    assert all(p == [{"host": h, "under_mpi": False}] for h, p in plain.items()), plain


def test_mpi_allreduce_across_two_hosts_of_one_group(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    result = run_job(mpi_spec(tmp_path), reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert_mpi_ran(reporter, ["algo-2", "algo-3"], ["algo-1"], total=sum(range(1, RANKS + 1)))
    job = json.loads((result.job_dir / "job.json").read_text())
    assert job["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"] == str(PROCESSES_PER_HOST)


def test_a_rank_on_another_host_reads_the_jobs_environment(tmp_path: Path) -> None:
    """As on AWS's images: the toolkit's MPI worker writes its environment to /etc/environment and sshd's
    pam_env gives it to the ranks mpirun starts over ssh, so every rank sees the job's `environment:`."""
    reporter = RecordingReporter()
    result = run_job(mpi_spec(tmp_path, environment={"STEPS": "3"}), reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    (found,) = tagged(reporter, "MPI_JSON")["algo-2"]
    assert found["steps"] == {"algo-2": "3", "algo-3": "3"}, found


def test_mpi_with_a_shuffled_host_order(tmp_path: Path) -> None:
    spec = mpi_spec(tmp_path)
    seed = 3
    groups = {g.name: list(g.hosts) for g in assign_hosts(spec, "shuffled", seed)}
    assert groups[TRAINERS] != ["algo-2", "algo-3"], "pick a seed that moves the trainers"
    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(host_order="shuffled", seed=seed), reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert_mpi_ran(reporter, groups[TRAINERS], groups[DATA], total=sum(range(1, RANKS + 1)))


def test_data_offload_to_a_distributed_trainer_group(tmp_path: Path) -> None:
    """The guide's data-offload pattern: the data group serves batches over the job's network, every
    MPI rank of the trainers fetches its own and they allreduce what they got."""
    reporter = RecordingReporter()
    result = run_job(mpi_spec(tmp_path, hyperparameters={"offload": True}), reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    expected = sum(rank * 10 + i for rank in range(RANKS) for i in range(5))
    assert_mpi_ran(reporter, ["algo-2", "algo-3"], ["algo-1"], total=expected)


def test_a_failing_rank_fails_the_job_naming_host_and_group(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    result = run_job(mpi_spec(tmp_path, hyperparameters={"fail_rank": RANKS - 1}), reporter=reporter)

    assert result.status == "Failed"
    reason = result.failure_reason or ""
    # mpirun runs on the master: its exit is the one that fails the job.
    assert result.failed_host == f"algo-2 ({TRAINERS})" and reason.startswith("AlgorithmError: "), reason
    logs = (result.job_dir / "logs" / "algo-2.log").read_text()
    assert f"rank {RANKS - 1} on algo-" in logs and "gives up" in logs
    assert not tagged(reporter, "MPI_JSON")

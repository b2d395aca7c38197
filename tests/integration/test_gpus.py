"""GPUs as the instance types have them, on the real engine and under the real toolkits (docs/gpus.md).

This machine has no GPU, so what runs here is the default (no GPU: a script that chooses CUDA from
SM_NUM_GPUS takes its CPU path) and `--gpus emulate` (each GPU host sees its type's GPUs through the
emulated nvidia-smi, without CUDA). The launch shape is what the toolkits make of that: SM_NUM_GPUS,
the MPI processes per host when processes_per_host is not given, torchrun's processes per node, the
smdistributed data parallel launcher's mpirun line, SM_NUM_CPUS, SM_CURRENT_INSTANCE_TYPE. The real
GPU path is tested through what the engine and compose are asked (tests/unit/test_hardware.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import invoke, unique

from emulator.jobspec import load_spec_file
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

CPU_TYPE, GPU_TYPE = "ml.c5.18xlarge", "ml.g5.12xlarge"  # 72 vCPUs, no GPU; 48 vCPUs, 4 NVIDIA A10G
GPUS, GPU_VCPUS, CPU_VCPUS = 4, 48, 72

# What each process of a host saw, as a JSON file in its host's output/data (lines several ranks print
# at once may be glued together): the toolkit's variables, the MPI or torchrun rank, what nvidia-smi
# says, and this machine's own core count.
SEEN = '''
import json, os, shutil, socket, subprocess, time

def nvidia_smi(*args):
    if shutil.which("nvidia-smi") is None:
        return None
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout.splitlines()

seen = {
    "host": socket.gethostname(),
    "group": os.environ["SM_CURRENT_INSTANCE_GROUP"],
    "type": os.environ["SM_CURRENT_INSTANCE_TYPE"],
    "sm_num_gpus": int(os.environ["SM_NUM_GPUS"]),
    "sm_num_cpus": int(os.environ["SM_NUM_CPUS"]),
    "cpu_count": os.cpu_count(),
    "rank": os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK")),
    "local_size": os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE")),
    "world": os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE")),
    "list_gpus": nvidia_smi("--list-gpus"),
    "query": nvidia_smi("--query-gpu=index,name,memory.total", "--format=csv,noheader"),
}
with open(f"/opt/ml/output/data/seen-{seen['rank'] or 'host'}.json", "w") as out:
    json.dump(seen, out)
# Long enough for the toolkit's MPI workers to see orted (emulator/run/mpi_wait.py).
time.sleep(4)
'''


def write_job(tmp_path: Path, script: str, image: str, distribution: dict[str, Any] | None, name: str,
              gpu_count: int = 2) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(script)
    raw: dict[str, Any] = {
        "job_name": name, "image_uri": image, "entry_point": "train.py", "source_dir": "code",
        "output_path": str(tmp_path / "out"),
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": CPU_TYPE, "instance_count": 1},
            {"instance_group_name": "dnn_group", "instance_type": GPU_TYPE, "instance_count": gpu_count}],
    }
    if distribution is not None:
        raw["distribution"] = {**distribution, "instance_groups": ["dnn_group"]}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def seen_lines(result: JobResult) -> list[dict[str, Any]]:
    return [json.loads(f.read_text()) for f in sorted((result.job_dir / "hosts").glob("algo-*/output/data/seen-*"))]


def toolkit_line(result: JobResult, host: str, pattern: str) -> re.Match[str]:
    text = (result.job_dir / "logs" / f"{host}.log").read_text(errors="replace")
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {host}'s log"
    return found


def test_emulated_gpus_give_the_services_mpi_launch_shape_and_cpu_hosts_none(tmp_path: Path,
                                                                               training_image: str) -> None:
    """A 2-host MPI group of a 4-GPU type with no processes_per_host: the real toolkit starts 4 ranks
    per host, as on the service; the CPU group's host sees no GPU and its type's 72 vCPUs."""
    spec = write_job(tmp_path, SEEN, training_image, {"mpi": {"enabled": True}}, unique("gpus-mpi"))
    reporter = RecordingReporter()
    result = run_job(load_spec_file(spec), RunOptions(gpus="emulate"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    # The toolkit's MPI runner on the distribution's first host (sagemaker_training/mpi.py MasterRunner).
    shape = toolkit_line(result, "algo-2", r"process_per_hosts: (\d+) num_processes: (\d+)")
    assert shape.groups() == (str(GPUS), str(2 * GPUS))
    seen = seen_lines(result)
    ranks = [s for s in seen if s["group"] == "dnn_group"]
    assert sorted(int(s["rank"]) for s in ranks) == list(range(2 * GPUS))
    assert sorted(s["host"] for s in ranks) == ["algo-2"] * GPUS + ["algo-3"] * GPUS
    for rank in ranks:
        assert (rank["type"], rank["sm_num_gpus"], rank["sm_num_cpus"]) == (GPU_TYPE, GPUS, GPU_VCPUS)
        assert (rank["local_size"], rank["world"]) == (str(GPUS), str(2 * GPUS))
        assert len(rank["list_gpus"]) == GPUS and all(g.startswith("GPU ") for g in rank["list_gpus"])
        assert [q.split(", ")[:2] for q in rank["query"]] == [[str(i), "NVIDIA A10G"] for i in range(GPUS)]
        assert rank["query"][0].endswith(" MiB")
    (data,) = [s for s in seen if s["group"] == "data_group"]
    assert (data["type"], data["sm_num_gpus"], data["sm_num_cpus"]) == (CPU_TYPE, 0, CPU_VCPUS)
    assert data["list_gpus"] is None  # no nvidia-smi at all on a CPU type
    # The script itself still counts this machine's cores (no DataLoader of 72 workers on 2 cores).
    assert {s["cpu_count"] for s in seen} == {data["cpu_count"]} and data["cpu_count"] < CPU_VCPUS
    said = [w for w in reporter.warnings if "cannot give CUDA" in w]
    assert len(said) == 1 and GPU_TYPE in said[0]


TORCH_DEVICE = '''
import os, torch
num_gpus = int(os.environ["SM_NUM_GPUS"])
# AWS's PyTorch gRPC heterogeneous example decides so: device = "cuda" if num_gpus > 0 else "cpu"
device = "cuda" if num_gpus > 0 else "cpu"
group = os.environ["SM_CURRENT_INSTANCE_GROUP"]
# One string per print: the PyTorch toolkit shows each write of the script as a line of its own.
print(f"DEVICE {group} {num_gpus} {device} {torch.cuda.is_available()}", flush=True)
x = torch.ones(3).to(device)
print(f"SUM {group} {x.sum().item()}", flush=True)
'''


def test_by_default_a_script_choosing_cuda_from_sm_num_gpus_takes_its_cpu_path_and_emulate_has_no_cuda(
        tmp_path: Path, pytorch_image: str) -> None:
    spec = load_spec_file(write_job(tmp_path, TORCH_DEVICE, pytorch_image, None, unique("gpus-default"), gpu_count=1))
    default = run_job(spec, RunOptions(), reporter=RecordingReporter())
    assert default.status == "Completed", default.failure_reason
    text = (default.job_dir / "logs" / "algo-2.log").read_text()
    assert "DEVICE dnn_group 0 cpu False" in text and "SUM dnn_group 3.0" in text
    assert "DEVICE data_group 0 cpu False" in (default.job_dir / "logs" / "algo-1.log").read_text()
    # Emulated: the count reaches the script, CUDA does not; the script's cuda path fails as it would
    # on a machine without CUDA.
    emulated = run_job(load_spec_file(write_again(tmp_path, unique("gpus-emulated"))), RunOptions(gpus="emulate"),
                       reporter=RecordingReporter())
    assert emulated.status == "Failed"
    text = (emulated.job_dir / "logs" / "algo-2.log").read_text()
    assert f"DEVICE dnn_group {GPUS} cuda False" in text
    assert "RuntimeError: Found no NVIDIA driver on your system" in text
    # Not asked of the emulated run's CPU host: algo-2's failure stops it, and under load that can be
    # before its script prints (CI saw it). That CPU types see no GPU under emulate is
    # test_emulated_gpus_give_the_services_mpi_launch_shape_and_cpu_hosts_none's.


def write_again(tmp_path: Path, name: str) -> Path:
    """The same job under another name (a job's output folder is never reused)."""
    spec = tmp_path / f"{name}.yaml"
    raw = yaml.safe_load((tmp_path / "job.yaml").read_text())
    spec.write_text(yaml.safe_dump({**raw, "job_name": name}))
    return spec


TORCHRUN = SEEN.replace("time.sleep(4)", '''
import torch, torch.distributed as dist
if "RANK" in os.environ:
    dist.init_process_group("gloo")
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    with open(f"/opt/ml/output/data/sum-{os.environ['RANK']}", "w") as out:
        out.write(str(int(total.item())))
    dist.destroy_process_group()
''')


def test_torchrun_starts_the_types_gpu_count_per_node(tmp_path: Path, pytorch_image: str) -> None:
    spec = write_job(tmp_path, TORCHRUN, pytorch_image, {"torch_distributed": {"enabled": True}},
                     unique("gpus-torchrun"))
    result = run_job(load_spec_file(spec), RunOptions(gpus="emulate"), reporter=RecordingReporter())
    assert result.status == "Completed", result.failure_reason
    # The real toolkit's torchrun command line (sagemaker_training/torch_distributed.py).
    for host in ("algo-2", "algo-3"):
        assert toolkit_line(result, host, r"--nproc_per_node[ ,']+(\d+)").group(1) == str(GPUS)
    ranks = [s for s in seen_lines(result) if s["group"] == "dnn_group"]
    assert sorted(int(s["rank"]) for s in ranks) == list(range(2 * GPUS))
    assert {(s["local_size"], s["world"], s["sm_num_gpus"]) for s in ranks} == {(str(GPUS), str(2 * GPUS), GPUS)}
    # The data group's host runs torchrun too, as a world of its own (docs/distributed.md): not counted.
    sums = [f.read_text() for host in ("algo-2", "algo-3")
            for f in (result.job_dir / "hosts" / host / "output" / "data").glob("sum-*")]
    assert sums == [str(2 * GPUS)] * 2 * GPUS


# The real toolkit's smdistributed data parallel runner, asked for the mpirun line it would start on
# the distribution's first host (smdistributed itself is only in AWS's own images).
SMDDP = '''
import json, os
from sagemaker_training import environment, runner
env = environment.Environment()
os.environ.update(env.to_env_vars())
print("TYPE", env.current_instance_type, "GPUS", env.num_gpus, flush=True)
if env.is_master:
    command = runner.get(runner.RunnerType.SMDataParallel)._create_command()
    print("SMDDP " + json.dumps(command), flush=True)
'''


def test_the_smdistributed_data_parallel_launcher_counts_the_types_gpus(tmp_path: Path,
                                                                       training_image: str) -> None:
    spec = write_job(tmp_path, SMDDP, training_image, {"smdistributed": {"dataparallel": {"enabled": True}}},
                     unique("gpus-smddp"))
    raw = yaml.safe_load(spec.read_text())
    raw["container_entry_point"] = ["python3", "/opt/ml/code/train.py"]
    spec.write_text(yaml.safe_dump(raw))
    result = run_job(load_spec_file(spec), RunOptions(gpus="emulate"), reporter=RecordingReporter())
    assert result.status == "Completed", result.failure_reason
    line = toolkit_line(result, "algo-2", r"SMDDP (.*)")
    command = json.loads(line.group(1))
    assert command[command.index("-np") + 1] == str(2 * GPUS)
    assert command[command.index("--host") + 1] == f"algo-2:{GPUS},algo-3:{GPUS}"
    assert "SAGEMAKER_INSTANCE_TYPE=" + GPU_TYPE in command
    assert toolkit_line(result, "algo-1", r"TYPE (\S+) GPUS (\d+)").groups() == (CPU_TYPE, "0")


def test_real_gpus_on_this_engine_are_refused_before_anything_starts(tmp_path: Path, docker_client: Any) -> None:
    """This engine has no GPU runtime: `--gpus real` is one line naming what to install, exit 3, no
    container, no job folder."""
    name = unique("gpus-real")
    spec = write_job(tmp_path, "print('never')\n", "hetero-emu/training:py311", None, name)
    result = invoke("run", spec, "--gpus", "real")
    assert result.returncode == 3
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == "error: --gpus real: the Docker engine has no GPU runtime (NVIDIA's container toolkit)", lines
    assert "nvidia-ctk runtime configure" in result.stderr and "Traceback" not in result.stderr
    # This job's containers only: the other Docker workers make and remove their own meanwhile.
    assert [c.name for c in docker_client.containers.list(all=True) if name in c.name] == []
    assert not (tmp_path / "out").exists()

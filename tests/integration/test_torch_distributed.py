"""`distribution: torch_distributed` in a PyTorch framework image (emulator/training_images/frameworks.py),
through the real toolkits
(issue 9, parts 3 and 6b): sagemaker-training's `train` hands the job to
sagemaker_pytorch_container.training:main, whose TorchDistributedRunner starts `torchrun` on the
distribution group's hosts; every rank runs a gloo all_reduce across hosts and checks the sum itself.

What the other group does is the toolkits' doing too: for torch_distributed the SDK writes no
`sagemaker_distribution_instance_groups` (docs/contract.md), so sagemaker-training's
`Environment.get_distribution_instance_groups_from_resource_config` names each host's own group, and
the other group's host also runs `torchrun`, as a one-host world of its own, never joining the first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import load_spec_file
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

# Each rank: the torchrun environment, then a gloo all_reduce of rank+1 over the world. The script
# checks the sum itself (a wrong one fails the job) and leaves what it saw in its host's output/data.
SCRIPT = """
import json, os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
want = world * (world + 1) / 2
seen = {"host": socket.gethostname(), "group": os.environ["SM_CURRENT_INSTANCE_GROUP"], "rank": rank,
        "world": world, "local_rank": int(os.environ["LOCAL_RANK"]), "master": os.environ["MASTER_ADDR"],
        "port": os.environ["MASTER_PORT"], "sum": value.item(), "want": want}
with open(f"/opt/ml/output/data/rank-{rank}.json", "w") as out:
    json.dump(seen, out)
dist.destroy_process_group()
if value.item() != want:
    sys.exit(f"all_reduce gave {value.item()}, want {want}")
"""

SPEC = """\
job_name: {name}
image_uri: {image}
entry_point: train.py
source_dir: code
output_path: out
instance_groups:
  - {{instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1}}
  - {{instance_group_name: dnn_group, instance_type: ml.g5.xlarge, instance_count: 2}}
distribution:
  torch_distributed: {{enabled: true}}
  instance_groups: [dnn_group]
"""


def ranks_seen(job_dir: Path) -> list[dict[str, Any]]:
    files = sorted((job_dir / "hosts").glob("algo-*/output/data/rank-*.json"))
    return [json.loads(f.read_text()) for f in files]


@pytest.mark.parametrize("host_order", ["spec", "shuffled"])
def test_torchrun_all_reduce_across_the_distribution_group(tmp_path: Path, pytorch_image: str,
                                                           host_order: str) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(SPEC.format(name=f"torchrun-{host_order}", image=pytorch_image))
    reporter = RecordingReporter()
    # Seed 1 puts the distribution group on algo-3 and algo-1, around the other group's algo-2.
    seed = 1 if host_order == "shuffled" else None
    result = run_job(load_spec_file(spec_file), RunOptions(host_order=host_order, seed=seed), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    (data_host,) = [h.host for h in result.hosts if h.group == "data_group"]
    config = json.loads((result.job_dir / "hosts" / data_host / "input/config/resourceconfig.json").read_text())
    (dnn_hosts,) = [g["hosts"] for g in config["instance_groups"] if g["instance_group_name"] == "dnn_group"]
    assert sorted(dnn_hosts) == sorted(h.host for h in result.hosts if h.group == "dnn_group")
    # The toolkit's master is the first host of the distribution group as the resource config lists it.
    master = dnn_hosts[0]

    # The command each host's toolkit logged (in its log file: the console folds the toolkit's
    # environment block, that command included): torchrun, one process per host (no GPU here, so the
    # toolkit's default, as on a CPU instance), node ranks in the group's host order.
    commands = {h.host: line.strip() for h in result.hosts
                for line in (result.job_dir / "logs" / f"{h.host}.log").read_text().splitlines()
                if line.strip().startswith("torchrun ")}
    for node_rank, host in enumerate(dnn_hosts):
        assert commands[host] == (f"torchrun --nnodes 2 --nproc_per_node 1 --master_addr {master} "
                                  f"--master_port 7777 --node_rank {node_rank} train.py")
    assert commands[data_host] == "torchrun --nnodes 1 --nproc_per_node 1 train.py"

    seen = ranks_seen(result.job_dir)
    dnn = sorted((s for s in seen if s["group"] == "dnn_group"), key=lambda s: s["rank"])
    # One world of 2 hosts x 1 process across the containers, summed by gloo.
    assert [(s["host"], s["rank"], s["world"], s["local_rank"]) for s in dnn] == \
        [(host, rank, 2, 0) for rank, host in enumerate(dnn_hosts)]
    assert all(s["sum"] == 3.0 and s["master"] == master and s["port"] == "7777" for s in dnn)
    # The other group's host ran alone: a world of its own that never joined the distribution group's.
    (data,) = [s for s in seen if s["group"] == "data_group"]
    assert (data["host"], data["rank"], data["world"], data["sum"]) == (data_host, 0, 1, 1.0)

"""What a finished job leaves: model.tar.gz, output.tar.gz and job.json (DescribeTrainingJob's shape)."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from emulator import contract, hostfiles
from emulator.plan import Plan
from emulator.secrets import Masker, mask_environment


@dataclass(frozen=True)
class HostResult:
    host: str
    group: str
    instance_type: str
    exit_code: int | None
    seconds: float
    failure_reason: str | None = None


@dataclass(frozen=True)
class JobResult:
    job_name: str
    status: str  # Completed | Failed | Stopped
    failure_reason: str | None
    hosts: tuple[HostResult, ...]
    job_dir: Path
    model_artifact: Path | None
    output_artifact: Path | None
    start: datetime
    end: datetime
    secondary_status: str = ""
    seed: int | None = None

    @property
    def exit_code(self) -> int:
        return {"Completed": 0, "Stopped": 130}.get(self.status, 1)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def merge_tree(plan: Plan, relative: str, archive: Path) -> Path:
    """Tar every host's `/opt/ml/<relative>` into one archive, in host order.

    Paths are relative to the folder, as the service packs /opt/ml/model. Hosts write into the same
    archive in host order; where two hosts wrote the same path, the later host wins, as later uploads
    of the same S3 key do.

    Only regular files are packed, and no link is followed (see `emulator.hostfiles`): the script
    owns the host's folder, and a link it planted (`/opt/ml/model -> /etc`) would resolve in the
    host's filesystem here. A FIFO or device is skipped, never read.
    """
    chosen: dict[str, Path] = {}
    for host in plan.hosts:
        root = hostfiles.host_path(Path(host.host_dir), relative)
        if root is None:
            continue
        for name, path in hostfiles.regular_files(root):
            chosen[name] = path
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name in sorted(chosen):
            # None also for a file root wrote with mode 600, which stays unreadable to a user who is
            # not root when its ownership could not be fixed (runner.fix_ownership warns): leave it
            # out, not crash.
            file = hostfiles.open_regular(chosen[name])
            if file is None:
                continue
            with file:
                # From the open descriptor (fstat), not the name: what is packed is what was checked.
                tar.addfile(tar.gettarinfo(arcname=name, fileobj=file), file)
    return archive


def collect(plan: Plan) -> tuple[Path, Path]:
    out = Path(plan.job_dir) / "output"
    return merge_tree(plan, "model", out / "model.tar.gz"), merge_tree(plan, "output/data", out / "output.tar.gz")


def describe(plan: Plan, result: JobResult) -> dict[str, Any]:
    """job.json: the DescribeTrainingJob response shape, plus one entry per host.

    Secrets are masked (see `emulator.secrets`): Environment by name, the FailureReasons by value,
    since a host's /opt/ml/output/failure or last log lines may quote a secret.
    """
    spec = plan.spec
    masker = Masker(spec.environment, *(h.environment for h in plan.hosts))

    def reason(text: str | None) -> str | None:
        return masker.mask_truncated(text) if text else text

    doc: dict[str, Any] = {
        "TrainingJobName": plan.job_name,
        "TrainingJobArn": contract.training_job_arn(plan.job_name, spec.region),
        "TrainingJobStatus": result.status,
        "SecondaryStatus": result.secondary_status or result.status,
        "AlgorithmSpecification": {
            "TrainingImage": plan.image,
            "TrainingInputMode": spec.input_mode,
            **({"ContainerEntrypoint": list(plan.entrypoint)} if plan.entrypoint is not None else {}),
            **({"ContainerArguments": list(plan.command)} if spec.container_arguments else {}),
        },
        "HyperParameters": contract.hyperparameters(spec, plan.job_name),
        "ResourceConfig": contract.describe_resource_config(spec),
        "InputDataConfig": contract.describe_input_data_config(spec),
        "OutputDataConfig": {"S3OutputPath": str(spec.output_path)},
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_run},
        "EnableNetworkIsolation": spec.enable_network_isolation,
        "TrainingStartTime": result.start.isoformat(),
        "TrainingEndTime": result.end.isoformat(),
        "TrainingTimeInSeconds": int(round(result.seconds)),
        "Environment": mask_environment(spec.environment),
        "Emulator": {"HostOrder": plan.host_order, "Seed": plan.seed, "Network": plan.network},
        "Hosts": [
            {
                "Host": h.host,
                "InstanceGroupName": h.group,
                "InstanceType": h.instance_type,
                "ExitCode": h.exit_code,
                "FailureReason": reason(h.failure_reason),
                "Seconds": round(h.seconds, 3),
            }
            for h in result.hosts
        ],
    }
    if result.failure_reason:
        doc["FailureReason"] = reason(result.failure_reason)
    if result.model_artifact is not None:
        doc["ModelArtifacts"] = {"S3ModelArtifacts": str(result.model_artifact)}
    if spec.checkpoint_s3_uri is not None:
        doc["CheckpointConfig"] = {"S3Uri": str(spec.checkpoint_s3_uri), "LocalPath": spec.checkpoint_local_path}
    return doc


def write_description(plan: Plan, result: JobResult) -> Path:
    path = Path(plan.job_dir) / "job.json"
    path.write_text(contract.dumps(describe(plan, result)))
    return path

"""The AWS services the emulator answers, put together: for a job's own hosts (`job_endpoint`, which
the job's driver serves on the job's socket while the hosts run: `serve_job_endpoint`,
emulator/run/job_aws.py). The library's `api.run` hands `serve_job_endpoint` to the runner, so the
runner never reaches up to the services that start jobs themselves."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.aws.endpoint import Endpoint


def job_endpoint(s3_root: Path, region: str, engine_name: str) -> Endpoint:
    """The endpoint a job's hosts reach: every service `hetero-emu serve` answers, on the job's S3 root
    and region, with what a remote client of `serve` may name (S3 locations only)."""
    # Imported here, when a host first calls AWS: `api` imports this module for every command, and
    # the services (botocore's session among them) would add ~50 ms to each start of `hetero-emu`.
    from emulator.aws.cloudwatch import CloudWatch
    from emulator.aws.endpoint import Endpoint
    from emulator.aws.iam import IAM
    from emulator.aws.logs import Logs
    from emulator.aws.s3 import S3
    from emulator.aws.sts import STS
    from emulator.aws.training import SageMakerTraining
    from emulator.jobspec.request import HostPaths

    training = SageMakerTraining(s3_root, region=region, engine_name=engine_name, s3_origin="the job's S3 root",
                                 host_paths=HostPaths.only(()))
    return Endpoint([training, S3(s3_root, region=region), STS(), IAM(), Logs(region=region), CloudWatch()], region)


@contextlib.contextmanager
def serve_job_endpoint(s3_root: Path, region: str, folder: Path, *, engine_name: str) -> Iterator[Path]:
    """The job's endpoint (`job_endpoint`, made at a host's first call) answering on the Unix socket in
    `folder` while the block runs; the socket's path."""
    from emulator.aws.job_endpoint import serving

    with serving(lambda: job_endpoint(s3_root, region, engine_name), folder) as path:
        yield path

"""`EmulatorSessionV3`: the SageMaker Python SDK v3's Session (`sagemaker.core.helper.session_helper`),
served by the emulator, for `ModelTrainer` code.

Pass it as `ModelTrainer(sagemaker_session=...)` and the user's v3 code runs unchanged: `Compute(
instance_groups=[InstanceGroup(...), ...])`, `InputData(..., data_source=S3DataSource(...,
instance_group_names=[...]))`, `SourceCode(source_dir=..., entry_script=...)`, `train(wait=True,
logs=True)`. It needs no AWS account, credentials or network: every call its boto3 session's
clients make is answered locally (`emulator.sagemaker.local`), so the SDK does all it does on the
service (its role check, the code and driver uploads, the request, its wait loop and the error a
failed job raises) and only the answers are local.

One part of v3 does not go through the session: the CloudWatch Logs client that `TrainingJob.wait(
logs=True)` reads the hosts' output with is one per process, made from a fresh boto3 session
(`sagemaker.core.utils.logs.CloudWatchLogsClient`). Each EmulatorSessionV3 sets it to a client of its
own boto3 session; the jobs' logs are found by job name, whichever session started the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sagemaker.core.config.config import load_sagemaker_config
from sagemaker.core.helper.session_helper import Session
from sagemaker.core.utils.logs import CloudWatchLogsClient

from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import UsageError
from emulator.run import prebuild
from emulator.sagemaker.local import LogsWithWarnings, local_aws, telemetry_off


class EmulatorSessionV3(Session):  # type: ignore[misc]  # the SDK is untyped
    """A v3 `Session` whose training jobs run on this machine's Docker engine.

    `s3_root`, `images`, `region`, `engine`, `gpus`, `cpus` and `inject` as for `EmulatorSession` (SDK v2): the folder
    s3://bucket/key maps to, ECR image names -> local images, the region the SDK names buckets
    and images for. Other keyword arguments go to the SDK's `Session` (`default_bucket`,
    `default_bucket_prefix`, ...).
    """

    def __init__(self, *, s3_root: Path | str | None = None, images: Mapping[str, str] | None = None,
                 region: str | None = None, engine: str = DEFAULT_ENGINE, gpus: str | None = None,
                 cpus: str = "instance", inject: Sequence[str] = (), **session_args: Any) -> None:
        aws = local_aws(s3_root=s3_root, images=images, region=region, engine=engine,
                        origin="EmulatorSessionV3(s3_root=...)", gpus=gpus, cpus=cpus, inject=inject)
        self.s3_root = aws.s3_root
        self.training = aws.training
        super().__init__(boto_session=aws.boto_session, sagemaker_config=telemetry_off(load_sagemaker_config()),
                         **session_args)
        # Wrapped: the job's driver warnings (a fault injected, a flood, clashing model files) are
        # printed as train(logs=True) reads the job's streams, as EmulatorSession's fit() prints them.
        use_logs_client(LogsWithWarnings(aws.boto_session.client("logs"), aws.training))


    def prebuild(self, model_trainer: Any, *, rebuild: bool = False, progress: Callable[[str], None] = print) -> Any:
        """Build the image `model_trainer.train()` would run (its `training_image`, by this session's
        `images`; emulator/run/prebuild.py), or nothing when it is up to date: `EmulatorSession.prebuild`'s
        counterpart."""
        image = getattr(model_trainer, "training_image", None)
        if not isinstance(image, str) or not image:
            raise UsageError("prebuild: the ModelTrainer names no training_image",
                             hint="give ModelTrainer(training_image=...), as train() needs it")
        return prebuild.build_for(image, images=self.training.images, rebuild=rebuild, progress=progress)


def use_logs_client(client: Any) -> None:
    """Make `client` the process's CloudWatch Logs client for v3's log readers: the class attribute
    for the one not made yet, the made one's attribute for the one that exists (a reader takes the
    client when it is made, so jobs already being followed keep theirs)."""
    CloudWatchLogsClient.client = client
    CloudWatchLogsClient().client = client

"""What a training job's record is made of, whichever front end made the job: the CreateTrainingJob
request it describes, and its ARN. Pure: the run writes them into the job's record
(`emulator.state.job_records`), the jobs layer (`emulator.jobs.service`) reads them back.

DescribeTrainingJob echoes the job's request for the job's whole life (the service's answer is the
request plus status, times and results). A job asked for through a session (SDK v2/v3, `serve`) has
its request as sent; a job from a spec (`hetero-emu run`, the Python `Job`, the pytest plugin)
becomes the request the SDK would have sent for it (`emulator.jobspec.request.request_from_spec`), once,
when its run first records it. So the running job, the ended job's job.json and every answer say the
same spot, MaxWait, keep-alive and retry settings, with one ARN in the job's own region.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from emulator.jobspec import JobSpec, hyperparameters
from emulator.jobspec.request import request_from_spec
from emulator.planning import contract
from emulator.planning.secrets import mask_environment

# Request keys DescribeTrainingJob does not echo.
NOT_DESCRIBED = ("Tags",)


def echoed(params: Mapping[str, Any]) -> dict[str, Any]:
    """What DescribeTrainingJob echoes of a request: all but its tags, in plain JSON types."""
    doc: dict[str, Any] = json.loads(json.dumps({k: v for k, v in params.items() if k not in NOT_DESCRIBED},
                                                 default=str))
    return doc


def described_request(spec: JobSpec, job_name: str) -> dict[str, Any]:
    """The request a spec's job describes: the SDK's request for it (`request_from_spec`), with its
    locations as the spec gave them (an s3:// URI stays one; a local folder is its path), the
    hyperparameters as the hosts get them, the image as the job named it and secrets masked, as
    job.json has always described them."""
    asked = echoed(request_from_spec(spec, job_name))
    asked["AlgorithmSpecification"]["TrainingImage"] = spec.requested_image or spec.image_uri
    asked["HyperParameters"] = hyperparameters.encoded(spec, job_name)
    asked["OutputDataConfig"]["S3OutputPath"] = spec.output_s3_uri or str(spec.output_path)
    inputs = contract.describe_input_data_config(spec)
    if inputs:
        asked["InputDataConfig"] = inputs
    if "CheckpointConfig" in asked:
        asked["CheckpointConfig"]["S3Uri"] = spec.checkpoint_uri or str(spec.checkpoint_s3_uri)
    if "TensorBoardOutputConfig" in asked:
        asked["TensorBoardOutputConfig"]["S3OutputPath"] = (spec.tensorboard_uri
                                                             or str(spec.tensorboard_output_path))
    if "Environment" in asked:
        asked["Environment"] = mask_environment(spec.environment)
    return asked


def first_fields(spec: JobSpec, job_name: str, *, asked: bool) -> dict[str, Any]:
    """The fields a run adds to its job's record the first time it writes it: the job's ARN in the
    job's region, and (`asked` False: a spec's job, which no CreateTrainingJob recorded) its request."""
    fields: dict[str, Any] = {"TrainingJobArn": contract.training_job_arn(job_name, spec.region)}
    if not asked:
        fields["Request"] = described_request(spec, job_name)
    return fields


def merged(under: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` with what `under` has besides: a structure both have is merged one level deep, `over`'s
    members winning. A job.json over its spec's request; a session's request over its job.json, as
    DescribeTrainingJob echoes the request as it was sent (`MaxWaitTimeInSeconds`, `MetricDefinitions`,
    the S3 URI of `sagemaker_submit_directory`) beside what the run adds to the same structures."""
    doc = dict(under)
    for key, value in over.items():
        here = doc.get(key)
        doc[key] = {**here, **value} if isinstance(value, Mapping) and isinstance(here, Mapping) else value
    return doc

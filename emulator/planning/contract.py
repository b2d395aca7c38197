"""The files SageMaker writes under /opt/ml/input/config, as pure functions of the plan's facts.

The plan lays out the hosts (names, groups, order, channels) and then asks `host_files` once per
host; nothing here calls back into the plan.

Every key here is one the service writes and the `sagemaker-training` toolkit reads; see
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-running-container.html
and sagemaker_training/environment.py (read_resource_config, read_hyperparameters,
read_input_data_config); and, when the request configures SageMaker Debugger, the hook's and the
profiler's config files smdebug reads (emulator/planning/sm_debugger.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from emulator.jobspec import JobSpec, TrainingInput, hyperparameters

CONFIG_DIR = "input/config"  # relative to /opt/ml

Cluster = Sequence[tuple[str, str, Sequence[str]]]  # (group name, instance type, hosts) in spec order


def dumps(document: Any) -> str:
    """The one JSON encoding of every file we write: sorted keys, stable, newline-terminated."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def host_files(spec: JobSpec, job_name: str, groups: Cluster, host: str, channels: Sequence[str]) -> dict[str, str]:
    """Everything one host gets under /opt/ml/input/config: path relative to /opt/ml -> content.

    `groups` is the whole cluster as laid out by the plan, `channels` the channels `host` receives.
    """
    group, instance_type = next((name, itype) for name, itype, hosts in groups if host in hosts)
    files = {
        f"{CONFIG_DIR}/resourceconfig.json": dumps(resource_config(host, group, instance_type, groups)),
        f"{CONFIG_DIR}/hyperparameters.json": dumps(hyperparameters.encoded(spec, job_name)),
        f"{CONFIG_DIR}/inputdataconfig.json": dumps(input_data_config(spec, channels)),
    }
    # The request's DebugHookConfig and ProfilerConfig, with the API's member names, where smdebug
    # reads them: DEFAULT_CONFIG_FILE_PATH (awslabs/sagemaker-debugger smdebug/core/config_constants.py:4)
    # and CONFIG_PATH_DEFAULT (smdebug/profiler/profiler_constants.py:51); docs/contract.md.
    for name, config in (("debughookconfig.json", spec.debug_hook), ("profilerconfig.json", spec.profiler)):
        if config is not None:
            files[f"{CONFIG_DIR}/{name}"] = dumps(json.loads(config.document))
    # CheckpointConfig and TensorBoardOutputConfig as a real job's files hold them ({"LocalPath":"/state"};
    # {"S3OutputPath":"<S3OutputPath>/<job>/tensorboard-output","LocalPath":"/opt/ml/output/tensorboard/"}:
    # shiftan/simple_sagemaker examples/single_task/expected_output/.../input_dir_copy/config/), where
    # smdebug reads their LocalPath: DEFAULT_CHECKPOINT_CONFIG_FILE and DEFAULT_SAGEMAKER_TENSORBOARD_PATH
    # (awslabs/sagemaker-debugger smdebug/core/config_constants.py:22-26); docs/contract.md.
    if spec.checkpoint_s3_uri is not None:
        files[f"{CONFIG_DIR}/checkpointconfig.json"] = dumps({"LocalPath": spec.checkpoint_local_path})
    if spec.tensorboard_output_path is not None:
        files[f"{CONFIG_DIR}/tensorboardoutputconfig.json"] = dumps(
            {"LocalPath": spec.tensorboard_local_path.rstrip("/") + "/",
             "S3OutputPath": f"{tensorboard_uri(spec).rstrip('/')}/{job_name}/{TENSORBOARD_PREFIX}"})
    return files


#: Where a job's TensorBoard files go under the TensorBoardOutputConfig's S3OutputPath, below the job's
#: name: the SDK's `latest_job_tensorboard_artifacts_path()` (sagemaker/estimator.py).
TENSORBOARD_PREFIX = "tensorboard-output"


def tensorboard_uri(spec: JobSpec) -> str:
    """The TensorBoardOutputConfig's S3OutputPath as the request gave it (its folder for a local path)."""
    return spec.tensorboard_uri or str(spec.tensorboard_output_path)


def resource_config(current_host: str, current_group: str, current_type: str, groups: Cluster) -> dict[str, Any]:
    """resourceconfig.json for one host.

    `current_group_name` is the service's key: the toolkit reads exactly that and silently falls back
    to "homogeneousCluster" otherwise (environment.py, `resource_config.get("current_group_name", ...)`).
    `instance_groups` is identical on every host and in the same order, because the toolkit derives
    the distribution master and the ranks from it.
    """
    all_hosts = sorted((h for _, _, hosts in groups for h in hosts), key=host_sort_key)
    return {
        "current_host": current_host,
        "current_instance_type": current_type,
        "current_group_name": current_group,
        "hosts": all_hosts,
        "instance_groups": [
            {"instance_group_name": name, "instance_type": itype, "hosts": list(hosts)}
            for name, itype, hosts in groups
        ],
        "network_interface_name": "eth0",
    }


def host_sort_key(host: str) -> tuple[str, int]:
    """algo-2 before algo-10."""
    prefix, _, number = host.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (host, 0)


def channel_config(channel: TrainingInput, job_input_mode: str) -> dict[str, str]:
    """One entry of inputdataconfig.json, as the service writes it. The toolkit reads it back as
    `Environment().input_data_config` (sagemaker_training/environment.py read_input_data_config); a
    Pipe channel's reader (sagemaker-tensorflow-extensions' PipeModeDataset) needs no more than its
    name, its FIFOs being `/opt/ml/input/data/<channel>_<epoch>`."""
    entry = {
        "TrainingInputMode": channel.input_mode or job_input_mode,
        "S3DistributionType": channel.distribution,
        "RecordWrapperType": channel.record_wrapping,
    }
    if channel.content_type:
        entry["ContentType"] = channel.content_type
    return entry


def input_data_config(spec: JobSpec, channels: Sequence[str]) -> dict[str, dict[str, str]]:
    """inputdataconfig.json for a host: only the channels assigned to its group."""
    return {name: channel_config(spec.inputs[name], spec.input_mode) for name in channels}


def describe_resource_config(spec: JobSpec) -> dict[str, Any]:
    """DescribeTrainingJob's ResourceConfig for this job."""
    if not spec.heterogeneous:
        group = spec.instance_groups[0]
        return {"InstanceCount": group.instance_count, "InstanceType": group.instance_type, "VolumeSizeInGB": 30}
    return {
        "InstanceGroups": [
            {"InstanceCount": g.instance_count, "InstanceGroupName": g.instance_group_name,
             "InstanceType": g.instance_type}
            for g in spec.instance_groups
        ],
        "VolumeSizeInGB": 30,
    }


def describe_input_data_config(spec: JobSpec) -> list[dict[str, Any]]:
    """DescribeTrainingJob's InputDataConfig for this job (S3Uri shows the local source)."""
    out = []
    for name, channel in spec.inputs.items():
        source: dict[str, Any] = {
            "S3DataDistributionType": channel.distribution,
            "S3DataType": channel.s3_data_type,
            "S3Uri": channel.s3_data,
        }
        if channel.instance_groups:
            source["InstanceGroupNames"] = list(channel.instance_groups)
        entry: dict[str, Any] = {
            "ChannelName": name,
            "CompressionType": "None",
            "DataSource": {"S3DataSource": source},
            "InputMode": channel.input_mode or spec.input_mode,
            "RecordWrapperType": channel.record_wrapping,
        }
        if channel.content_type:
            entry["ContentType"] = channel.content_type
        out.append(entry)
    return out


def training_job_arn(job_name: str, region: str) -> str:
    # A fixed, obviously-fake account id: nothing here talks to AWS.
    return f"arn:aws:sagemaker:{region}:000000000000:training-job/{job_name.lower()}"

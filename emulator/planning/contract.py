"""The files SageMaker writes under /opt/ml/input/config, as pure functions of the plan's facts.

The plan lays out the hosts (names, groups, order, channels) and then asks `host_files` once per
host; nothing here calls back into the plan.

Every key here is one the service writes and the `sagemaker-training` toolkit reads; see
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-running-container.html
and sagemaker_training/environment.py (read_resource_config, read_hyperparameters,
read_input_data_config); and, when the request configures SageMaker Debugger, the hook's and the
profiler's config files smdebug reads (emulator/run/sm_debugger.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.jobspec import Distribution, JobSpec, TrainingInput
from emulator.jobspec.model import strategy_enabled as _enabled

CODE_DIR = "/opt/ml/code"
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
        f"{CONFIG_DIR}/hyperparameters.json": dumps(hyperparameters(spec, job_name)),
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


def distribution_hyperparameters(distribution: Distribution, instance_type: str | None) -> dict[str, Any]:
    """The `sagemaker_*` keys (and `mp_parameters`) the SDK v2's framework estimators add for `distribution=`.

    Follows SDK v2 (2.257): `PyTorch.__init__` rewrites `pytorchddp` to `smdistributed.dataparallel`
    (since 2.221.1); `PyTorch._pytorch_distribution_configuration` writes, for an enabled
    `torch_distributed`, its flag and the estimator's `instance_type` alone; everything else goes through
    `Framework._distribution_configuration`. `instance_type` is the estimator's, None for a job built
    with instance groups: the SDK then writes `sagemaker_instance_type` as JSON null for `smdistributed`
    and leaves it out for `torch_distributed`.
    """
    options = _sdk_options(distribution)
    torch_distributed = _enabled(options.get("torch_distributed"))
    if torch_distributed and "smdistributed" not in options:
        torch_out: dict[str, Any] = {"sagemaker_torch_distributed_enabled": True}
        if instance_type is not None:
            torch_out["sagemaker_instance_type"] = instance_type
        return torch_out
    out: dict[str, Any] = {}
    if distribution.instance_groups:
        out["sagemaker_distribution_instance_groups"] = list(distribution.instance_groups)
    if "parameter_server" in options:
        out["sagemaker_parameter_server_enabled"] = _enabled(options["parameter_server"])
    if "mpi" in options:
        mpi = options["mpi"]
        out["sagemaker_mpi_enabled"] = _enabled(mpi)
        if mpi.get("processes_per_host"):
            out["sagemaker_mpi_num_of_processes_per_host"] = mpi["processes_per_host"]
        out["sagemaker_mpi_custom_mpi_options"] = mpi.get("custom_mpi_options", "")
    if "smdistributed" in options:
        smd = options["smdistributed"]
        model_parallel = smd.get("modelparallel", {})
        if _enabled(model_parallel) and model_parallel.get("parameters"):
            out["mp_parameters"] = model_parallel["parameters"]
        data_parallel = smd.get("dataparallel", {})
        out["sagemaker_distributed_dataparallel_enabled"] = _enabled(data_parallel)
        out["sagemaker_instance_type"] = instance_type
        if _enabled(data_parallel):
            out["sagemaker_distributed_dataparallel_custom_mpi_options"] = data_parallel.get("custom_mpi_options", "")
    if "multi_worker_mirrored_strategy" in options:
        out["sagemaker_multi_worker_mirrored_strategy_enabled"] = _enabled(options["multi_worker_mirrored_strategy"])
    if torch_distributed:
        # SMP v2 / p5: the smdistributed keys above, then torchrun's flag (sagemaker_instance_type is
        # already the estimator's, null on instance groups).
        out["sagemaker_torch_distributed_enabled"] = True
    return out


def _sdk_options(distribution: Distribution) -> dict[str, Any]:
    """The strategies as the SDK v2 sends them: `pytorchddp` rewritten to smdistributed data parallel."""
    options: dict[str, Any] = dict(distribution.options)
    if "pytorchddp" in options:
        options["smdistributed"] = {"dataparallel": options.pop("pytorchddp")}
    return options


def launches_over_mpi(distribution: Distribution | None) -> bool:
    """Whether the toolkit starts the script with `mpirun` over SSH: an enabled `mpi`
    (sagemaker_training/trainer.py `train`: `sagemaker_mpi_enabled` picks the MPI runner), smdistributed
    data parallel (its runner, sagemaker_training/smdataparallel.py, is `mpirun` too; `pytorchddp` is
    rewritten to it) or model parallel v1 (which runs on MPI: the SDK docs have it enabled with `mpi`).
    Model parallel v2 comes with `torch_distributed` and runs under torchrun instead."""
    if distribution is None:
        return False
    options = _sdk_options(distribution)
    smd = options.get("smdistributed")
    smd = smd if isinstance(smd, Mapping) else {}
    if _enabled(options.get("mpi")) or _enabled(smd.get("dataparallel")):
        return True
    return _enabled(smd.get("modelparallel")) and not _enabled(options.get("torch_distributed"))



def hyperparameters(spec: JobSpec, job_name: str) -> dict[str, str]:
    """hyperparameters.json: string -> string, every value `json.dumps`-encoded as the SDK does.

    The SDK encodes each value with json.dumps (sagemaker/estimator.py `Framework.hyperparameters` /
    `_json_encode_hyperparameters`) and the toolkit decodes with json.loads, falling back to the raw
    string (sagemaker_training/mapping.py).
    """
    values: dict[str, Any] = dict(spec.hyperparameters)
    if spec.entry_point is not None:
        values["sagemaker_program"] = spec.entry_point
        # The toolkit skips downloading when the submit directory already is /opt/ml/code and is not
        # empty (sagemaker_training/files.py `download_and_extract`), so the mount is used as is.
        values["sagemaker_submit_directory"] = CODE_DIR
    values["sagemaker_container_log_level"] = spec.container_log_level
    values["sagemaker_job_name"] = job_name
    values["sagemaker_region"] = spec.region
    if spec.distribution is not None:
        # The SDK's estimator has an instance_type only when it is built without instance groups.
        estimator_type = None if spec.heterogeneous else spec.instance_groups[0].instance_type
        values.update(distribution_hyperparameters(spec.distribution, estimator_type))
    # A request's HyperParameters are the API's strings already: written as given, not encoded twice.
    given = {key: value if spec.hyperparameters_encoded else json.dumps(value) for key, value in values.items()
             if key in spec.hyperparameters}
    written = {**given, **{key: json.dumps(value) for key, value in values.items() if key not in given}}
    if spec.request_hyperparameters is not None:
        # A request: the keys it had, no more (the code's place among them is /opt/ml/code, as above).
        return {key: value for key, value in written.items() if key in spec.request_hyperparameters}
    return written


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

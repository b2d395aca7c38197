"""A CreateTrainingJob request as input: the boto3 `create_training_job(**request)` mapping, from a JSON
or YAML file, converted to the internal mapping and checked by the same `Validator` rules, with every
problem named in the request's own words (`ResourceConfig.InstanceGroups[1].InstanceCount`,
`InputDataConfig[0].DataSource.S3DataSource.S3Uri`) through the `field_name` hook.

Also the way back (`request_from_spec`): the request a validated spec corresponds to, as the SDK would
send it (`hetero-emu render --as-request`).

The code comes as the SDK sends it: the `sagemaker_program` and `sagemaker_submit_directory`
hyperparameters. A local folder (a path or file:// URI) or a single script is used as it is; a
`sourcedir.tar.gz` (s3:// under the local S3 root, or local) is unpacked into each host's /opt/ml/code.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from emulator.errors import Problem, SpecError
from emulator.jobspec import debugger_config, hyperparameters
from emulator.jobspec.model import INPUT_DATA, JobSpec
from emulator.jobspec.paths import BadPath, parse_uri, resolve_path
from emulator.jobspec.probes import DISK, Probes
from emulator.jobspec.rules import Validator
from emulator.jobspec.wording import key_text, preview, type_name
from emulator.jobspec.yaml_loader import parse_yaml, read_spec_text

# Keys the emulator runs the job with; the others the API has are accepted and unused.
REQUEST_KEYS = (
    "TrainingJobName",
    "AlgorithmSpecification",
    "HyperParameters",
    "Environment",
    "InputDataConfig",
    "ResourceConfig",
    "OutputDataConfig",
    "CheckpointConfig",
    "StoppingCondition",
    "EnableNetworkIsolation",
    "EnableManagedSpotTraining",
    "RetryStrategy",
    "TensorBoardOutputConfig",
    "DebugHookConfig",
    "ProfilerConfig",
)
UNUSED_KEYS = (
    "RoleArn",
    "Tags",
    "VpcConfig",
    "EnableInterContainerTrafficEncryption",
    "DebugRuleConfigurations",
    "ProfilerRuleConfigurations",
    "ExperimentConfig",
    "RemoteDebugConfig",
    "InfraCheckConfig",
    "SessionChainingConfig",
)
ALGORITHM_KEYS = ("TrainingImage", "TrainingInputMode", "ContainerEntrypoint", "ContainerArguments",
                  "MetricDefinitions", "EnableSageMakerMetricsTimeSeries", "TrainingImageConfig")
RESOURCE_KEYS = ("InstanceGroups", "InstanceType", "InstanceCount", "VolumeSizeInGB", "VolumeKmsKeyId",
                 "KeepAlivePeriodInSeconds")
GROUP_KEYS = {"InstanceGroupName": "instance_group_name", "InstanceType": "instance_type",
              "InstanceCount": "instance_count"}
CHANNEL_KEYS = ("ChannelName", "DataSource", "ContentType", "InputMode", "CompressionType", "RecordWrapperType",
                "ShuffleConfig")
S3_SOURCE_KEYS = {"S3Uri": "s3_data", "S3DataType": "s3_data_type", "S3DataDistributionType": "distribution",
                  "InstanceGroupNames": "instance_groups", "AttributeNames": ""}
OUTPUT_KEYS = ("S3OutputPath", "KmsKeyId", "CompressionType")
CHECKPOINT_KEYS = ("S3Uri", "LocalPath")
TENSORBOARD_KEYS = ("S3OutputPath", "LocalPath")
DEBUG_HOOK_KEYS = ("S3OutputPath", "LocalPath", "HookParameters", "CollectionConfigurations")
PROFILER_KEYS = ("S3OutputPath", "ProfilingIntervalInMilliseconds", "ProfilingParameters", "DisableProfiler")
STOPPING_KEYS = ("MaxRuntimeInSeconds", "MaxWaitTimeInSeconds", "MaxPendingTimeInSeconds")

DISTRIBUTION_FLAGS = {
    "sagemaker_torch_distributed_enabled": "torch_distributed",
    "sagemaker_pytorch_ddp_enabled": "pytorchddp",
    "sagemaker_parameter_server_enabled": "parameter_server",
    "sagemaker_multi_worker_mirrored_strategy_enabled": "multi_worker_mirrored_strategy",
}
# Set by the emulator from the request itself (job name, the instance type of a distribution).
DERIVED_KEYS = ("sagemaker_job_name", "sagemaker_instance_type")

# An S3 URI as the service accepts it: a bucket name of 3-63 lowercase letters, digits, dots and hyphens.
S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", re.DOTALL)

# The request's S3 locations the emulator does not use (the Debugger's and Profiler's rules), checked
# all the same: a request names no host path the server was not told it may.
UNUSED_LOCATION_LISTS = (("DebugRuleConfigurations", "S3OutputPath"), ("ProfilerRuleConfigurations", "S3OutputPath"))
REMOTE_SCHEMES = ("s3://", "https://")


@dataclass(frozen=True)
class HostPaths:
    """Which of this machine's files a request may name where the service takes an S3 URI (a
    channel, the output, checkpoints, TensorBoard, Debugger and Profiler output, the code).

    `roots` None (the default): any local path or file:// URI, relative ones against the caller's
    folder. This is for code that runs as its user already (`EmulatorSession`, `hetero-emu run`),
    where naming a folder is the user's own business. A tuple: only s3:// and https:// locations
    (the service's own rule, the `S3Uri` pattern `(https|s3)://([^/]+)/?(.*)`,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_S3DataSource.html), and a local path
    only when, with its links and `..` resolved, it lies under one of the roots: `hetero-emu serve`,
    which answers whoever reaches its port and would otherwise read (a channel of /etc) and write
    (an output path anywhere) as the server's user, takes `--allow-host-path DIR` for them."""

    roots: tuple[Path, ...] | None = None

    @classmethod
    def only(cls, roots: Iterable[Path | str] = ()) -> HostPaths:
        """S3 locations, and local paths under `roots` (resolved now: a root is a real folder)."""
        return cls(tuple(resolve_path(Path.cwd(), str(root)) for root in roots))

    @classmethod
    def from_json(cls, value: object) -> HostPaths:
        """Back from `to_json` (a job driver's ticket)."""
        return cls(None if not isinstance(value, list) else tuple(Path(str(root)) for root in value))

    def to_json(self) -> list[str] | None:
        return None if self.roots is None else [str(root) for root in self.roots]

    @property
    def any_path(self) -> bool:
        return self.roots is None

    def problem(self, text: str, base_dir: Path, probes: Probes = DISK) -> str | None:
        """Why a request may not name `text` as a location, or None."""
        if self.roots is None or text.lower().startswith(REMOTE_SCHEMES):
            return None
        if "://" in text and not text.startswith("file://"):
            return f"{preview(text)} is not an S3 URI (s3:// or https://)"
        if not self.roots:
            return f"{preview(text)} is not an S3 URI (s3:// or https://): this server reads and writes no host paths"
        try:
            local = parse_uri(text)[1] if text.startswith("file://") else text
            resolved = probes.resolve(base_dir, local or ".")
        except BadPath as err:
            return f"{preview(text)} is {err}"
        if any(resolved.is_relative_to(root) for root in self.roots):
            return None
        return (f"{preview(text)} is not an S3 URI, and not under a folder this server was started with "
                "--allow-host-path for (links and '..' resolved)")


# The user's own process: a request may name any local path.
ANY_PATH = HostPaths()
HOST_PATH_HINT = "upload the data to the server's S3 (aws s3 cp/sync) and name its s3://bucket/key"

# Internal (YAML spec) field -> the request's field.
_TOP = {
    "job_name": "TrainingJobName",
    "base_job_name": "TrainingJobName",
    "image_uri": "AlgorithmSpecification.TrainingImage",
    "input_mode": "AlgorithmSpecification.TrainingInputMode",
    "container_entry_point": "AlgorithmSpecification.ContainerEntrypoint",
    "container_arguments": "AlgorithmSpecification.ContainerArguments",
    "metric_definitions": "AlgorithmSpecification.MetricDefinitions",
    "instance_groups": "ResourceConfig.InstanceGroups",
    "instance_type": "ResourceConfig.InstanceType",
    "instance_count": "ResourceConfig.InstanceCount",
    "inputs": "InputDataConfig",
    "hyperparameters": "HyperParameters",
    "environment": "Environment",
    "output_path": "OutputDataConfig.S3OutputPath",
    "disable_output_compression": "OutputDataConfig.CompressionType",
    "checkpoint_s3_uri": "CheckpointConfig.S3Uri",
    "checkpoint_local_path": "CheckpointConfig.LocalPath",
    "tensorboard_output_config": "TensorBoardOutputConfig",
    "tensorboard_output_config.s3_output_path": "TensorBoardOutputConfig.S3OutputPath",
    "tensorboard_output_config.container_local_output_path": "TensorBoardOutputConfig.LocalPath",
    "max_run": "StoppingCondition.MaxRuntimeInSeconds",
    "max_wait": "StoppingCondition.MaxWaitTimeInSeconds",
    "use_spot_instances": "EnableManagedSpotTraining",
    "keep_alive_period_in_seconds": "ResourceConfig.KeepAlivePeriodInSeconds",
    "max_retry_attempts": "RetryStrategy.MaximumRetryAttempts",
    "enable_network_isolation": "EnableNetworkIsolation",
    "entry_point": "HyperParameters.sagemaker_program",
    "source_dir": "HyperParameters.sagemaker_submit_directory",
    "container_log_level": "HyperParameters.sagemaker_container_log_level",
    "region": "HyperParameters.sagemaker_region",
    "distribution": "HyperParameters",
}
_CHANNEL_FIELDS = {
    "s3_data": "DataSource.S3DataSource.S3Uri",
    "s3_data_type": "DataSource.S3DataSource.S3DataType",
    "distribution": "DataSource.S3DataSource.S3DataDistributionType",
    "instance_groups": "DataSource.S3DataSource.InstanceGroupNames",
    "input_mode": "InputMode",
    "content_type": "ContentType",
    "record_wrapping": "RecordWrapperType",
}
_GROUP_FIELDS = {internal: api for api, internal in GROUP_KEYS.items()}


class RequestNames:
    """The `field_name` hook: an internal field path in the request's words. Paths already in the
    request's words (the adapter's own problems) pass through unchanged."""

    def __init__(self, channels: list[str]) -> None:
        self.channels = channels

    def __call__(self, path: str) -> str:
        head, _, rest = path.partition(".")
        index = ""
        if "[" in head:
            head, bracket, tail = head.partition("[")
            index = bracket + tail
        if head == "inputs" and rest:
            return self.channel(rest)
        if head == "instance_groups" and index:
            return f"ResourceConfig.InstanceGroups{index}" + (f".{_GROUP_FIELDS.get(rest, rest)}" if rest else "")
        if head == "distribution" and rest.startswith("instance_groups"):
            return "HyperParameters.sagemaker_distribution_instance_groups"
        if head in debugger_config.REQUEST_FIELDS:
            return debugger_config.request_field(path)
        if path in _TOP:
            return _TOP[path]  # a nested field the request names itself (TensorBoardOutputConfig.LocalPath)
        if head not in _TOP:
            return path
        if head in ("hyperparameters", "environment", "metric_definitions") and rest:
            return f"{_TOP[head]}{index}.{rest}"
        return _TOP[head] + index

    def channel(self, rest: str) -> str:
        for i, name in enumerate(self.channels):
            text = key_text(name)
            if rest == text or rest.startswith(text + "."):
                field = rest[len(text) + 1:]
                return f"InputDataConfig[{i}]" + (f".{_CHANNEL_FIELDS.get(field, field)}" if field else "")
        return f"InputDataConfig.{rest}"


def is_request(raw: object) -> bool:
    """A CreateTrainingJob request, told from a YAML spec by its keys (the API's are CamelCase)."""
    return isinstance(raw, Mapping) and any(key in raw for key in REQUEST_KEYS)


def read_input(path: Path) -> Any:
    """A spec or request file's content: JSON when the file is named *.json or its text starts with '{'
    (a YAML flow mapping that is not JSON is read as YAML), YAML otherwise."""
    text = read_spec_text(path)
    looks_json = path.suffix.lower() == ".json" or text.lstrip().startswith("{")
    if not looks_json:
        return parse_yaml(text, str(path))
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        if path.suffix.lower() != ".json":
            return parse_yaml(text, str(path))
        raise SpecError([Problem("", f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}",
                                 f"check it with `python -m json.tool {path}`")], str(path)) from None
    except _Duplicate as err:
        raise SpecError([Problem(str(err), "key given twice", "keep one")], str(path)) from None
    except (ValueError, RecursionError) as err:  # a number too long to read, nesting too deep
        raise SpecError([Problem("", f"cannot be read: {type(err).__name__}: {str(err)[:200]}")], str(path)) \
            from None


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def validate_request(raw: Mapping[str, Any], base_dir: Path, source: str | None = None,
                     overrides: Mapping[str, Any] | None = None, probes: Probes = DISK,
                     host_paths: HostPaths = ANY_PATH) -> JobSpec:
    """Check a request against every rule at once; return the JobSpec or raise SpecError. `overrides`
    are internal fields (job_name, output_path) that replace the request's, as the CLI options do.
    `host_paths`: which local paths the request may name (any, unless the caller is a server)."""
    channels = _channel_names(raw.get("InputDataConfig"))
    v = Validator(base_dir, probes, field_name=RequestNames(channels), hyperparameters_encoded=True)
    converter = _Converter(v, base_dir, host_paths)
    internal, passthrough = converter.job(raw)
    if converter.refused:
        # A host path the request may not name: the rules would look at it (does it exist, what is
        # in it), so they do not run; the problems so far are the answer.
        raise SpecError(v.problems, source)
    if overrides:
        internal.update(overrides)
    spec = v.job(internal)
    if v.problems or spec is None:
        raise SpecError(v.problems, source)
    if passthrough:
        spec = replace(spec, hyperparameters={**spec.hyperparameters, **passthrough})
    given = raw.get("HyperParameters")
    return replace(spec, request_hyperparameters=tuple(sorted(map(str, given))) if isinstance(given, dict) else (),
                   pool_match=_pool_match(raw))


def _pool_match(raw: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The request's fields a later job must have the same of to reuse this job's warm pool, besides
    its cluster (https://docs.aws.amazon.com/sagemaker/latest/dg/train-warm-pools.html, Matching
    training jobs): the role, the volume, the VPC and the traffic encryption."""
    given = raw.get("ResourceConfig")
    resource: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    fields = {"RoleArn": raw.get("RoleArn"), "VpcConfig": raw.get("VpcConfig"),
              "EnableInterContainerTrafficEncryption": raw.get("EnableInterContainerTrafficEncryption"),
              "VolumeSizeInGB": resource.get("VolumeSizeInGB"), "VolumeKmsKeyId": resource.get("VolumeKmsKeyId")}
    return tuple((name, json.dumps(value, sort_keys=True)) for name, value in sorted(fields.items())
                 if value is not None)


def _channel_names(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(c["ChannelName"]) if isinstance(c, dict) and isinstance(c.get("ChannelName"), str) else f"#{i}"
            for i, c in enumerate(value)]


class _Converter:
    """The request -> the internal mapping. Problems only the request can have (its shapes, both
    instance styles, data sources, the code's location) are recorded here in the request's words."""

    def __init__(self, v: Validator, base_dir: Path, host_paths: HostPaths = ANY_PATH) -> None:
        self.v = v
        self.base_dir = base_dir
        self.host_paths = host_paths
        self.refused = False  # the request names a host path it may not

    def host_path_allowed(self, value: object, path: str) -> bool:
        """Whether the request may name `value` at `path` (`HostPaths`); if not, the problem is recorded."""
        problem = self.host_paths.problem(value, self.base_dir, self.v.probes) if isinstance(value, str) else None
        if problem is not None:
            self.v.fail(path, problem, HOST_PATH_HINT)
            self.refused = True
        return problem is None

    def mapping(self, raw: Mapping[str, Any], key: str, allowed: tuple[str, ...] | Mapping[str, str],
                path: str) -> dict[str, Any]:
        value = raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.v.fail(path, f"must be a mapping, got {type_name(value)}")
            return {}
        self.v.unknown_keys(value, tuple(allowed), path + ".")
        return value

    def job(self, raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        v = self.v
        v.unknown_keys(raw, (*REQUEST_KEYS, *UNUSED_KEYS), "")
        out: dict[str, Any] = {}
        if raw.get("TrainingJobName") is None:
            v.fail("TrainingJobName", "missing", "the request's job name, e.g. my-job-2024-01-01")
        out["job_name"] = raw.get("TrainingJobName")
        algo = self.mapping(raw, "AlgorithmSpecification", ALGORITHM_KEYS, "AlgorithmSpecification")
        out["image_uri"] = algo.get("TrainingImage")
        out["input_mode"] = algo.get("TrainingInputMode")
        out["container_entry_point"] = algo.get("ContainerEntrypoint")
        out["container_arguments"] = algo.get("ContainerArguments")
        out["metric_definitions"] = algo.get("MetricDefinitions")
        out["environment"] = raw.get("Environment")
        out["enable_network_isolation"] = raw.get("EnableNetworkIsolation")
        self.resources(raw, out)
        self.channels(raw, out)
        output = self.mapping(raw, "OutputDataConfig", OUTPUT_KEYS, "OutputDataConfig")
        out["output_path"] = self.uri(output, "S3OutputPath", "OutputDataConfig.S3OutputPath")
        if out["output_path"] is None and not self.host_paths.any_path:
            # Without it the job would write to "output" in the server's own folder; the API requires it.
            v.fail("OutputDataConfig.S3OutputPath", "missing", "where the job's model and output go: s3://bucket/prefix")
            self.refused = True
        self.unused_locations(raw)
        compression = output.get("CompressionType")
        if compression not in (None, "GZIP", "NONE"):
            v.fail("OutputDataConfig.CompressionType", f"must be GZIP or NONE, got {preview(compression)}")
        out["disable_output_compression"] = compression == "NONE" or None
        checkpoint = self.mapping(raw, "CheckpointConfig", CHECKPOINT_KEYS, "CheckpointConfig")
        out["checkpoint_s3_uri"] = self.uri(checkpoint, "S3Uri", "CheckpointConfig.S3Uri")
        out["checkpoint_local_path"] = checkpoint.get("LocalPath")
        if raw.get("TensorBoardOutputConfig") is not None:
            board = self.mapping(raw, "TensorBoardOutputConfig", TENSORBOARD_KEYS, "TensorBoardOutputConfig")
            out["tensorboard_output_config"] = {
                "s3_output_path": self.uri(board, "S3OutputPath", "TensorBoardOutputConfig.S3OutputPath"),
                "container_local_output_path": board.get("LocalPath")}
        hook, profiler = (self.mapping(raw, key, keys, key) if raw.get(key) is not None else None
                          for key, keys in (("DebugHookConfig", DEBUG_HOOK_KEYS), ("ProfilerConfig", PROFILER_KEYS)))
        out.update(debugger_config.from_request(hook, profiler, self.uri))
        stopping = self.mapping(raw, "StoppingCondition", STOPPING_KEYS, "StoppingCondition")
        out["max_run"] = stopping.get("MaxRuntimeInSeconds")
        self.managed(raw, stopping, out)
        passthrough = self.hyperparameters(raw, out)
        return {k: val for k, val in out.items() if val is not None}, passthrough

    def managed(self, raw: Mapping[str, Any], stopping: Mapping[str, Any], out: dict[str, Any]) -> None:
        """Managed spot, its MaxWait and the RetryStrategy, as the spec's fields (the rules check them)."""
        out["use_spot_instances"] = raw.get("EnableManagedSpotTraining")
        out["max_wait"] = stopping.get("MaxWaitTimeInSeconds")
        retry = self.mapping(raw, "RetryStrategy", ("MaximumRetryAttempts",), "RetryStrategy")
        if "RetryStrategy" in raw and retry.get("MaximumRetryAttempts") is None:
            self.v.fail("RetryStrategy.MaximumRetryAttempts", "missing", "how many times to retry, 1-30")
        out["max_retry_attempts"] = retry.get("MaximumRetryAttempts")

    def uri(self, raw: Mapping[str, Any], key: str, path: str) -> Any:
        """An S3 URI field: s3://bucket/key (under the local S3 root), or a local path or file:// URI
        where `host_paths` allows it."""
        value = raw.get(key)
        if isinstance(value, str) and value[:3].lower() == "s3:" and not S3_URI.fullmatch(value):
            self.v.fail(path, f"{preview(value)} is not a well-formed S3 URI",
                        "s3://bucket/key, the bucket 3-63 lowercase letters, digits, '.' and '-'; or a local "
                        "path or file:// URI")
            return None
        if not self.host_path_allowed(value, path):
            return None
        return value

    def unused_locations(self, raw: Mapping[str, Any]) -> None:
        """The Debugger's and Profiler's rules' S3 locations: unused here, but a request still names no
        host path it may not."""
        for key, member in UNUSED_LOCATION_LISTS:
            items = raw.get(key)
            for i, config in enumerate(items if isinstance(items, list) else []):
                if isinstance(config, Mapping):
                    self.host_path_allowed(config.get(member), f"{key}[{i}].{member}")

    def resources(self, raw: Mapping[str, Any], out: dict[str, Any]) -> None:
        v = self.v
        resource = self.mapping(raw, "ResourceConfig", RESOURCE_KEYS, "ResourceConfig")
        groups = resource.get("InstanceGroups")
        single = resource.get("InstanceType") is not None or resource.get("InstanceCount") is not None
        if groups is not None and single:
            v.fail("ResourceConfig", "InstanceGroups and InstanceType/InstanceCount are mutually exclusive",
                   "InstanceGroups for a heterogeneous cluster, InstanceType + InstanceCount for a homogeneous one")
        out["keep_alive_period_in_seconds"] = resource.get("KeepAlivePeriodInSeconds")
        if groups is None:
            out["instance_type"] = resource.get("InstanceType")
            out["instance_count"] = resource.get("InstanceCount")
            if resource.get("InstanceType") is not None and resource.get("InstanceCount") is None:
                v.fail("ResourceConfig.InstanceCount", "missing", "the API requires it with InstanceType")
            return
        if not isinstance(groups, list):
            out["instance_groups"] = groups  # the rules say what is wrong with it
            return
        converted: list[Any] = []
        for i, group in enumerate(groups):
            if isinstance(group, dict):
                v.unknown_keys(group, tuple(GROUP_KEYS), f"ResourceConfig.InstanceGroups[{i}].")
                group = {GROUP_KEYS[k]: val for k, val in group.items() if k in GROUP_KEYS}
            converted.append(group)
        out["instance_groups"] = converted

    def channels(self, raw: Mapping[str, Any], out: dict[str, Any]) -> None:
        v = self.v
        value = raw.get("InputDataConfig")
        if value is None:
            return
        if not isinstance(value, list):
            v.fail("InputDataConfig", f"must be a list of channels, got {type_name(value)}")
            return
        inputs: dict[Any, Any] = {}
        for i, item in enumerate(value):
            path = f"InputDataConfig[{i}]"
            if not isinstance(item, dict):
                v.fail(path, f"must be a mapping, got {type_name(item)}")
                continue
            v.unknown_keys(item, CHANNEL_KEYS, path + ".")
            name = item.get("ChannelName")
            if name is None:
                v.fail(path + ".ChannelName", "missing", "e.g. train")
                continue
            if not isinstance(name, str):
                v.fail(path + ".ChannelName", f"must be a string, got {type_name(name)}")
                continue
            if name in inputs:
                v.fail(path + ".ChannelName", f"channel {name!r} is given twice", "channel names must be unique")
                continue
            channel = self.channel(item, path)
            if channel is not None:
                inputs[name] = channel
        out["inputs"] = inputs

    def channel(self, item: Mapping[str, Any], path: str) -> dict[str, Any] | None:
        v = self.v
        source = item.get("DataSource")
        if source is None:
            v.fail(path + ".DataSource", "missing", "DataSource: {S3DataSource: {S3Uri: ..., S3DataType: S3Prefix}}")
            return None
        if not isinstance(source, dict):
            v.fail(path + ".DataSource", f"must be a mapping, got {type_name(source)}")
            return None
        if "FileSystemDataSource" in source:
            v.fail(path + ".DataSource.FileSystemDataSource", "EFS and FSx for Lustre file systems are not emulated",
                   "copy the data to a local folder and give it as DataSource.S3DataSource.S3Uri")
            return None
        v.unknown_keys(source, ("S3DataSource",), path + ".DataSource.")
        s3 = self.mapping(source, "S3DataSource", S3_SOURCE_KEYS, path + ".DataSource.S3DataSource")
        if "S3DataSource" not in source:
            v.fail(path + ".DataSource.S3DataSource", "missing", "S3DataSource: {S3Uri: ..., S3DataType: S3Prefix}")
            return None
        if s3.get("AttributeNames") is not None:
            v.fail(path + ".DataSource.S3DataSource.AttributeNames", "augmented manifests are not emulated",
                   "omit it")
        channel: dict[str, Any] = {internal: s3.get(api) for api, internal in S3_SOURCE_KEYS.items() if internal}
        channel["s3_data"] = self.uri(s3, "S3Uri", path + ".DataSource.S3DataSource.S3Uri")
        if channel["s3_data"] is None and s3.get("S3Uri") is not None:
            return None  # malformed: reported
        channel["input_mode"] = item.get("InputMode")
        channel["content_type"] = item.get("ContentType")
        channel["record_wrapping"] = item.get("RecordWrapperType")
        compression = item.get("CompressionType")
        if compression not in (None, "None"):
            v.fail(path + ".CompressionType", f"{preview(compression)} is not emulated yet",
                   "omit it or give None, and uncompress the data")
        if item.get("ShuffleConfig") is not None:
            v.fail(path + ".ShuffleConfig", "shuffling a channel is not emulated", "omit it")
        return {k: val for k, val in channel.items() if val is not None}

    def hyperparameters(self, raw: Mapping[str, Any], out: dict[str, Any]) -> dict[str, str]:
        """HyperParameters: the user's (strings, kept as given) go to the rules; the SDK's `sagemaker_*`
        ones become the spec's code, log level, region and distribution. Returns the `sagemaker_*`
        keys the emulator does not set itself, which reach hyperparameters.json as given."""
        v = self.v
        value = raw.get("HyperParameters")
        if value is None:
            value = {}
        if not isinstance(value, dict):
            v.fail("HyperParameters", f"must be a mapping of strings, got {type_name(value)}")
            return {}
        user: dict[Any, Any] = {}
        sdk: dict[str, Any] = {}
        for key, item in value.items():
            path = f"HyperParameters.{key_text(key)}"
            if not isinstance(item, str):
                v.fail(path, f"must be a string, as the API has them, got {type_name(item)} {preview(item)}",
                       f"write {json.dumps(json.dumps(item, default=str))}: the SDK JSON-encodes each value")
            elif isinstance(key, str) and key.startswith("sagemaker_"):
                sdk[key] = _decoded(item)
            else:
                user[key] = item
        out["hyperparameters"] = user
        self.code(sdk, out)
        if "sagemaker_container_log_level" in sdk:
            level = sdk.pop("sagemaker_container_log_level")
            out["container_log_level"] = level
        if "sagemaker_region" in sdk:
            out["region"] = sdk.pop("sagemaker_region")
        distribution = _distribution(sdk)
        if "smdistributed" in distribution and "mp_parameters" in user:
            # Framework._distribution_configuration writes an enabled model parallel block as `mp_parameters`
            # beside the smdistributed flags: a user key by name, the distribution's by origin.
            distribution["smdistributed"]["modelparallel"] = {"enabled": True,
                                                              "parameters": _decoded(user.pop("mp_parameters"))}
        if distribution:
            out["distribution"] = distribution
        return {k: value[k] for k in sdk if k not in DERIVED_KEYS}

    def code(self, sdk: dict[str, Any], out: dict[str, Any]) -> None:
        program = sdk.pop("sagemaker_program", None)
        where = sdk.pop("sagemaker_submit_directory", None)
        out["entry_point"] = program
        if where is None:
            if isinstance(program, str) and not self.host_paths.any_path:
                # Without a submit directory the program is a script on this machine (the SDK uploads
                # a lone entry_point so): a host path like any other.
                self.host_path_allowed(program, "HyperParameters.sagemaker_program")
            return
        path = "HyperParameters.sagemaker_submit_directory"
        if not isinstance(where, str) or not where.strip():
            self.v.fail(path, f"must be a folder, path or URI, got {preview(where)}")
            return
        if where.startswith(INPUT_DATA + "/"):
            where = self.channel_file(where, out.get("inputs", {}))
            if where is None:
                return
        if not self.host_path_allowed(where, path):
            return
        if where[:3].lower() == "s3:" or where.endswith((".tar.gz", ".tgz")):
            out["source_dir"] = where  # sourcedir.tar.gz: the rules map it under the S3 root and check it
            return
        local = parse_uri(where)[1] if where.startswith("file://") else where
        if "://" in where and not where.startswith("file://"):
            out["source_dir"] = where  # the rules name the scheme
            return
        try:
            kind = self.v.probes.kind_of(self.v.probes.resolve(self.base_dir, local or "."))
        except BadPath:
            kind = "missing"  # the rules say what is wrong with the path
        if kind == "file":
            # The SDK without source_dir uploads the entry script alone: that file is the whole code.
            if isinstance(program, str) and program != os.path.basename(local):
                self.v.fail(path, f"{preview(where)} is a single script but sagemaker_program is {program!r}",
                            "name the script's folder, or make sagemaker_program its file name")
            out["entry_point"] = local
            return
        out["source_dir"] = where


    def channel_file(self, where: str, inputs: Mapping[str, Any]) -> str | None:
        """A submit directory inside the container, `/opt/ml/input/data/<channel>/<file>`, as the
        channel's location on this machine; None when no channel of the request holds it (reported).

        SDK v2 under network isolation ships the code as a channel named `code` (the S3 URI of its
        sourcedir.tar.gz) and sets the submit directory to that file in the container,
        `/opt/ml/input/data/code/sourcedir.tar.gz` (sagemaker/estimator.py
        `CONTAINER_CODE_CHANNEL_SOURCEDIR_PATH`, used in `_prepare_for_training` when
        `enable_network_isolation()`), since an isolated container cannot download from S3; the toolkit
        then unpacks that local tarball into /opt/ml/code (sagemaker_training/files.py
        `download_and_extract`, its `tarfile.is_tarfile(uri)` branch). Here the rules unpack the same
        file, named by its channel's URI, into /opt/ml/code, and the channel reaches the hosts too."""
        path = "HyperParameters.sagemaker_submit_directory"
        name, _, rest = where[len(INPUT_DATA) + 1:].partition("/")
        channel = inputs.get(name)
        data = channel.get("s3_data") if isinstance(channel, Mapping) else None
        if not isinstance(data, str) or not rest or any(part in ("", ".", "..") for part in rest.split("/")):
            self.v.fail(path, f"{preview(where)} is a file in the container that no channel of the request holds",
                        "name a file of a channel, /opt/ml/input/data/<channel>/<file> (the SDK's code channel: "
                        "/opt/ml/input/data/code/sourcedir.tar.gz), or the code's s3:// URI")
            self.v.code_refused = True
            return None
        # A channel whose URI names the object itself holds it under its base name, as the service
        # downloads a single object; a prefix holds its keys below it.
        if data.rstrip("/").rsplit("/", 1)[-1] == rest:
            return data
        return f"{data.rstrip('/')}/{rest}"


def _decoded(text: str) -> Any:
    """A hyperparameter's value as the toolkit reads it: JSON when it parses, the text otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _distribution(sdk: dict[str, Any]) -> dict[str, Any]:
    """The `distribution=` argument back from the hyperparameters the SDK made of it (the inverse of
    hyperparameters.for_distribution)."""
    out: dict[str, Any] = {}
    for key, strategy in DISTRIBUTION_FLAGS.items():
        if key in sdk:
            out[strategy] = {"enabled": sdk.pop(key)}
    if "sagemaker_mpi_enabled" in sdk:
        mpi: dict[str, Any] = {"enabled": sdk.pop("sagemaker_mpi_enabled")}
        if "sagemaker_mpi_num_of_processes_per_host" in sdk:
            mpi["processes_per_host"] = sdk.pop("sagemaker_mpi_num_of_processes_per_host")
        if "sagemaker_mpi_custom_mpi_options" in sdk:
            mpi["custom_mpi_options"] = sdk.pop("sagemaker_mpi_custom_mpi_options")
        out["mpi"] = mpi
    if "sagemaker_distributed_dataparallel_enabled" in sdk:
        dp: dict[str, Any] = {"enabled": sdk.pop("sagemaker_distributed_dataparallel_enabled")}
        if "sagemaker_distributed_dataparallel_custom_mpi_options" in sdk:
            dp["custom_mpi_options"] = sdk.pop("sagemaker_distributed_dataparallel_custom_mpi_options")
        out["smdistributed"] = {"dataparallel": dp}
    if "sagemaker_distribution_instance_groups" in sdk:
        out["instance_groups"] = sdk.pop("sagemaker_distribution_instance_groups")
    return out


def load_request(raw: Mapping[str, Any], path: Path, overrides: Mapping[str, Any] | None = None,
                 probes: Probes = DISK) -> JobSpec:
    """A request read from `path`: relative local paths resolve against the file's folder."""
    return validate_request(raw, path.resolve().parent, str(path), overrides, probes)


# --------------------------------------------------------------------------------------------------
# The way back: the request a spec corresponds to


def request_from_spec(spec: JobSpec, job_name: str) -> dict[str, Any]:
    """The CreateTrainingJob request the SDK would send for this spec, with every local path absolute
    (a file:// URI) so the request runs from any folder. S3 URIs are written as the local folders
    they name under the local S3 root."""
    # Every `sagemaker_*` hyperparameter the job gets is in the request, as the SDK v2 sends them: a
    # request's hyperparameters.json has its own keys only (JobSpec.request_hyperparameters).
    hps = hyperparameters.encoded(spec, job_name)
    if spec.source_dir is not None:
        hps["sagemaker_submit_directory"] = json.dumps(_file_uri(spec.source_dir))
    else:
        hps.pop("sagemaker_submit_directory", None)
    algorithm: dict[str, Any] = {"TrainingImage": spec.image_uri, "TrainingInputMode": spec.input_mode}
    if spec.container_entry_point is not None:
        algorithm["ContainerEntrypoint"] = list(spec.container_entry_point)
    if spec.container_arguments is not None:
        algorithm["ContainerArguments"] = list(spec.container_arguments)
    if spec.metric_definitions:
        algorithm["MetricDefinitions"] = [{"Name": d.name, "Regex": d.regex} for d in spec.metric_definitions]
    resource: dict[str, Any]
    if spec.heterogeneous:
        resource = {"InstanceGroups": [{"InstanceGroupName": g.instance_group_name, "InstanceType": g.instance_type,
                                        "InstanceCount": g.instance_count} for g in spec.instance_groups]}
    else:
        group = spec.instance_groups[0]
        resource = {"InstanceType": group.instance_type, "InstanceCount": group.instance_count}
    resource["VolumeSizeInGB"] = 30
    request: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": algorithm,
        "HyperParameters": hps,
        "ResourceConfig": resource,
        "OutputDataConfig": {"S3OutputPath": _file_uri(spec.output_path),
                             **({"CompressionType": "NONE"} if spec.disable_output_compression else {})},
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_run},
        "EnableNetworkIsolation": spec.enable_network_isolation,
        "RoleArn": "arn:aws:iam::000000000000:role/hetero-emu",
    }
    if spec.environment:
        request["Environment"] = dict(spec.environment)
    if spec.inputs:
        request["InputDataConfig"] = [_channel_request(name, spec) for name in spec.inputs]
    if spec.checkpoint_s3_uri is not None:
        request["CheckpointConfig"] = {"S3Uri": _file_uri(spec.checkpoint_s3_uri),
                                       "LocalPath": spec.checkpoint_local_path}
    if spec.tensorboard_output_path is not None:
        request["TensorBoardOutputConfig"] = {"S3OutputPath": _file_uri(spec.tensorboard_output_path),
                                              "LocalPath": spec.tensorboard_local_path}
    request.update(debugger_config.to_request(spec, _file_uri))
    if spec.use_spot_instances:
        request["EnableManagedSpotTraining"] = True
        request["StoppingCondition"]["MaxWaitTimeInSeconds"] = spec.max_wait
    if spec.keep_alive_period_in_seconds:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = spec.keep_alive_period_in_seconds
    if spec.max_retry_attempts is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retry_attempts}
    return request


def _channel_request(name: str, spec: JobSpec) -> dict[str, Any]:
    channel = spec.inputs[name]
    source: dict[str, Any] = {"S3DataType": channel.s3_data_type, "S3Uri": _data_uri(channel.s3_data, channel.source,
                                                                                        spec.spec_dir),
                              "S3DataDistributionType": channel.distribution}
    if channel.instance_groups:
        source["InstanceGroupNames"] = list(channel.instance_groups)
    entry: dict[str, Any] = {"ChannelName": name, "DataSource": {"S3DataSource": source},
                             "CompressionType": "None", "RecordWrapperType": channel.record_wrapping}
    if channel.input_mode:
        entry["InputMode"] = channel.input_mode
    if channel.content_type:
        entry["ContentType"] = channel.content_type
    return entry


def _file_uri(path: Path) -> str:
    return "file://" + str(path)


def _data_uri(text: str, resolved: Path, spec_dir: Path) -> str:
    """The channel's local path, absolute but with links not followed, so that a single file keeps
    the name it was given (`paths.given_name`)."""
    if text.startswith("s3://"):
        return _file_uri(resolved)
    local = parse_uri(text)[1] if text.startswith("file://") else text
    return _file_uri(Path(os.path.abspath(os.path.join(spec_dir, local))))


def dumps_request(request: Mapping[str, Any]) -> str:
    return json.dumps(request, indent=2) + "\n"


__all__ = ["ANY_PATH", "HostPaths", "dumps_request", "is_request", "load_request", "read_input", "request_from_spec",
           "validate_request"]

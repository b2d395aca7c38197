"""The job's SageMaker Debugger configs: `debugger_hook_config` and `profiler_config` (the SDK's
DebuggerHookConfig and ProfilerConfig; a request's DebugHookConfig and ProfilerConfig), checked and
turned into `DebuggerOutput`s with the members the service writes into every host
(emulator/planning/sm_debugger.py, docs/service-features.md#sagemaker-debugger).

The YAML spec names the SDK's arguments; a request's members are mapped onto them by
`emulator.jobspec.request` and back by `to_request`, so the rules are written once, here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from emulator.jobspec.model import DebuggerOutput, JobSpec
from emulator.jobspec.wording import preview


class Checks(Protocol):
    """What reading the configs asks of the rules' `Validator` (emulator.jobspec.rules, which calls
    `read`): its typed getters (emulator.jobspec.fields) and its two path checks. Named here rather
    than imported, so this module and the rules do not import each other."""

    def fail(self, path: str, message: str, hint: str | None = None) -> None: ...
    def unknown_keys(self, raw: Mapping[Any, Any], allowed: Sequence[str], prefix: str) -> None: ...
    def typed(self, raw: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...]) -> Any: ...
    def string(self, raw: Mapping[str, Any], key: str, path: str) -> str | None: ...
    def local_path(self, text: str, path: str, s3_root: Path | None, what: str) -> Path | None: ...
    def creatable_folder(self, resolved: Path | None, path: str) -> None: ...


# DebugHookConfig.LocalPath's default: smdebug's DEFAULT_SAGEMAKER_OUTDIR
# (awslabs/sagemaker-debugger smdebug/core/config_constants.py:21), the API's documented default
# (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DebugHookConfig.html).
DEFAULT_TENSORS_PATH = "/opt/ml/output/tensors"
# Where smdebug's profiler writes without ProfilingParameters.LocalPath: BASE_FOLDER_DEFAULT
# (smdebug/profiler/profiler_constants.py:55).
DEFAULT_PROFILER_PATH = "/opt/ml/output/profiler"

HOOK_KEYS = ("s3_output_path", "container_local_output_path", "hook_parameters", "collection_configs")
COLLECTION_KEYS = ("name", "parameters")
PROFILER_KEYS = ("s3_output_path", "system_monitor_interval_millis", "profiling_parameters", "disable_profiler")


def read(v: Checks, raw: Mapping[str, Any], s3_root: Path | None) -> tuple[DebuggerOutput | None,
                                                                       DebuggerOutput | None]:
    """The spec's `debugger_hook_config` and `profiler_config`, each None when absent (or `false`,
    as the SDK's `debugger_hook_config=False` turns the hook off)."""
    return _hook(v, raw, s3_root), _profiler(v, raw, s3_root)


def _hook(v: Checks, raw: Mapping[str, Any], s3_root: Path | None) -> DebuggerOutput | None:
    field = "debugger_hook_config"
    if raw.get(field) is False:
        return None
    config = v.typed(raw, field, field, (dict,))
    if config is None:
        return None
    v.unknown_keys(config, HOOK_KEYS, field + ".")
    # Required by the API (DebugHookConfig.S3OutputPath); the SDK fills in its output_path.
    text = _required(v, config, "s3_output_path", field, "where the tensors go: a folder or s3:// URI")
    if text is None:
        return None
    target = v.local_path(text, field + ".s3_output_path", s3_root, "Debugger output")
    v.creatable_folder(target, field + ".s3_output_path")
    local = _container_folder(v, v.string(config, "container_local_output_path",
                                          field + ".container_local_output_path") or DEFAULT_TENSORS_PATH,
                              field + ".container_local_output_path", DEFAULT_TENSORS_PATH)
    document: dict[str, Any] = {"S3OutputPath": text, "LocalPath": local}
    params = _strings(v, config, "hook_parameters", field + ".hook_parameters")
    if params is not None:
        document["HookParameters"] = params
    collections = v.typed(config, "collection_configs", field + ".collection_configs", (list,))
    if collections is not None:
        document["CollectionConfigurations"] = [
            c for i, item in enumerate(collections)
            if (c := _collection(v, item, f"{field}.collection_configs[{i}]")) is not None]
    return DebuggerOutput(json.dumps(document, sort_keys=True), local, target, text)


def _collection(v: Checks, item: Any, path: str) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        v.fail(path, f"must be a mapping {{name, parameters}}, got {preview(item)}")
        return None
    v.unknown_keys(item, COLLECTION_KEYS, path + ".")
    name = _required(v, item, "name", path, "the collection's name, e.g. losses")
    if name is None:
        return None
    collection: dict[str, Any] = {"CollectionName": name}
    params = _strings(v, item, "parameters", path + ".parameters")
    if params is not None:
        collection["CollectionParameters"] = params
    return collection


def _profiler(v: Checks, raw: Mapping[str, Any], s3_root: Path | None) -> DebuggerOutput | None:
    field = "profiler_config"
    config = v.typed(raw, field, field, (dict,))
    if config is None:
        return None
    v.unknown_keys(config, PROFILER_KEYS, field + ".")
    document: dict[str, Any] = {}
    text = v.string(config, "s3_output_path", field + ".s3_output_path")
    target = None
    if text is not None:
        document["S3OutputPath"] = text
        target = v.local_path(text, field + ".s3_output_path", s3_root, "Profiler output")
        v.creatable_folder(target, field + ".s3_output_path")
    interval = v.typed(config, "system_monitor_interval_millis", field + ".system_monitor_interval_millis", (int,))
    if interval is not None:
        document["ProfilingIntervalInMilliseconds"] = interval
    params = _strings(v, config, "profiling_parameters", field + ".profiling_parameters")
    local = DEFAULT_PROFILER_PATH
    if params is not None:
        document["ProfilingParameters"] = params
        # smdebug reads the file lower-cased (profiler_config_parser.py:138, `.lower()`), so any case
        # of LocalPath is the folder it writes to.
        given = next((value for key, value in params.items() if key.lower() == "localpath"), None)
        if given is not None:
            local = _container_folder(v, given, field + ".profiling_parameters.LocalPath", DEFAULT_PROFILER_PATH)
    disable = v.typed(config, "disable_profiler", field + ".disable_profiler", (bool,))
    if disable is not None:
        document["DisableProfiler"] = disable
    return DebuggerOutput(json.dumps(document, sort_keys=True), local, target if not disable else None, text)


def _required(v: Checks, raw: Mapping[str, Any], key: str, parent: str, hint: str) -> str | None:
    """A string member the API requires; its absence is a problem."""
    text = v.string(raw, key, f"{parent}.{key}")
    if text is None and key not in raw:
        v.fail(f"{parent}.{key}", "missing", hint)
    return text


def _strings(v: Checks, raw: Mapping[str, Any], key: str, path: str) -> dict[str, str] | None:
    """A string-to-string map, as the API's HookParameters, CollectionParameters and
    ProfilingParameters are."""
    value = v.typed(raw, key, path, (dict,))
    if value is None:
        return None
    bad = [k for k, item in value.items() if not isinstance(k, str) or not isinstance(item, str)]
    if bad:
        v.fail(f"{path}.{bad[0]}", f"must be a string, got {preview(value[bad[0]])}",
               "the API's parameters are strings: quote the value, e.g. \"10\"")
        return None
    return dict(value)


def _container_folder(v: Checks, local: str, path: str, default: str) -> str:
    """An absolute folder in the container that hides none of /opt/ml's own folders, as the
    TensorBoard local path must be (emulator.jobspec.rules, Validator.tensorboard)."""
    normal = os.path.normpath(local) if local.startswith("/") and "\0" not in local else None
    if normal is None:
        v.fail(path, "must be an absolute path inside the container")
        return default
    if normal in ("/", "/opt", "/opt/ml", "/opt/ml/output", "/opt/ml/output/data") or normal.startswith(
            "/opt/ml/output/data/") or (normal.startswith("/opt/ml/") and not normal.startswith("/opt/ml/output/")):
        v.fail(path, f"{local} would hide or sit inside /opt/ml's own folders",
               f"use {default} (the default) or a folder outside /opt/ml")
        return default
    return normal


def from_request(hook: Mapping[str, Any] | None, profiler: Mapping[str, Any] | None,
                 uri: Any) -> dict[str, Any]:
    """A request's DebugHookConfig and ProfilerConfig as the spec's fields (`uri` checks an S3
    location as the request's other ones are checked: `_RequestReader.uri`)."""
    out: dict[str, Any] = {}
    if isinstance(hook, Mapping):
        config: dict[str, Any] = {"s3_output_path": uri(hook, "S3OutputPath", "DebugHookConfig.S3OutputPath"),
                                  "container_local_output_path": hook.get("LocalPath"),
                                  "hook_parameters": hook.get("HookParameters")}
        if isinstance(hook.get("CollectionConfigurations"), list):
            config["collection_configs"] = [
                {"name": c.get("CollectionName"), "parameters": c.get("CollectionParameters")}
                if isinstance(c, Mapping) else c for c in hook["CollectionConfigurations"]]
        out["debugger_hook_config"] = {k: value for k, value in config.items() if value is not None}
    if isinstance(profiler, Mapping):
        config = {"s3_output_path": uri(profiler, "S3OutputPath", "ProfilerConfig.S3OutputPath"),
                  "system_monitor_interval_millis": profiler.get("ProfilingIntervalInMilliseconds"),
                  "profiling_parameters": profiler.get("ProfilingParameters"),
                  "disable_profiler": profiler.get("DisableProfiler")}
        out["profiler_config"] = {k: value for k, value in config.items() if value is not None}
    return out


# The spec's paths in a request's words, for problems found in a request's configs.
REQUEST_FIELDS = {
    "debugger_hook_config": "DebugHookConfig",
    "debugger_hook_config.s3_output_path": "DebugHookConfig.S3OutputPath",
    "debugger_hook_config.container_local_output_path": "DebugHookConfig.LocalPath",
    "debugger_hook_config.hook_parameters": "DebugHookConfig.HookParameters",
    "debugger_hook_config.collection_configs": "DebugHookConfig.CollectionConfigurations",
    "profiler_config": "ProfilerConfig",
    "profiler_config.s3_output_path": "ProfilerConfig.S3OutputPath",
    "profiler_config.system_monitor_interval_millis": "ProfilerConfig.ProfilingIntervalInMilliseconds",
    "profiler_config.profiling_parameters": "ProfilerConfig.ProfilingParameters",
    "profiler_config.disable_profiler": "ProfilerConfig.DisableProfiler",
}


_REQUEST_WORDS = {"name": "CollectionName", "parameters": "CollectionParameters",
                  **{k.rpartition(".")[2]: v.rpartition(".")[2] for k, v in REQUEST_FIELDS.items()}}


def request_field(path: str) -> str:
    """A spec path below `debugger_hook_config` or `profiler_config` in the request's words
    (`debugger_hook_config.collection_configs[1].name` is
    `DebugHookConfig.CollectionConfigurations[1].CollectionName`); a parameter's own key is kept."""
    head, _, rest = path.partition(".")
    words = [REQUEST_FIELDS[head]]
    parts = rest.split(".") if rest else []
    for i, part in enumerate(parts):
        name, bracket, index = part.partition("[")
        if name not in _REQUEST_WORDS:
            words.append(".".join(parts[i:]))  # a parameter's key, as the request wrote it
            break
        words.append(_REQUEST_WORDS[name] + bracket + index)
    return ".".join(words)


def to_request(spec: JobSpec, file_uri: Any) -> dict[str, Any]:
    """The spec's configs back as a request's members, with local folders as file:// URIs
    (`file_uri`, as `emulator.jobspec.request.to_request` writes the other locations)."""
    out: dict[str, Any] = {}
    for key, config in (("DebugHookConfig", spec.debug_hook), ("ProfilerConfig", spec.profiler)):
        if config is None:
            continue
        document = json.loads(config.document)
        if config.uri is not None and not config.uri.startswith("s3://") and config.output_path is not None:
            document["S3OutputPath"] = file_uri(config.output_path)
        out[key] = document
    return out

"""SageMaker Debugger's files and uploads (emulator/planning/sm_debugger.py,
docs/service-features.md#sagemaker-debugger).

A request's DebugHookConfig and ProfilerConfig reach every host as /opt/ml/input/config/debughookconfig.json
and profilerconfig.json, checked byte for byte against the hand-written files in tests/unit/golden/debugger/
(the API's member names, sorted keys, indent 2). smdebug reads from the hook's file `LocalPath`,
`HookParameters` and `CollectionConfigurations` with `CollectionName` and `CollectionParameters`
(awslabs/sagemaker-debugger smdebug/core/config_constants.py:10-14, json_config.py
collect_hook_config_params and add_collections_to_manager), and from the profiler's, lower-cased,
`disableprofiler` and `profilingparameters` (smdebug/profiler/profiler_config_parser.py:57-61, 138-160).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.api import load
from emulator.errors import SpecError
from emulator.jobspec import validate
from emulator.jobspec.request import request_from_spec
from emulator.planning import sm_debugger
from emulator.planning.plan import make_plan
from emulator.run import checkpoints

GOLDEN = Path(__file__).parent / "golden" / "debugger"
# The CollectionConfigurations and HookParameters of a DebuggerHookConfig, and the ProfilerConfig
# SDK v2 sends by default (`_prepare_profiler_for_training`: ProfilerConfig(s3_output_path=output_path),
# DisableProfiler False).
HOOK = {"S3OutputPath": "s3://bucket/debug", "HookParameters": {"save_interval": "2"},
        "CollectionConfigurations": [{"CollectionName": "losses", "CollectionParameters": {"save_interval": "1"}},
                                     {"CollectionName": "weights"}]}
PROFILER = {"S3OutputPath": "s3://bucket/debug", "DisableProfiler": False}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "s3" / "bucket").mkdir(parents=True)
    return root


def request(**extra: Any) -> dict[str, Any]:
    return {"TrainingJobName": "dbg-job",
            "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
            "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
            "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "RoleArn": "arn:aws:iam::111122223333:role/x", **extra}


def load_request(project: Path, doc: dict[str, Any]) -> Any:
    path = project / "request.json"
    path.write_text(json.dumps(doc))
    return load(path, s3_root=project / "s3")


def test_every_host_gets_the_files_the_service_writes(project: Path) -> None:
    spec = load_request(project, request(DebugHookConfig=HOOK, ProfilerConfig=PROFILER))
    plan = make_plan(spec, "dbg-job")
    for host in plan.hosts:
        for name in ("debughookconfig.json", "profilerconfig.json"):
            assert host.files[f"input/config/{name}"] == (GOLDEN / name).read_text(), (host.name, name)


def test_without_the_configs_no_file_is_written(project: Path) -> None:
    plan = make_plan(load_request(project, request()), "dbg-job")
    assert not [name for name in plan.hosts[0].files if "debughook" in name or "profiler" in name]
    assert sm_debugger.uploads(plan.spec, plan.job_name) == []


def test_the_yaml_spec_names_the_sdks_arguments(project: Path) -> None:
    raw = {"job_name": "dbg-job", "entry_point": "train.py", "source_dir": "code", "output_path": "out",
           "instance_type": "ml.c5.xlarge", "instance_count": 1, "local_s3_root": "s3",
           "debugger_hook_config": {"s3_output_path": "s3://bucket/debug", "hook_parameters": {"save_interval": "2"},
                                    "collection_configs": [{"name": "losses", "parameters": {"save_interval": "1"}},
                                                           {"name": "weights"}]},
           "profiler_config": {"s3_output_path": "s3://bucket/debug", "disable_profiler": False}}
    plan = make_plan(validate(raw, base_dir=project), "dbg-job")
    assert plan.hosts[0].files["input/config/debughookconfig.json"] == (GOLDEN / "debughookconfig.json").read_text()
    assert plan.hosts[0].files["input/config/profilerconfig.json"] == (GOLDEN / "profilerconfig.json").read_text()


def test_every_hosts_tensors_reach_one_prefix_under_the_job_name(project: Path) -> None:
    """`<S3OutputPath>/<job>/debug-output/` (smdebug docs/analysis.md:56; the SDK's
    latest_job_debugger_artifacts_path), the profiler's files under `<job>/profiler-output/`; each
    host's files by their own worker names side by side."""
    spec = load_request(project, request(DebugHookConfig=HOOK, ProfilerConfig=PROFILER))
    plan = make_plan(spec, "dbg-job")
    debug = project / "s3" / "bucket" / "debug" / "dbg-job"
    assert [(u.folder, u.target) for u in sm_debugger.uploads(spec, plan.job_name)] == [
        ("output/tensors", debug / "debug-output"), ("output/profiler", debug / "profiler-output")]
    found = [s for s in checkpoints.syncs(plan) if s.target is not None and "dbg-job" in str(s.target)]
    assert len(found) == 2
    for host, worker in (("algo-1", "worker_0"), ("algo-2", "worker_1")):
        events = Path(plan.job_dir) / "hosts" / host / "output" / "tensors" / "events" / "000000000002"
        events.mkdir(parents=True)
        (events / f"000000000002_{worker}.tfevents").write_bytes(worker.encode())
        trace = Path(plan.job_dir) / "hosts" / host / "output" / "profiler" / "framework" / f"{host}.json"
        trace.parent.mkdir(parents=True)
        trace.write_text("{}")
    for sync in found:
        sync.scan()
        sync.scan()
    steps = debug / "debug-output" / "events" / "000000000002"
    assert sorted(p.name for p in steps.iterdir()) == ["000000000002_worker_0.tfevents",
                                                      "000000000002_worker_1.tfevents"]
    assert sorted(p.name for p in (debug / "profiler-output" / "framework").iterdir()) == ["algo-1.json",
                                                                                          "algo-2.json"]


def test_a_local_path_outside_opt_ml_is_mounted_and_kept_on_the_way_back(project: Path) -> None:
    hook = {"S3OutputPath": "s3://bucket/debug", "LocalPath": "/tmp/tensors"}
    profiler = {"DisableProfiler": False, "ProfilingParameters": {"LocalPath": "/tmp/prof"}}
    spec = load_request(project, request(DebugHookConfig=hook, ProfilerConfig=profiler))
    plan = make_plan(spec, "dbg-job")
    mounts = {m.target: m for m in plan.hosts[1].container.mounts}
    assert mounts["/tmp/tensors"].source.endswith("/hosts/algo-2/tensors") and not mounts["/tmp/tensors"].read_only
    assert mounts["/tmp/prof"].source.endswith("/hosts/algo-2/profiler")
    assert json.loads(plan.hosts[1].files["input/config/debughookconfig.json"])["LocalPath"] == "/tmp/tensors"
    # A ProfilerConfig without S3OutputPath is written, and nothing of it is uploaded.
    assert [u.target for u in sm_debugger.uploads(spec, "dbg-job")][1] is None
    back = request_from_spec(spec, "dbg-job")
    assert back["DebugHookConfig"] == hook and back["ProfilerConfig"] == profiler


@pytest.mark.parametrize(("config", "fragment"), [
    ({"DebugHookConfig": {"LocalPath": "/tmp/x"}}, "DebugHookConfig.S3OutputPath: missing"),
    ({"DebugHookConfig": {"S3OutputPath": "s3://bucket/d", "LocalPath": "/opt/ml/model"}},
     "DebugHookConfig.LocalPath: /opt/ml/model would hide"),
    ({"DebugHookConfig": {"S3OutputPath": "s3://bucket/d", "HookParameters": {"save_interval": 2}}},
     "DebugHookConfig.HookParameters.save_interval: must be a string"),
    ({"DebugHookConfig": {"S3OutputPath": "s3://bucket/d", "Typo": 1}}, "DebugHookConfig.Typo: unknown key"),
    ({"ProfilerConfig": {"DisableProfiler": "no"}}, "ProfilerConfig.DisableProfiler: must be"),
])
def test_a_bad_config_is_named_by_its_request_field(project: Path, config: dict[str, Any], fragment: str) -> None:
    path = project / "request.json"
    path.write_text(json.dumps(request(**config)))
    with pytest.raises(SpecError) as info:
        load(path, s3_root=project / "s3")
    found = [str(p) for p in info.value.problems]
    assert any(p.startswith(fragment) for p in found), found


def test_smdebugs_own_parser_reads_the_hook_file(project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real parser, where smdebug is installed (it is not a dependency of hetero-emu)."""
    json_config = pytest.importorskip("smdebug.core.json_config")
    plan = make_plan(load_request(project, request(DebugHookConfig=HOOK)), "dbg-job")
    path = tmp_path / "debughookconfig.json"
    path.write_text(plan.hosts[0].files["input/config/debughookconfig.json"])
    params = json_config.get_json_config_as_dict(str(path))
    assert json_config.collect_hook_config_params(params)["out_dir"] == "/opt/ml/output/tensors"
    assert json_config.get_include_collections(params) == ["losses", "weights"]


# --------------------------------------------------------------------------------------------------
# checkpointconfig.json and tensorboardoutputconfig.json, which smdebug reads too: written as a real
# job's files hold them (shiftan/simple_sagemaker's expected output of a job on the service), the
# TensorBoard prefix `<S3OutputPath>/<job>/tensorboard-output` (the SDK's
# latest_job_tensorboard_artifacts_path()), where the job's TensorBoard files are synced too.

BOARD_GOLDEN = Path(__file__).parent / "golden" / "checkpoint-tensorboard"
BOARD_CONFIGS = ("checkpointconfig.json", "tensorboardoutputconfig.json")


def plan_of(project: Path, **extra: Any) -> Any:
    return make_plan(load_request(project, request(**extra)), "dbg-job")


def test_the_checkpoint_and_tensorboard_configs_are_written_as_the_service_writes_them(project: Path) -> None:
    plan = plan_of(project, CheckpointConfig={"S3Uri": "s3://bucket/ckpt"},
                   TensorBoardOutputConfig={"S3OutputPath": "s3://bucket/board"})
    for host in plan.hosts:
        for name in BOARD_CONFIGS:
            assert host.files[f"input/config/{name}"] == (BOARD_GOLDEN / name).read_text(), (host.name, name)


def test_the_checkpoint_and_tensorboard_local_paths_given_are_written(project: Path) -> None:
    plan = plan_of(project, CheckpointConfig={"S3Uri": "s3://bucket/ckpt", "LocalPath": "/state"},
                   TensorBoardOutputConfig={"S3OutputPath": "s3://bucket/board/", "LocalPath": "/tmp/board"})
    files = plan.hosts[1].files
    assert json.loads(files["input/config/checkpointconfig.json"]) == {"LocalPath": "/state"}
    assert json.loads(files["input/config/tensorboardoutputconfig.json"]) == {
        "LocalPath": "/tmp/board/", "S3OutputPath": "s3://bucket/board/dbg-job/tensorboard-output"}


def test_without_checkpoint_or_tensorboard_configs_no_file_is_written(project: Path) -> None:
    files = plan_of(project).hosts[0].files
    assert not [name for name in BOARD_CONFIGS if f"input/config/{name}" in files]


def test_the_tensorboard_files_go_where_the_file_says(project: Path) -> None:
    plan = plan_of(project, TensorBoardOutputConfig={"S3OutputPath": "s3://bucket/board"})
    [board] = checkpoints.syncs(plan)
    said = json.loads(plan.hosts[0].files["input/config/tensorboardoutputconfig.json"])["S3OutputPath"]
    assert board.target == project / "s3" / said.removeprefix("s3://")

"""The YAML spec's `distribution:` writes the hyperparameters the real SageMaker SDK v2 writes.

Each case builds the SDK's own estimator (PyTorch or TensorFlow) with the same `distribution=` and
cluster on an EmulatorSession (no AWS, no network), asks it for its hyperparameters as `fit` does
(`_prepare_for_training`, then `hyperparameters()`), and compares them key for key, as the JSON
strings the SDK sends, with what `hyperparameters.encoded` writes for the equivalent spec. The keys
naming the code's place, the program, the job, the region and the log level differ on purpose.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sagemaker.utils
from sagemaker.estimator import Framework
from sagemaker.instance_group import InstanceGroup
from sagemaker.pytorch import PyTorch
from sagemaker.tensorflow import TensorFlow

from emulator.errors import SpecError
from emulator.jobspec import hyperparameters
from emulator.jobspec.yaml_spec import validate
from emulator.sagemaker import EmulatorSession

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
JOB = "dist-sdk-check"
# Keys that name this machine's code and job rather than the distribution; TensorFlow's model_dir
# is the job's S3 output, which the toolkit's TensorFlow support reads and a spec does not have.
NOT_COMPARED = {"sagemaker_program", "sagemaker_submit_directory", "sagemaker_job_name", "sagemaker_region",
                "sagemaker_container_log_level", "model_dir"}
# The SDK's message for a distribution on instance groups that none of its launchers runs there.
REFUSED = "Don't set training instance groups while no distribution strategies enabled!"

GPU = "ml.p4d.24xlarge"
P5 = "ml.p5.48xlarge"
HOMOGENEOUS = (GPU, 2)
HETERO = (("data_group", "ml.c5.xlarge", 2), ("dnn_group", GPU, 2))
ONE_GROUP = (("dnn_group", GPU, 2),)
Cluster = tuple[str, int] | tuple[tuple[str, str, int], ...]

MPI = {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-x NCCL_DEBUG=INFO"}
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-verbose"}}}
SMDMP = {"smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2, "microbatches": 4}}},
         "mpi": {"enabled": True, "processes_per_host": 8}}
PS = {"parameter_server": {"enabled": True}}
MWMS = {"multi_worker_mirrored_strategy": {"enabled": True}}


@dataclass(frozen=True)
class Case:
    framework: str  # "pytorch" or "tensorflow"
    distribution: dict[str, Any]  # as the spec and the SDK take it, groups by name
    cluster: Cluster


CASES = {
    "mpi-homogeneous": Case("pytorch", {"mpi": MPI}, HOMOGENEOUS),
    "mpi-on-one-group": Case("pytorch", {"mpi": MPI, "instance_groups": ["dnn_group"]}, HETERO),
    "mpi-on-the-only-group": Case("pytorch", {"mpi": MPI}, ONE_GROUP),
    "mpi-disabled": Case("pytorch", {"mpi": {"enabled": False}}, HOMOGENEOUS),
    "smddp-homogeneous": Case("pytorch", SMDDP, HOMOGENEOUS),
    "smddp-on-one-group": Case("pytorch", {**SMDDP, "instance_groups": ["dnn_group"]}, HETERO),
    "smddp-tensorflow": Case("tensorflow", {"smdistributed": {"dataparallel": {"enabled": True}}}, HOMOGENEOUS),
    "smdmp-homogeneous": Case("pytorch", SMDMP, HOMOGENEOUS),
    "smdmp-on-one-group": Case("pytorch", {**SMDMP, "instance_groups": ["dnn_group"]}, HETERO),
    "smdmp-without-mpi": Case("pytorch", {"smdistributed": SMDMP["smdistributed"]}, HOMOGENEOUS),
    "pytorchddp-homogeneous": Case("pytorch", {"pytorchddp": {"enabled": True}}, HOMOGENEOUS),
    "pytorchddp-on-one-group": Case("pytorch", {"pytorchddp": {"enabled": True}, "instance_groups": ["dnn_group"]},
                                    HETERO),
    "torch-distributed-homogeneous": Case("pytorch", {"torch_distributed": {"enabled": True}}, HOMOGENEOUS),
    "torch-distributed-on-one-group": Case("pytorch", {"torch_distributed": {"enabled": True},
                                                       "instance_groups": ["dnn_group"]}, HETERO),
    "torch-distributed-on-the-only-group": Case("pytorch", {"torch_distributed": {"enabled": True}}, ONE_GROUP),
    "torch-distributed-disabled": Case("pytorch", {"torch_distributed": {"enabled": False}}, HOMOGENEOUS),
    # SMP v2 and p5: torch_distributed launches, smdistributed configures (PyTorch._pytorch_distribution_configuration).
    "torch-distributed-with-smdmp": Case("pytorch", {"torch_distributed": {"enabled": True},
                                                     "smdistributed": SMDMP["smdistributed"]}, (P5, 2)),
    "torch-distributed-with-smddp-on-one-group": Case(
        "pytorch", {"torch_distributed": {"enabled": True}, **SMDDP, "instance_groups": ["dnn_group"]}, HETERO),
    "parameter-server-homogeneous": Case("tensorflow", PS, HOMOGENEOUS),
    "mwms-homogeneous": Case("tensorflow", MWMS, HOMOGENEOUS),
}

REFUSED_CASES = {
    "parameter-server-on-one-group": Case("tensorflow", {**PS, "instance_groups": ["dnn_group"]}, HETERO),
    "parameter-server-on-the-only-group": Case("tensorflow", PS, ONE_GROUP),
    "mwms-on-one-group": Case("tensorflow", {**MWMS, "instance_groups": ["dnn_group"]}, HETERO),
    "mpi-disabled-on-one-group": Case("pytorch", {"mpi": {"enabled": False}, "instance_groups": ["dnn_group"]},
                                      HETERO),
    "torch-distributed-with-smdmp-on-one-group": Case(
        "pytorch", {"torch_distributed": {"enabled": True}, "smdistributed": SMDMP["smdistributed"],
                    "instance_groups": ["dnn_group"]}, HETERO),
    "torch-distributed-disabled-on-one-group": Case(
        "pytorch", {"torch_distributed": {"enabled": False}, "instance_groups": ["dnn_group"]}, HETERO),
}


@dataclass(frozen=True)
class Setup:
    folder: Path  # holds train.py; the working folder
    session: EmulatorSession


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One session for every case (making one costs half a second): no credentials or region from the
    environment, the script in the working folder."""
    folder = tmp_path_factory.mktemp("distribution-sdk")
    with pytest.MonkeyPatch.context() as patch:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                    "HETERO_EMU_S3_ROOT"):
            patch.delenv(key, raising=False)
        patch.setenv("AWS_CONFIG_FILE", str(folder / "no-config"))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "no-credentials"))
        patch.setenv("HETERO_EMU_STATE_DIR", str(folder / "state"))
        # The SDK checks its config against its JSON schema on every look-up (a quarter second each);
        # the session's config is checked once when it is made.
        session = EmulatorSession(s3_root=_made(folder / "s3"))
        patch.setattr(sagemaker.utils, "validate_sagemaker_config", lambda config: None)
        (folder / "train.py").write_text("")
        patch.chdir(folder)
        yield Setup(folder, session)


def _made(folder: Path) -> Path:
    folder.mkdir()
    return folder


def _estimator(case: Case, sdk: Setup) -> Framework:
    distribution = copy.deepcopy(case.distribution)
    cluster: dict[str, Any]
    if isinstance(case.cluster[0], str):
        cluster = {"instance_type": case.cluster[0], "instance_count": case.cluster[1]}
    else:
        groups = {name: InstanceGroup(name, itype, count) for name, itype, count in case.cluster}  # type: ignore[misc]
        cluster = {"instance_groups": list(groups.values())}
        if "instance_groups" in distribution:
            distribution["instance_groups"] = [groups[name] for name in distribution["instance_groups"]]
    common = dict(entry_point="train.py", role=ROLE, py_version="py310", distribution=distribution,
                  sagemaker_session=sdk.session, **cluster)
    if case.framework == "pytorch":
        return PyTorch(framework_version="2.2.0", **common)
    return TensorFlow(framework_version="2.11", **{**common, "py_version": "py39"})


def _sdk_hyperparameters(case: Case, sdk: Setup) -> dict[str, str]:
    """The `sagemaker_*` distribution keys the SDK sends, as `fit` gets them (EstimatorBase.fit ->
    _prepare_for_training, then _TrainingJob._get_train_args -> estimator.hyperparameters())."""
    estimator = _estimator(case, sdk)
    estimator._prepare_for_training(job_name=JOB)
    return {k: v for k, v in estimator.hyperparameters().items() if k not in NOT_COMPARED}


def _spec_raw(case: Case) -> dict[str, Any]:
    raw: dict[str, Any] = {"job_name": JOB, "entry_point": "train.py", "distribution": copy.deepcopy(case.distribution)}
    if isinstance(case.cluster[0], str):
        raw.update(instance_type=case.cluster[0], instance_count=case.cluster[1])
    else:
        raw["instance_groups"] = [{"instance_group_name": name, "instance_type": itype, "instance_count": count}
                                  for name, itype, count in case.cluster]  # type: ignore[misc]
    return raw


def _our_hyperparameters(case: Case, sdk: Setup) -> dict[str, str]:
    spec = validate(_spec_raw(case), sdk.folder)
    return {k: v for k, v in hyperparameters.encoded(spec, JOB).items() if k not in NOT_COMPARED}


@pytest.mark.parametrize("name", list(CASES))
def test_the_spec_writes_the_sdks_distribution_hyperparameters(name: str, sdk: Setup) -> None:
    case = CASES[name]
    assert _our_hyperparameters(case, sdk) == _sdk_hyperparameters(case, sdk)


@pytest.mark.parametrize("name", list(REFUSED_CASES))
def test_what_the_sdk_refuses_on_instance_groups_the_spec_refuses_with_its_message(name: str, sdk: Setup) -> None:
    case = REFUSED_CASES[name]
    with pytest.raises(ValueError, match=re.escape(REFUSED)):
        _sdk_hyperparameters(case, sdk)
    with pytest.raises(SpecError) as info:
        validate(_spec_raw(case), sdk.folder)
    assert info.value.exit_code == 2
    assert [(p.path, p.message) for p in info.value.problems] == [("distribution", REFUSED)]


def test_known_differences_from_older_sdks_are_the_sdks_own(sdk: Setup) -> None:
    """The cases the SDK changed (pytorchddp since 2.221.1, torch_distributed, smdistributed on groups)
    pinned as values, so a reader sees them without running the SDK."""
    ddp = _our_hyperparameters(CASES["pytorchddp-homogeneous"], sdk)
    assert ddp == {"sagemaker_distributed_dataparallel_enabled": "true",
                   "sagemaker_distributed_dataparallel_custom_mpi_options": '""',
                   "sagemaker_instance_type": f'"{GPU}"'}
    torch = _our_hyperparameters(CASES["torch-distributed-on-one-group"], sdk)
    assert torch == {"sagemaker_torch_distributed_enabled": "true"}
    smddp = _our_hyperparameters(CASES["smddp-on-one-group"], sdk)
    assert smddp["sagemaker_instance_type"] == "null"


def test_smdistributed_on_p5_without_torch_distributed_is_refused_as_the_sdk_does(sdk: Setup) -> None:
    case = Case("pytorch", SMDMP, (P5, 2))
    message = "SMModelParallel and SMDataParallel currently do not support p5 instances."
    with pytest.raises(ValueError, match=re.escape(message)):
        _sdk_hyperparameters(case, sdk)
    with pytest.raises(SpecError) as info:
        validate(_spec_raw(case), sdk.folder)
    assert [(p.path, p.message) for p in info.value.problems] == [("distribution", message)]


def test_model_parallel_parameters_are_a_mapping(sdk: Setup) -> None:
    """The SDK also takes a path to a JSON file; a spec gives the mapping itself."""
    raw = _spec_raw(CASES["smdmp-homogeneous"])
    raw["distribution"]["smdistributed"]["modelparallel"]["parameters"] = "mp.json"
    with pytest.raises(SpecError) as info:
        validate(raw, sdk.folder)
    assert [(p.path, p.message) for p in info.value.problems] == [
        ("distribution.smdistributed.modelparallel.parameters", "must be a mapping, got string")]

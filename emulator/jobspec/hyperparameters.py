"""A job's hyperparameters as the SDK sends them and the service writes them into hyperparameters.json:
the job's own, the `sagemaker_*` keys the SDK v2's estimators add (the code, the job, the region, the
`distribution=`), every value JSON-encoded.

These are a fact of the request as much as of the host's files: a CreateTrainingJob request built
from a spec carries them (`emulator.jobspec.request.to_request`), and the plan writes them under
/opt/ml/input/config (`emulator.planning.contract`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from emulator.jobspec.model import CODE_DIR, Distribution, JobSpec
from emulator.jobspec.model import strategy_enabled as _enabled


def for_distribution(distribution: Distribution, instance_type: str | None) -> dict[str, Any]:
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



def encoded(spec: JobSpec, job_name: str) -> dict[str, str]:
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
        values.update(for_distribution(spec.distribution, estimator_type))
    # A request's HyperParameters are the API's strings already: written as given, not encoded twice.
    given = {key: value if spec.hyperparameters_encoded else json.dumps(value) for key, value in values.items()
             if key in spec.hyperparameters}
    written = {**given, **{key: json.dumps(value) for key, value in values.items() if key not in given}}
    if spec.request_hyperparameters is not None:
        # A request: the keys it had, no more (the code's place among them is /opt/ml/code, as above).
        return {key: value for key, value in written.items() if key in spec.request_hyperparameters}
    return written

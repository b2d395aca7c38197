"""DescribeTrainingJob's answer in the service's own shape, for every job and every moment of it.

A job's description is kept in job.json (and, while it runs, its record) with what the emulator adds:
the hosts, the local image, the hardware, seconds per step (`hetero-emu describe` prints them). What
a boto3 client gets, through the in-process sessions or `hetero-emu serve`, is only what botocore's
model of the operation names: its members, in plain types, the booleans the service always returns,
and no list shorter than the model allows (`InputDataConfig` is at least one channel or absent). The
model is botocore's own (`botocore/data/sagemaker/*/service-2.json`), so the answer follows the
version of botocore installed, not our copy of it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

OPERATION = "DescribeTrainingJob"

# What the service returns for every job, when the request did not say otherwise: false for each flag
# (CreateTrainingJob's defaults), and OutputDataConfig.KmsKeyId as "" (the SDK's Estimator.attach reads
# it with `job_details["OutputDataConfig"]["KmsKeyId"]`, sagemaker/estimator.py
# `_prepare_init_params_from_job_description`).
ALWAYS_FALSE = ("EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining")


@functools.lru_cache(maxsize=1)
def output_shape() -> Any:
    """botocore's StructureShape of DescribeTrainingJob's output (loading the model takes ~0.3 s, once)."""
    # Imported here: botocore's session costs ~50 ms to import, which every `hetero-emu` command paid
    # through the jobs layer though only an answer to boto3 needs the model.
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model(OPERATION).output_shape


def service_answer(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` (a job.json, or a running job's record with its request) as the service answers
    DescribeTrainingJob: only the model's members, plain JSON types (a status enum becomes its text),
    ISO 8601 times left as text (the stub and the wire turn them into timestamps), the flags the
    service always returns, and ModelArtifacts, which the model requires of every answer."""
    plain = json.loads(json.dumps(doc, default=str))
    shape = output_shape()
    answer: dict[str, Any] = _fit(plain, shape)
    for flag in ALWAYS_FALSE:
        answer.setdefault(flag, False)
    output = answer.get("OutputDataConfig")
    if isinstance(output, dict):
        output.setdefault("KmsKeyId", "")
    if "ModelArtifacts" not in answer:
        # Where the model will be written, as the service names it before the job has written it
        # (<S3OutputPath>/<job>/output/model.tar.gz).
        where = str((output or {}).get("S3OutputPath", "")).rstrip("/")
        name = "model" if (output or {}).get("CompressionType") == "NONE" else "model.tar.gz"
        answer["ModelArtifacts"] = {"S3ModelArtifacts": f"{where}/{answer.get('TrainingJobName', '')}/output/{name}"}
    return answer


def _fit(value: Any, shape: Any) -> Any:
    """`value` cut to `shape`: a structure's unknown members and null values dropped, a list below its
    minimum length dropped (None), every element fitted to the member's shape."""
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            return None
        members = shape.members
        out = {}
        for key, item in value.items():
            if key in members and item is not None:
                fitted = _fit(item, members[key])
                if fitted is not None:
                    out[key] = fitted
        return out
    if kind == "list":
        if not isinstance(value, list):
            return None
        items = [f for f in (_fit(v, shape.member) for v in value) if f is not None]
        return items if len(items) >= shape.metadata.get("min", 0) else None
    if kind == "map":
        if not isinstance(value, dict):
            return None
        return {str(k): f for k, v in value.items() if (f := _fit(v, shape.value)) is not None}
    return value


def problems(answer: Mapping[str, Any]) -> list[str]:
    """Where `answer` breaks botocore's DescribeTrainingJob output shape: a member the model does not
    name, a type it does not allow, a required member missing, a value outside an enum. Empty when
    the answer is the service's. (botocore checks requests, not answers; its validator walks any shape.)"""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(answer), output_shape())
    found = [line.strip() for line in report.generate_report().splitlines() if line.strip()] \
        if report.has_errors() else []
    found += _enum_problems(answer, output_shape(), "")
    return found


def _enum_problems(value: Any, shape: Any, where: str) -> list[str]:
    kind = shape.type_name
    if kind == "structure" and isinstance(value, Mapping):
        return [p for key, item in value.items() if key in shape.members
                for p in _enum_problems(item, shape.members[key], f"{where}.{key}" if where else key)]
    if kind == "list" and isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _enum_problems(item, shape.member, f"{where}[{i}]")]
    if kind == "map" and isinstance(value, Mapping):
        return [p for key, item in value.items() for p in _enum_problems(item, shape.value, f"{where}.{key}")]
    allowed = getattr(shape, "enum", None)  # a StringShape's, when the model lists its values
    if allowed and value not in allowed:
        return [f"{where}: {value!r} is not one of {', '.join(allowed)}"]
    return []

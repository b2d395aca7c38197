"""The JSON protocol on the server's side (awsJson 1.0 and 1.1: SageMaker, CloudWatch Logs, and
CloudWatch's JSON variant): `POST /` with `X-Amz-Target: <targetPrefix>.<Operation>` and a JSON body.

What botocore's `JSONSerializer` writes and its `JSONParser` reads
(https://smithy.io/2.0/aws/protocols/aws-json-1_1-protocol.html): timestamps as epoch seconds
(numbers), blobs as base64 text, every other member by its name. Errors are `{"__type": Code,
"message": ...}` with the `x-amzn-ErrorType` header, which botocore turns into the client's modelled
exception when the code is one of the service's.

The same four functions in each codec of this package: `operation_name`, `parse_request`,
`serialize_response`, `serialize_error`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from botocore.model import OperationModel, ServiceModel, Shape

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes


def operation_name(service_model: ServiceModel, request: HttpRequest) -> str:
    target = request.headers.get("x-amz-target", "")
    prefix, _, name = target.partition(".")
    if prefix != service_model.metadata.get("targetPrefix") or not name:
        expected = service_model.metadata.get("targetPrefix")
        raise WireError("UnknownOperationException", f"X-Amz-Target {target!r} names no operation of "
                        f"{service_model.service_name} (expected {expected}.<Operation>)")
    return name


def parse_request(operation_model: OperationModel, request: HttpRequest) -> dict[str, Any]:
    raw = body_bytes(request)
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise WireError("SerializationException", f"the request body is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise WireError("SerializationException", "the request body is not a JSON object")
    params: dict[str, Any] = read_value(value, operation_model.input_shape)
    return params


def read_value(value: Any, shape: Shape | None) -> Any:
    """A decoded JSON value as the caller's parameters: timestamps as datetimes, blobs as bytes."""
    if shape is None or value is None:
        return value
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        members = shape.members
        return {k: read_value(v, members.get(k)) for k, v in value.items()}
    if kind == "list" and isinstance(value, list):
        return [read_value(v, shape.member) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: read_value(v, shape.value) for k, v in value.items()}
    if kind == "timestamp":
        return read_timestamp(value)
    if kind == "blob" and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise WireError("SerializationException", f"{shape.name}: not base64") from None
    return value


def read_timestamp(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        try:
            return datetime.fromtimestamp(float(value), timezone.utc)
        except ValueError:
            pass
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise WireError("SerializationException", f"{value!r} is not a timestamp") from None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
    return value


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    body = json.dumps(write_value(dict(output), operation_model.output_shape), separators=(",", ":"))
    return HttpResponse(200, {"content-type": _content_type(operation_model.service_model)}, body.encode())


def write_value(value: Any, shape: Any) -> Any:
    """An answer as JSON values: timestamps (datetimes, or ISO 8601 text where the model says
    timestamp) as epoch seconds, blobs as base64; members the model does not name are kept (the
    emulator's own additions), written by their Python type."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    kind = shape.type_name if shape is not None else None
    if isinstance(value, dict):
        if kind == "structure":
            members = shape.members
            return {k: write_value(v, members.get(k)) for k, v in value.items()}
        inner = shape.value if kind == "map" else None
        return {str(k): write_value(v, inner) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        inner = shape.member if kind == "list" else None
        return [write_value(v, inner) for v in value]
    if kind == "timestamp" and isinstance(value, str):
        return read_timestamp(value).timestamp()
    return value


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    body = json.dumps({"__type": code, "message": message}).encode()
    return HttpResponse(status, {"content-type": _content_type(service_model), "x-amzn-errortype": code}, body)


def _content_type(service_model: ServiceModel) -> str:
    return f"application/x-amz-json-{service_model.metadata.get('jsonVersion', '1.1')}"

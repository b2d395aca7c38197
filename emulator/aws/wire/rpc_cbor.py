"""Smithy RPC v2 CBOR on the server's side: what boto3 speaks to CloudWatch today (its model lists
`smithy-rpc-v2-cbor` first). `POST /service/<ServiceName>/operation/<Operation>` with the header
`smithy-protocol: rpc-v2-cbor` and a CBOR map as the body
(https://smithy.io/2.0/additional-specs/protocols/smithy-rpc-v2.html).

CBOR itself is the `cbor2` package's (in the serve extra): timestamps are tag 1 (epoch seconds),
which cbor2 reads as datetimes and writes with `datetime_as_timestamp`; blobs are byte strings.
Errors are a map with `__type` and `message`, as botocore's `RpcV2CBORParser` reads them.

The same four functions as the other codecs: `operation_name`, `parse_request`,
`serialize_response`, `serialize_error`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import cbor2
from botocore.model import OperationModel, ServiceModel

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes
from emulator.aws.wire.json_rpc import read_timestamp, read_value

PATH = re.compile(r"^/service/([^/]+)/operation/([^/]+)$")
HEADERS = {"smithy-protocol": "rpc-v2-cbor", "content-type": "application/cbor"}


def operation_name(service_model: ServiceModel, request: HttpRequest) -> str:
    found = PATH.match(request.path)
    if not found:
        raise WireError("UnknownOperationException", f"{request.path!r} is not /service/<name>/operation/<op>")
    return found.group(2)


def parse_request(operation_model: OperationModel, request: HttpRequest) -> dict[str, Any]:
    raw = body_bytes(request)
    if not raw:
        return {}
    try:
        value = cbor2.loads(raw)
    except (cbor2.CBORDecodeError, ValueError) as err:
        raise WireError("SerializationException", f"the request body is not CBOR: {err}") from None
    if not isinstance(value, dict):
        raise WireError("SerializationException", "the request body is not a CBOR map")
    # Blobs arrive as byte strings and timestamps (tag 1) as datetimes already; the rest as JSON's.
    params: dict[str, Any] = read_value(value, operation_model.input_shape)
    return params


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    body = cbor2.dumps(_write(dict(output), operation_model.output_shape), datetime_as_timestamp=True,
                       timezone=timezone.utc)
    return HttpResponse(200, dict(HEADERS), body)


def _write(value: Any, shape: Any) -> Any:
    kind = shape.type_name if shape is not None else None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, dict):
        if kind == "structure":
            members = shape.members
            return {k: _write(v, members.get(k)) for k, v in value.items()}
        return {str(k): _write(v, shape.value if kind == "map" else None)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_write(v, shape.member if kind == "list" else None) for v in value]
    if kind == "timestamp" and isinstance(value, (str, int, float)):
        return read_timestamp(value)
    return value


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    return HttpResponse(status, dict(HEADERS), cbor2.dumps({"__type": code, "message": message}))

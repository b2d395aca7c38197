"""Smithy RPC v2 CBOR on the server's side: one of CloudWatch's three protocols (its model lists
`smithy-rpc-v2-cbor`, `json`, `query`). botocore 1.44 itself speaks JSON to CloudWatch (its priority
list, `botocore.utils.PRIORITY_ORDERED_SUPPORTED_PROTOCOLS`, puts `json` first), but a client that
takes the model's first protocol speaks CBOR; botocore's `RpcV2CBORSerializer`/`RpcV2CBORParser`
are the reference here.

A request is `POST /service/<ServiceName>/operation/<Operation>` (the service's `targetPrefix` as
its name) with the header `smithy-protocol: rpc-v2-cbor` and one CBOR map as the body
(https://smithy.io/2.0/additional-specs/protocols/smithy-rpc-v2.html). CBOR carries what JSON
cannot: timestamps are tag 1 (epoch seconds), blobs byte strings, NaN and ±Infinity floats. The
answer's members go by their member names (what `BaseRpcV2Parser._handle_structure` reads). An
error is a map with `__type` and `message`, with the query code in `x-amzn-query-error` for a
service with the `awsQueryCompatible` trait, as in `json_rpc`.

CBOR itself is the `cbor2` package's (a dependency of the serve extra): botocore's own CBOR code is
tied to its client-side classes (`BaseCBORParser` reads, `CBORSerializer` writes only shaped
values), and cbor2 reads every well-formed item, tag 1 included, as a datetime.

The API, as in `json_rpc` and `query`:

- `operation_name(service_model, request) -> str` (a `WireError` UnknownOperationException when
  the path names another service or no operation of this one),
- `parse_request(operation_model, request) -> dict` (SerializationException when the body is not
  one CBOR map of the operation's input),
- `serialize_response(operation_model, output) -> HttpResponse`,
- `serialize_error(service_model, code, message, status) -> HttpResponse`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

import cbor2
from botocore.model import OperationModel, ServiceModel, Shape

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes
from emulator.aws.wire.json_rpc import (
    Values,
    checked_operation,
    error_shape,
    query_error_header,
    request_id,
    to_datetime,
    without_metadata,
)

# The path may sit under a prefix of the endpoint's URL (Smithy: "the path MAY have a prefix").
PATH = re.compile(r"^(?:/[^/]+)*?/service/([^/]+)/operation/([^/]+)$")
CONTENT_TYPE = "application/cbor"


def operation_name(service_model: ServiceModel, request: HttpRequest) -> str:
    """The operation `/service/<ServiceName>/operation/<Operation>` names."""
    found = PATH.match(request.path)
    prefix = service_model.metadata.get("targetPrefix", "")
    if not found:
        raise WireError("UnknownOperationException", f"{request.path!r} names no operation: RPC v2 CBOR requests "
                        f"go to /service/{prefix}/operation/<Operation>")
    service, name = unquote(found.group(1)), unquote(found.group(2))
    return checked_operation(service_model, service, name, shown=f"{service}.{name}",
                             form=f"/service/{prefix}/operation/<Operation>")


def parse_request(operation_model: OperationModel, request: HttpRequest) -> dict[str, Any]:
    """The parameters of a CBOR request; an empty body is no parameters."""
    raw = body_bytes(request)
    if not raw:
        return {}
    stream = io.BytesIO(raw)
    try:
        value = cbor2.CBORDecoder(stream).decode()
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as err:
        raise WireError("SerializationException", f"The request body is not CBOR: {err}") from None
    if stream.tell() != len(raw):
        raise WireError("SerializationException", f"The request body is one CBOR item and {len(raw) - stream.tell()} "
                        "bytes more: it must be the one item alone")
    if not isinstance(value, dict):
        raise WireError("SerializationException", "The request body is a CBOR "
                        f"{type(value).__name__}, not a map")
    shape = operation_model.input_shape
    if shape is None:
        return {}
    try:
        params: dict[str, Any] = CBOR_VALUES.read(value, shape, "")
    except RecursionError:  # cbor2's shared references (tag 28/29) can make a cycle
        raise WireError("SerializationException", "The request body nests without end") from None
    return params


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    """The answer as one CBOR map (always a map: botocore's parser reads an empty body as no map)."""
    value = CBOR_VALUES.write(without_metadata(output), operation_model.output_shape)
    return HttpResponse(200, _headers(), _dumps(value if isinstance(value, dict) else {}))


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    """A map of `__type` and `message`, which botocore's `RpcV2CBORParser._do_error_parse` reads."""
    shape = error_shape(service_model, code)
    body = {"__type": shape.name if shape is not None else code, "message": message}
    headers = _headers()
    headers.update(query_error_header(service_model, shape, code, status))
    return HttpResponse(status, headers, _dumps(body))


def _headers() -> dict[str, str]:
    # Smithy: every response carries smithy-protocol, so a client knows the server spoke its protocol.
    return {"smithy-protocol": "rpc-v2-cbor", "content-type": CONTENT_TYPE, "x-amzn-requestid": request_id()}


def _dumps(value: Any) -> bytes:
    # datetime_as_timestamp: tag 1 with epoch seconds (an integer when whole), the one timestamp form
    # botocore's BaseCBORParser._parse_tag reads; cbor2's default is tag 0 text.
    return cbor2.dumps(value, datetime_as_timestamp=True, timezone=timezone.utc)


class CborValues(Values):
    """The JSON walk of `json_rpc.Values` with CBOR's own leaf types."""

    def read_float(self, value: Any, shape: Shape, path: str) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        raise self.mismatch(path, shape, value)

    def read_timestamp(self, value: Any, shape: Shape, path: str) -> datetime:
        # cbor2 reads tag 1 (and tag 0, RFC 3339 text) as an aware datetime; plain epoch seconds
        # are taken too, as Smithy's servers do.
        if isinstance(value, datetime):
            return to_datetime(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return to_datetime(value)
            except ValueError as err:
                raise WireError("SerializationException", f"{path or shape.name}: {err}") from None
        raise self.mismatch(path, shape, value)

    def read_blob(self, value: Any, shape: Shape, path: str) -> bytes:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        raise self.mismatch(path, shape, value)

    def read(self, value: Any, shape: Shape | None, path: str) -> Any:
        if value is cbor2.undefined:  # CBOR's undefined is a null to botocore too (BaseCBORParser)
            return None
        return super().read(value, shape, path)

    def expected(self, shape: Shape) -> str:
        return {"structure": "a map", "map": "a map", "timestamp": "a tag 1 timestamp",
                "blob": "a byte string"}.get(shape.type_name) or super().expected(shape)

    @staticmethod
    def output_name(name: str, member: Shape) -> str:
        return name

    def write_timestamp(self, stamp: datetime, shape: Shape) -> Any:
        return stamp

    def write_blob(self, data: bytes) -> Any:
        return data

    def write_float(self, number: float) -> Any:
        return number

    def write_unmodelled(self, value: Any) -> Any:
        """A value no shape describes, in the CBOR types botocore's parser reads: datetimes as tag 1,
        bytes as byte strings; no decimals or sets (cbor2 would write tags botocore refuses)."""
        if isinstance(value, (datetime, date)):
            return to_datetime(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        if isinstance(value, Mapping):
            return {str(k): self.write_unmodelled(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.write_unmodelled(v) for v in value]
        plain = super().write_unmodelled(value)  # enums by value
        return plain if plain is None or isinstance(plain, (str, int, float, bool, dict, list)) else str(plain)


CBOR_VALUES = CborValues()

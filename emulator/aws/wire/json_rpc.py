"""The awsJson protocol (1.0 and 1.1) on the server's side: SageMaker, CloudWatch Logs, and the JSON
variant of CloudWatch, which is the one a default boto3 CloudWatch client speaks (botocore picks a
service's protocol by its own priority, `botocore.utils.PRIORITY_ORDERED_SUPPORTED_PROTOCOLS`, which
puts `json` before `smithy-rpc-v2-cbor` and `query`).

A request is `POST /` with `X-Amz-Target: <targetPrefix>.<Operation>` and a JSON object as the body
(https://smithy.io/2.0/aws/protocols/aws-json-1_1-protocol.html). Members go by their name (or their
`locationName`), timestamps are epoch seconds, blobs base64 text, and the floats NaN and ±Infinity
the strings "NaN", "Infinity" and "-Infinity" (what botocore's `JSONSerializer` writes and its
`JSONParser` reads). An error is `{"__type": ..., "message": ...}`; for a service that moved off the
query protocol (the model's `awsQueryCompatible`, CloudWatch) the `x-amzn-query-error: Code;Fault`
header carries the query protocol's code, which botocore reports as the error's code.

The API, the same in `json_rpc`, `rpc_cbor` and `query` (the query protocol reads its form first,
see there):

- `operation_name(service_model, request) -> str`: the operation a request names; a `WireError`
  (UnknownOperationException) when the service has no such operation.
- `parse_request(operation_model, request) -> dict`: the operation's parameters, typed by the model
  (datetimes in UTC, bytes); a `WireError` (SerializationException) for a body that is not the
  operation's input.
- `serialize_response(operation_model, output) -> HttpResponse`: an operation's answer (the dict a
  handler returned, as botocore's client would return it: datetimes or ISO 8601 text for timestamps,
  bytes for blobs) as the protocol writes it; members the model does not name are kept.
- `serialize_error(service_model, code, message, status) -> HttpResponse`: an error botocore raises
  as the client's own exception when `code` is one the model names (by its code or its shape name),
  as a `ClientError` with that code otherwise.

This module also holds what the JSON-like codecs share (`Values`, which `rpc_cbor` specialises) and
what all three share (timestamps, error shapes, request ids).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import uuid
from collections.abc import Mapping
from datetime import date, datetime, timezone
from decimal import Decimal
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any

import orjson
from botocore.model import OperationModel, ServiceModel, Shape
from botocore.utils import parse_timestamp

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes

# The awsJson spelling of the floats JSON has no literal for (Smithy's awsJson "Numbers" rule;
# botocore's Serializer._handle_float writes them so).
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Values an answer holds that every codec writes unchanged, by their exact type (a str enum such as
# `Status` is not one: it is written by its value), and the shapes that convert even those.
AS_IS = frozenset({str, int, bool})
TEXT = frozenset({str})
CONVERTED = frozenset({"timestamp", "blob", "float", "double"})
# Values._members' plans, by protocol and shape (the shape kept with its plan).
_MEMBERS: dict[tuple[type, int], tuple[Shape, dict[str, tuple[str, Shape, bool]]]] = {}
# Values._plain's member names, kept the same way.
_PLAIN: dict[tuple[type, int], tuple[Shape, frozenset[str]]] = {}


# --------------------------------------------------------------------------------------------------
# The four functions


def operation_name(service_model: ServiceModel, request: HttpRequest) -> str:
    """The operation `X-Amz-Target: <targetPrefix>.<Operation>` names."""
    target = request.headers.get("x-amz-target", "")
    prefix = service_model.metadata.get("targetPrefix", "")
    # rpartition: an operation's name has no dot, a target prefix might.
    given, _, name = target.rpartition(".")
    if not target:
        raise WireError("UnknownOperationException", f"The request has no X-Amz-Target header: a "
                        f"{service_model.service_name} request names its operation as {prefix}.<Operation>")
    return checked_operation(service_model, given, name, shown=target, form=f"{prefix}.<Operation>")


def checked_operation(service_model: ServiceModel, given: str, name: str, *, shown: str, form: str) -> str:
    """`name` when `given` is the service's target prefix and the model has that operation; else the
    service's UnknownOperationException naming what was asked (`shown`) and how it is asked (`form`).
    The JSON and CBOR protocols name an operation by the same two parts."""
    if given != service_model.metadata.get("targetPrefix", ""):
        raise WireError("UnknownOperationException", f"Operation {shown} is not supported: it is not an operation "
                        f"of {service_model.service_name}, whose operations are {form}")
    if name not in service_model.operation_names:
        raise WireError("UnknownOperationException", f"Operation {shown} is not supported: "
                        f"{service_model.service_name} has no operation {name!r}")
    return name


def parse_request(operation_model: OperationModel, request: HttpRequest) -> dict[str, Any]:
    """The parameters of a JSON request; an empty body is no parameters."""
    raw = body_bytes(request)
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise WireError("SerializationException", f"The request body is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise WireError("SerializationException", f"The request body is a JSON {_kind(value)}, not an object")
    shape = operation_model.input_shape
    if shape is None:  # an operation without input: whatever the body holds means nothing
        return {}
    try:
        params: dict[str, Any] = JSON_VALUES.read(value, shape, "")
    except RecursionError:  # a recursive shape nested deeper than Python recurses
        raise WireError("SerializationException", "The request body nests too deep") from None
    return params


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    """The answer as a JSON object; the Content-Type names the model's `jsonVersion`."""
    value = JSON_VALUES.write(without_metadata(output), operation_model.output_shape)
    body = json_bytes(value)
    return HttpResponse(200, {"content-type": content_type(operation_model.service_model),
                              "x-amzn-requestid": request_id()}, body)


def json_bytes(value: Any) -> bytes:
    """`value` as compact JSON. orjson writes it (a tenth of the standard library's time: GetLogEvents'
    200 events in 15 us instead of 120, docs/benchmarks.md); what orjson refuses, the standard library
    writes: a lone surrogate (text decoded with surrogateescape) as an escape, an integer past 64 bits.
    `default=str`, for either: the emulator's own additions may hold any object, and JSON gets its text
    (orjson's own forms of datetimes and dataclasses are turned off, so both write the same)."""
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":"), default=str).encode()


_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    """`{"__type": <shape>, "message": ...}`, which botocore's `BaseJSONParser._do_error_parse` reads."""
    shape = error_shape(service_model, code)
    type_name = shape.name if shape is not None else code
    body: dict[str, str] = {"__type": type_name, "message": message}
    if shape is not None and "Message" in shape.members:
        # The modelled exception's own member: botocore parses the error body with the error shape as
        # well (endpoint.py `_add_modeled_error_fields`), and some shapes spell it with a capital.
        body["Message"] = message
    headers = {"content-type": content_type(service_model), "x-amzn-errortype": type_name,
               "x-amzn-requestid": request_id()}
    headers.update(query_error_header(service_model, shape, code, status))
    return HttpResponse(status, headers, json.dumps(body).encode())


def content_type(service_model: ServiceModel) -> str:
    return f"application/x-amz-json-{service_model.metadata.get('jsonVersion', '1.1')}"


# --------------------------------------------------------------------------------------------------
# What the codecs share


def request_id() -> str:
    """A request id as AWS writes them (a UUID), which botocore puts in ResponseMetadata."""
    return str(uuid.uuid4())


def without_metadata(output: Mapping[str, Any]) -> dict[str, Any]:
    """An answer without the `ResponseMetadata` botocore adds on the client's side (no model names it)."""
    return {k: v for k, v in output.items() if k != "ResponseMetadata"}


def to_datetime(value: Any) -> datetime:
    """A timestamp as a timezone-aware UTC datetime, from a datetime (a naive one is UTC), a date,
    epoch seconds, or text: epoch seconds, ISO 8601 or RFC 822. ValueError when it is none of them."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{value!r} is no time (epoch seconds out of range)") from None
    if isinstance(value, str):
        text = value.strip()
        try:
            return to_datetime(float(text))
        except ValueError:
            pass
        try:
            # Python 3.10's fromisoformat knows no "Z"; what botocore writes is otherwise its format.
            return to_datetime(datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text))
        except ValueError:
            pass
        try:
            return to_datetime(parsedate_to_datetime(text))
        except (TypeError, ValueError, IndexError):
            pass
        try:  # dateutil's reading of the rest of ISO 8601, as botocore's own parser does
            return to_datetime(parse_timestamp(text))
        except (TypeError, ValueError, OverflowError):
            pass
    raise ValueError(f"{value!r} is not a timestamp (epoch seconds, ISO 8601 or RFC 822)")


def format_timestamp(stamp: datetime, timestamp_format: str) -> str | int | float:
    """A UTC datetime in a model's `timestampFormat`: epoch seconds (an integer when whole, as AWS
    writes them), ISO 8601 (microseconds only when there are any) or RFC 822."""
    fmt = timestamp_format.lower()
    if fmt == "iso8601":
        text = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f" if stamp.microsecond else "%Y-%m-%dT%H:%M:%S")
        return text + "Z"
    if fmt == "rfc822":
        return format_datetime(stamp, usegmt=True)
    seconds = stamp.timestamp()
    return int(seconds) if seconds.is_integer() else seconds


def error_shape(service_model: ServiceModel, code: str) -> Shape | None:
    """The modelled exception `code` names: by its shape name (`InvalidParameterValueException`) or
    by its error code (`InvalidParameterValue`, the query protocol's, which botocore's client maps
    to its exception classes: errorfactory.py keys them by `Shape.error_code`)."""
    for shape in service_model.error_shapes:
        if shape.name == code:
            return shape
    found: Shape | None = service_model.shape_for_error_code(code)
    return found


def fault(shape: Shape | None, status: int) -> str:
    """Sender or Receiver: the model's `senderFault` where it says, else the HTTP status's class."""
    if shape is not None and shape.metadata.get("error", {}).get("senderFault"):
        return "Sender"
    return "Sender" if status < 500 else "Receiver"


def query_error_header(service_model: ServiceModel, shape: Shape | None, code: str, status: int) -> dict[str, str]:
    """`x-amzn-query-error: <query code>;<fault>` for a service with the `awsQueryCompatible` trait:
    botocore takes the error's code from it (parsers.py `_do_query_compatible_error_parse`), so a
    JSON or CBOR CloudWatch error carries the same code as the query protocol's."""
    if "awsQueryCompatible" not in service_model.metadata:
        return {}
    query_code = shape.error_code if shape is not None else code
    return {"x-amzn-query-error": f"{query_code};{fault(shape, status)}"}


def _is_whole(number: float | Decimal) -> bool:
    return math.isfinite(number) and number == int(number)


def _kind(value: Any) -> str:
    """A decoded value's type in the words of JSON (and CBOR), for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "byte string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Values:
    """Decoded JSON values to an operation's parameters and an answer to JSON values, following the
    shapes of the model. `rpc_cbor.CborValues` overrides the leaf types CBOR carries natively
    (timestamps, blobs, floats) and the names of members in an answer."""

    def read(self, value: Any, shape: Shape | None, path: str) -> Any:
        """`value` as the parameter `shape` describes; a WireError (SerializationException) names
        the member (`path`) whose value is not of its type. Members the model does not name are
        kept as decoded: a client with a newer model than this botocore's may send them."""
        if value is None or shape is None:
            return value
        kind = shape.type_name
        if kind == "structure":
            if shape.is_document_type:
                return value
            if not isinstance(value, dict):
                raise self.mismatch(path, shape, value)
            names = {self.input_name(name, member): name for name, member in shape.members.items()}
            out: dict[str, Any] = {}
            for key, item in value.items():
                if item is None or not isinstance(key, str):  # null is absent (Smithy's JSON rules)
                    continue
                name = names.get(key)
                if name is None:
                    out[key] = item
                    continue
                read = self.read(item, shape.members[name], f"{path}.{name}" if path else name)
                if read is not None:
                    out[name] = read
            return out
        if kind == "list":
            if not isinstance(value, list):
                raise self.mismatch(path, shape, value)
            return [self.read(item, shape.member, f"{path}[{i}]") for i, item in enumerate(value)]
        if kind == "map":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise self.mismatch(path, shape, value)
            return {k: self.read(v, shape.value, f"{path}.{k}") for k, v in value.items()}
        return self.read_scalar(value, shape, path)

    def read_scalar(self, value: Any, shape: Shape, path: str) -> Any:
        kind = shape.type_name
        if kind in ("string", "character"):
            if isinstance(value, str):
                return value
        elif kind in ("integer", "long", "short", "byte"):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif kind in ("float", "double"):
            return self.read_float(value, shape, path)
        elif kind == "boolean":
            if isinstance(value, bool):
                return value
        elif kind == "timestamp":
            return self.read_timestamp(value, shape, path)
        elif kind == "blob":
            return self.read_blob(value, shape, path)
        else:
            return value
        raise self.mismatch(path, shape, value)

    def read_float(self, value: Any, shape: Shape, path: str) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[value]
        raise self.mismatch(path, shape, value)

    def read_timestamp(self, value: Any, shape: Shape, path: str) -> datetime:
        # Epoch seconds, or text in the member's timestampFormat; any readable time is taken.
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return to_datetime(value)
            except ValueError as err:
                raise WireError("SerializationException", f"{path or shape.name}: {err}") from None
        raise self.mismatch(path, shape, value)

    def read_blob(self, value: Any, shape: Shape, path: str) -> bytes:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise WireError("SerializationException", f"{path or shape.name}: a blob is base64 text, "
                                f"and {value[:40]!r} is not") from None
        raise self.mismatch(path, shape, value)

    def mismatch(self, path: str, shape: Shape, value: Any) -> WireError:
        return WireError("SerializationException", f"{path or shape.name}: expected {self.expected(shape)} "
                         f"({shape.type_name} {shape.name}), got a {_kind(value)}")

    def expected(self, shape: Shape) -> str:
        """What the protocol writes a shape's values as, in words."""
        return {"structure": "an object", "map": "an object", "list": "an array", "string": "a string",
                "boolean": "a boolean", "timestamp": "epoch seconds", "blob": "base64 text"}.get(
            shape.type_name, "a number")

    @staticmethod
    def input_name(name: str, member: Shape) -> str:
        """A member's name in a request: botocore's serializers write its `locationName` if any."""
        return str(member.serialization.get("name", name))

    @staticmethod
    def output_name(name: str, member: Shape) -> str:
        """A member's name in an answer (botocore's `BaseJSONParser._handle_structure` reads the
        `locationName` if any)."""
        return str(member.serialization.get("name", name))

    def _members(self, shape: Shape) -> dict[str, tuple[str, Shape, bool]]:
        """A structure's members as `write` needs them: name -> (its name in the answer, its shape,
        whether a plain value is written as it is). Worked out once per shape and protocol: a
        GetLogEvents of 200 events asked for each event's three names and types again, 600 times a
        call. Kept beside the shape itself, so its id is never another shape's (botocore keeps a
        model's shapes for as long as the model, which the endpoint keeps for the process)."""
        kept = _MEMBERS.get((type(self), id(shape)))
        if kept is None:
            plan = {key: (self.output_name(key, member), member, member.type_name not in CONVERTED)
                    for key, member in shape.members.items()}
            kept = _MEMBERS[(type(self), id(shape))] = (shape, plan)
        return kept[1]

    def _plain(self, shape: Shape) -> frozenset[str]:
        """The members of a structure that `write` keeps as they are when their value is text, an integer
        or a boolean: not converted (`CONVERTED`), and under the same name in the answer."""
        kept = _PLAIN.get((type(self), id(shape)))
        if kept is None:
            plain = frozenset(key for key, (name, _, as_is) in self._members(shape).items() if as_is and name == key)
            kept = _PLAIN[(type(self), id(shape))] = (shape, plain)
        return kept[1]

    def write(self, value: Any, shape: Shape | None) -> Any:
        """An answer's value as the protocol writes `shape`; None members are left out, members the
        model does not name written by their Python type (`write_unmodelled`)."""
        if value is None:
            return None
        # Text, integers and booleans are written as they are unless the shape converts them (the
        # walk below ends in `write_unmodelled`, which returns them unchanged): most of an answer's
        # leaves, so this saves most of the walk's time (docs/benchmarks.md, the AWS endpoint).
        if type(value) in AS_IS and (shape is None or shape.type_name not in CONVERTED):
            return value
        if shape is None:
            return self.write_unmodelled(value)
        kind = shape.type_name
        if kind == "structure":
            if shape.is_document_type or not (type(value) is dict or isinstance(value, Mapping)):
                return self.write_unmodelled(value)
            members = self._members(shape)
            out: dict[str, Any] = {}
            for key, item in value.items():
                if item is None:
                    continue
                planned = members.get(key)
                if planned is None:
                    out[str(key)] = self.write_unmodelled(item)
                elif planned[2] and type(item) in AS_IS:  # `write`'s first case, inline
                    out[planned[0]] = item
                else:
                    out[planned[0]] = self.write(item, planned[1])
            return out
        if kind == "list" and isinstance(value, (list, tuple, set, frozenset)):
            member = shape.member
            if member.type_name != "structure" or member.is_document_type:
                return [self.write(item, member) for item in value]
            # A structure whose values are all text, integers or booleans under names the answer keeps
            # is written as it is: what `write` would build is an equal dict. The items of a long list
            # (GetLogEvents' events) mostly are, and this skips a call per item and per member.
            plain = self._plain(member)
            return [item if type(item) is dict and item.keys() <= plain
                    and AS_IS.issuperset(map(type, item.values()))
                    else self.write(item, member) for item in value]
        if kind == "map" and isinstance(value, Mapping):
            return {str(k): self.write(v, shape.value) for k, v in value.items()}
        if kind == "timestamp":
            try:
                stamp = to_datetime(value)
            except ValueError as err:
                raise ValueError(f"the answer's {shape.name}: {err}") from None
            return self.write_timestamp(stamp, shape)
        if kind == "blob":
            return self.write_blob(value.encode() if isinstance(value, str) else bytes(value))
        if kind in ("float", "double") and isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            return self.write_float(float(value))
        if kind in ("integer", "long") and isinstance(value, (float, Decimal)) and _is_whole(value):
            return int(value)
        return self.write_unmodelled(value)

    def write_timestamp(self, stamp: datetime, shape: Shape) -> Any:
        return format_timestamp(stamp, shape.serialization.get("timestampFormat", "unixtimestamp"))

    def write_blob(self, data: bytes) -> Any:
        return base64.b64encode(data).decode()

    def write_float(self, number: float) -> Any:
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number

    def write_unmodelled(self, value: Any) -> Any:
        """A value no shape describes (the emulator's own additions, such as per-host details in
        DescribeTrainingJob), as JSON would naturally hold it: datetimes as epoch seconds, bytes as
        base64, enums by their value."""
        kind = type(value)
        if kind in AS_IS:
            return value
        # The common containers by their exact type: no ABC check. One of text keys and plain values
        # only (most of the emulator's additions) is written as it is: no call per item.
        if kind is dict:
            if TEXT.issuperset(map(type, value)) and AS_IS.issuperset(map(type, value.values())):
                return value
            return {str(k): self.write_unmodelled(v) for k, v in value.items() if v is not None}
        if kind is list:
            if AS_IS.issuperset(map(type, value)):
                return value
            return [self.write_unmodelled(v) for v in value]
        if isinstance(value, enum.Enum):
            return self.write_unmodelled(value.value)
        if isinstance(value, (datetime, date)):
            return format_timestamp(to_datetime(value), "unixtimestamp")
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self.write_blob(bytes(value))
        if isinstance(value, float):
            return self.write_float(value)
        if isinstance(value, Decimal):
            return int(value) if _is_whole(value) else self.write_float(float(value))
        if isinstance(value, Mapping):
            return {str(k): self.write_unmodelled(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [self.write_unmodelled(v) for v in value]
        return value


JSON_VALUES = Values()

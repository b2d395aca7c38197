"""The query protocol on the server's side: STS, IAM, and the oldest of CloudWatch's protocols. A
request is a form of `Action`, `Version` and the parameters flattened to dotted names, in the body
of a POST (application/x-www-form-urlencoded) or the query string of a GET; the answer is XML
(https://smithy.io/2.0/aws/protocols/aws-query-protocol.html).

What botocore's `QuerySerializer` writes: a nested structure's member is `Outer.Inner`, a list
`Name.member.N` (N from 1; the member's `locationName` instead of `member` if it has one; `Name.N`
when the model says flattened; `Name=` alone for an empty list), a map `Name.entry.N.key` and
`Name.entry.N.value` (their `locationName`s if any; no `entry` when flattened), a boolean
`true`/`false`, a timestamp ISO 8601, a blob base64. What its `QueryParser` reads back:
`<OpResponse xmlns=...><OpResult>...</OpResult><ResponseMetadata><RequestId>` (the result element
is the output shape's `resultWrapper`), lists as `<Name><member>...</member></Name>` (flattened:
the items' elements side by side), maps as `<entry><key/><value/></entry>`. An error is
`<ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>`, its code the
one the model gives the exception (`NoSuchEntity` for `NoSuchEntityException`), which botocore's
client maps to its exception class.

The API, as in `json_rpc` and `rpc_cbor`, except that the operation's name and its parameters both
come from the form, which `read_form` reads once:

- `read_form(request) -> list[tuple[str, str]]`: the form's pairs (the query string's, then a POST
  body's); a `WireError` (MalformedQueryString) for a body that is not UTF-8.
- `operation_name(form, service_model=None) -> str`: the `Action`; a `WireError` MissingAction
  without one, InvalidAction when `service_model` is given and has no such operation.
- `parse_request(operation_model, form) -> dict`: the operation's parameters, typed by the model; a
  `WireError` (ValidationError) for a value that is not of its member's type.
- `serialize_response(operation_model, output) -> HttpResponse`,
- `serialize_error(service_model, code, message, status) -> HttpResponse`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import math
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl

from botocore.model import OperationModel, ServiceModel, Shape

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes
from emulator.aws.wire.json_rpc import (
    error_shape,
    fault,
    format_timestamp,
    request_id,
    to_datetime,
    without_metadata,
)

FORM = "application/x-www-form-urlencoded"
INTEGER = re.compile(r"^[+-]?\d+$")
# What XML 1.0 cannot hold, even escaped (its `Char` production): such characters become U+FFFD,
# or botocore's parser (expat) would refuse the whole answer.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


# --------------------------------------------------------------------------------------------------
# Requests


def read_form(request: HttpRequest) -> list[tuple[str, str]]:
    """The request's parameters in order: the query string's, then those of a POST's form body (a
    POST without a Content-Type is read as a form too, as AWS does)."""
    pairs = list(request.query)
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if request.method.upper() == "POST" and kind in ("", FORM):
        raw = body_bytes(request)
        try:
            pairs += parse_qsl(raw.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise WireError("MalformedQueryString", "The form is not UTF-8 (percent-encoded or not)") from None
    return pairs


def operation_name(form: Mapping[str, str] | Iterable[tuple[str, str]],
                   service_model: ServiceModel | None = None) -> str:
    """The form's `Action`; with `service_model`, one of its operations."""
    pairs = form.items() if isinstance(form, Mapping) else form
    action = ""
    for key, value in pairs:
        if key == "Action":
            action = value
    if not action:
        raise WireError("MissingAction", "The request must contain the parameter Action")
    if service_model is not None and action not in service_model.operation_names:
        raise WireError("InvalidAction", f"The action {action} is not valid for this web service "
                        f"({service_model.service_name}).")
    return action


class _Node:
    """One dotted name's place in the form: `A.member.1.B=v` is A > member > 1 > B with text v."""

    __slots__ = ("children", "text")

    def __init__(self) -> None:
        self.text: str | None = None
        self.children: dict[str, _Node] = {}

    def add(self, parts: list[str], value: str) -> None:
        node = self
        for part in parts:
            node = node.children.setdefault(part, _Node())
        node.text = value


def parse_request(operation_model: OperationModel, form: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The parameters of a form; names the model does not know are left out (the form cannot say
    what their values are), as are `Action` and `Version` unless the input has such members."""
    shape = operation_model.input_shape
    if shape is None:
        return {}
    root = _Node()
    for key, value in form:
        if key in ("Action", "Version") and key not in shape.members:
            continue
        root.add(key.split("."), value)
    try:
        params: dict[str, Any] = _read_structure(root, shape, "")
    except RecursionError:  # a recursive shape, named with more dots than Python recurses
        raise WireError("ValidationError", "The form's names nest too deep") from None
    return params


def _member_key(name: str, member: Shape) -> str:
    """A member's name in the form and in the XML: botocore names a flattened list by its items'
    `locationName` (QuerySerializer._serialize_type_list, XML parser `_member_key_name`)."""
    if member.type_name == "list" and member.serialization.get("flattened"):
        item_name = member.member.serialization.get("name")
        if item_name:
            return str(item_name)
    return str(member.serialization.get("name", name))


def _read(node: _Node, shape: Shape, path: str) -> Any:
    kind = shape.type_name
    if kind == "structure":
        return _read_structure(node, shape, path)
    if kind == "list":
        return _read_list(node, shape, path)
    if kind == "map":
        return _read_map(node, shape, path)
    if node.text is None:
        some = next(iter(node.children))
        raise WireError("ValidationError", f"{path} is a {kind}, not a structure, list or map ({path}.{some}=...)")
    return _read_scalar(node.text, shape, path)


def _read_structure(node: _Node, shape: Shape, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, member in shape.members.items():
        child = node.children.get(_member_key(name, member))
        if child is not None:
            out[name] = _read(child, member, f"{path}.{name}" if path else name)
    return out


def _items(node: _Node) -> list[_Node]:
    """The numbered children of a list or map, in their numbers' order (N counts from 1; gaps and
    other names are not the client's to make, and are passed over)."""
    numbered = sorted((int(k), child) for k, child in node.children.items() if k.isdigit())
    return [child for _, child in numbered]


def _read_list(node: _Node, shape: Shape, path: str) -> list[Any]:
    member = shape.member
    if shape.serialization.get("flattened"):
        holder: _Node | None = node
    else:
        holder = node.children.get(str(member.serialization.get("name", "member")))
    if holder is None:  # `Name=` is the empty list
        return []
    return [_read(item, member, f"{path}[{i}]") for i, item in enumerate(_items(holder))]


def _read_map(node: _Node, shape: Shape, path: str) -> dict[str, Any]:
    holder = node if shape.serialization.get("flattened") else node.children.get("entry")
    if holder is None:
        return {}
    key_name = str(shape.key.serialization.get("name", "key"))
    value_name = str(shape.value.serialization.get("name", "value"))
    out: dict[str, Any] = {}
    for i, entry in enumerate(_items(holder), 1):
        key, value = entry.children.get(key_name), entry.children.get(value_name)
        if key is None or value is None:
            raise WireError("ValidationError", f"{path}: entry {i} needs both .{key_name} and .{value_name}")
        name = _read(key, shape.key, f"{path}.{key_name}")
        out[name] = _read(value, shape.value, f"{path}.{name}")
    return out


def _read_scalar(text: str, shape: Shape, path: str) -> Any:
    kind = shape.type_name
    if kind in ("integer", "long", "short", "byte"):
        if INTEGER.match(text):
            return int(text)
    elif kind in ("float", "double"):
        try:
            return float(text)  # "NaN", "Infinity", "-Infinity" too, as botocore writes them
        except ValueError:
            pass
    elif kind == "boolean":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    elif kind == "timestamp":
        try:
            return to_datetime(text)
        except ValueError:
            pass
    elif kind == "blob":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    else:
        return text
    raise WireError("ValidationError", f"Value {text[:60]!r} at '{path}' is not a valid {kind}")


# --------------------------------------------------------------------------------------------------
# Answers


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    """`<OpResponse xmlns=...><OpResult>...</OpResult><ResponseMetadata>...` as botocore's
    `QueryParser._parse_body_as_xml` reads it."""
    name = operation_model.name
    shape = operation_model.output_shape
    answer = without_metadata(output)
    namespace = _namespace(operation_model.service_model)
    out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<{name}Response xmlns="{namespace}">']
    if shape is None:
        if answer:  # no result in the model, but the emulator's own additions: kept, in the usual place
            out.append(f"<{name}Result>")
            _write_unmodelled_members(answer, out)
            out.append(f"</{name}Result>")
    else:
        wrapper = shape.serialization.get("resultWrapper")
        out.append(f"<{wrapper}>" if wrapper else "")
        _write_members(answer, shape, out)
        out.append(f"</{wrapper}>" if wrapper else "")
    rid = request_id()
    out.append(f"<ResponseMetadata><RequestId>{rid}</RequestId></ResponseMetadata></{name}Response>")
    return HttpResponse(200, {"content-type": "text/xml", "x-amzn-requestid": rid}, "".join(out).encode())


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    """`<ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>`, the
    code the model's (`Shape.error_code`) when `code` names a modelled exception by its shape name."""
    shape = error_shape(service_model, code)
    wire_code = shape.error_code if shape is not None else code
    rid = request_id()
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse xmlns="{_namespace(service_model)}">'
            f"<Error><Type>{fault(shape, status)}</Type><Code>{_escape(wire_code)}</Code>"
            f"<Message>{_escape(message)}</Message></Error><RequestId>{rid}</RequestId></ErrorResponse>")
    return HttpResponse(status, {"content-type": "text/xml", "x-amzn-requestid": rid}, body.encode())


def _namespace(service_model: ServiceModel) -> str:
    return _escape(str(service_model.metadata.get("xmlNamespace") or
                       f"https://{service_model.endpoint_prefix}.amazonaws.com/doc/{service_model.api_version}/"))


def _escape(text: str) -> str:
    # \r is escaped, or the client's XML parser would read it as \n (XML 1.0 §2.11).
    return (NOT_XML.sub("\ufffd", text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", "&#13;"))


def _write_members(value: Any, shape: Shape, out: list[str]) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"the answer's {shape.name} is a structure, not a {type(value).__name__}")
    members = shape.members
    for key, item in value.items():
        if item is None:
            continue
        member = members.get(key)
        if member is None:
            _write_unmodelled(str(key), item, out)
        else:
            _write(_member_key(key, member), item, member, out)


def _write(tag: str, value: Any, shape: Shape, out: list[str]) -> None:
    kind = shape.type_name
    if kind == "structure":
        out.append(f"<{tag}>")
        _write_members(value, shape, out)
        out.append(f"</{tag}>")
    elif kind == "list":
        member = shape.member
        items = [v for v in value if v is not None]  # XML has no null item
        if shape.serialization.get("flattened"):
            for item in items:
                _write(tag, item, member, out)
            return
        item_tag = str(member.serialization.get("name", "member"))
        out.append(f"<{tag}>")
        for item in items:
            _write(item_tag, item, member, out)
        out.append(f"</{tag}>")
    elif kind == "map":
        key_tag = str(shape.key.serialization.get("name", "key"))
        value_tag = str(shape.value.serialization.get("name", "value"))
        flattened = shape.serialization.get("flattened")
        if not flattened:
            out.append(f"<{tag}>")
        for key, item in value.items():
            if item is None:
                continue
            out.append(f"<{tag}>" if flattened else "<entry>")
            _write(key_tag, key, shape.key, out)
            _write(value_tag, item, shape.value, out)
            out.append(f"</{tag}>" if flattened else "</entry>")
        if not flattened:
            out.append(f"</{tag}>")
    else:
        out.append(f"<{tag}>{_escape(_text(value, shape))}</{tag}>")


def _text(value: Any, shape: Shape) -> str:
    kind = shape.type_name
    if isinstance(value, enum.Enum):
        value = value.value
    if kind == "timestamp":
        try:
            stamp = to_datetime(value)
        except ValueError as err:
            raise ValueError(f"the answer's {shape.name}: {err}") from None
        return str(format_timestamp(stamp, shape.serialization.get("timestampFormat", "iso8601")))
    if kind == "boolean":
        if isinstance(value, str):
            return value.lower()
        return "true" if value else "false"
    if kind in ("float", "double") and isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return _float_text(float(value))
    if kind in ("integer", "long") and isinstance(value, (float, Decimal)) and math.isfinite(value):
        return str(int(value))
    if kind == "blob":
        data = value.encode() if isinstance(value, str) else bytes(value)
        return base64.b64encode(data).decode()
    return str(value)


def _float_text(number: float) -> str:
    # What botocore's QuerySerializer writes and float() reads back: NaN and ±Infinity by name.
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _write_unmodelled(tag: str, value: Any, out: list[str]) -> None:
    """A member no shape describes (the emulator's own), written as XML naturally holds it: text,
    nested elements for a mapping, `<member>` items for a list. A name XML cannot hold is left out."""
    if value is None or not XML_NAME.match(tag):
        return
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Mapping):
        out.append(f"<{tag}>")
        _write_unmodelled_members(value, out)
        out.append(f"</{tag}>")
    elif isinstance(value, (list, tuple, set, frozenset)):
        out.append(f"<{tag}>")
        for item in value:
            _write_unmodelled("member", item, out)
        out.append(f"</{tag}>")
    else:
        out.append(f"<{tag}>{_escape(_unmodelled_text(value))}</{tag}>")


def _write_unmodelled_members(value: Mapping[Any, Any], out: list[str]) -> None:
    for key, item in value.items():
        _write_unmodelled(str(key), item, out)


def _unmodelled_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime, date)):
        return str(format_timestamp(to_datetime(value), "iso8601"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, float):
        return _float_text(value)
    return str(value)

"""The query protocol on the server's side (STS, IAM, and CloudWatch's oldest protocol): a form of
`Action`, `Version` and the parameters flattened to dotted names (`ActionNames.member.1`,
`Dimensions.member.1.Name`, `Attributes.entry.1.key`), answered in XML.

What botocore's `QuerySerializer` writes and its `QueryParser` reads
(https://smithy.io/2.0/aws/protocols/aws-query-protocol.html): a list is `Name.member.N` (or `Name.N`
when the model says flattened), a map `Name.entry.N.key`/`.value`, a timestamp ISO 8601. The answer is
`<OperationResponse><OperationResult>...</OperationResult><ResponseMetadata>...` (the result wrapper
the output shape names), an error `<ErrorResponse><Error><Type/><Code/><Message/></Error>`.

The same four functions as the other codecs (`operation_name`, `parse_request`,
`serialize_response`, `serialize_error`), and `read_form`, since the form is both where the
operation's name and its parameters are.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from botocore.model import OperationModel, ServiceModel, Shape

from emulator.aws.wire import HttpRequest, HttpResponse, WireError, body_bytes
from emulator.aws.wire.json_rpc import read_timestamp

INDEX = re.compile(r"\d+")


def read_form(request: HttpRequest) -> list[tuple[str, str]]:
    """The request's parameters: the query string's, and a form body's."""
    pairs = list(request.query)
    if request.method == "POST" and request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        try:
            pairs += parse_qsl(body_bytes(request).decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            raise WireError("MalformedQueryString", "the form is not UTF-8") from None
    return pairs


def operation_name(form: Mapping[str, str]) -> str:
    action = form.get("Action", "")
    if not action:
        raise WireError("MissingAction", "the request names no Action")
    return action


def parse_request(operation_model: OperationModel, form: list[tuple[str, str]]) -> dict[str, Any]:
    values = {k: v for k, v in form if k not in ("Action", "Version")}
    shape = operation_model.input_shape
    if shape is None:
        return {}
    params: dict[str, Any] = _read_structure(values, "", shape)
    return params


def _read(values: Mapping[str, str], name: str, shape: Shape) -> Any:
    kind = shape.type_name
    if kind == "structure":
        found = _read_structure(values, name + ".", shape)
        return found or None
    if kind == "list":
        flattened = shape.serialization.get("flattened")
        member = shape.member
        base = name + "." if flattened else name + ".member."
        indexes = sorted({int(m.group()) for key in values if key.startswith(base)
                          for m in [INDEX.match(key[len(base):])] if m})
        if not indexes:
            return [] if values.get(name) == "" else None
        return [_read(values, f"{base}{i}", member) for i in indexes]
    if kind == "map":
        base = name + ".entry."
        indexes = sorted({int(m.group()) for key in values if key.startswith(base)
                          for m in [INDEX.match(key[len(base):])] if m})
        if not indexes:
            return None
        return {values.get(f"{base}{i}.key", ""): _read(values, f"{base}{i}.value", shape.value)
                for i in indexes}
    if name not in values:
        return None
    text = values[name]
    try:
        if kind in ("integer", "long"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
        if kind == "boolean":
            return text.lower() == "true"
        if kind == "timestamp":
            return read_timestamp(text)
        if kind == "blob":
            return base64.b64decode(text)
    except ValueError:
        raise WireError("InvalidParameterValue", f"{name}: {text!r} is not a {kind}") from None
    return text


def _read_structure(values: Mapping[str, str], prefix: str, shape: Shape) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for member, member_shape in shape.members.items():
        name = member_shape.serialization.get("name", member)
        value = _read(values, prefix + name, member_shape)
        if value is not None:
            out[member] = value
    return out


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    name = operation_model.name
    namespace = _namespace(operation_model.service_model)
    shape = operation_model.output_shape
    inner = "" if shape is None else _write_members(dict(output), shape)
    wrapper = shape.serialization.get("resultWrapper") if shape is not None else None
    result = f"<{wrapper}>{inner}</{wrapper}>" if wrapper else inner
    body = (f'<{name}Response xmlns="{namespace}">{result}'
            f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata></{name}Response>")
    return HttpResponse(200, {"content-type": "text/xml"}, body.encode())


def _write_members(value: Mapping[str, Any], shape: Shape) -> str:
    parts = []
    for member, member_shape in shape.members.items():
        if member in value and value[member] is not None:
            tag = member_shape.serialization.get("name", member)
            parts.append(_write(tag, value[member], member_shape))
    return "".join(parts)


def _write(tag: str, value: Any, shape: Shape) -> str:
    kind = shape.type_name
    if kind == "structure":
        return f"<{tag}>{_write_members(value, shape)}</{tag}>"
    if kind == "list":
        member = shape.member
        if shape.serialization.get("flattened"):
            return "".join(_write(tag, v, member) for v in value)
        inner_tag = member.serialization.get("name", "member")
        return f"<{tag}>" + "".join(_write(inner_tag, v, member) for v in value) + f"</{tag}>"
    if kind == "map":
        entries = "".join(f"<entry>{_write('key', k, shape.key)}{_write('value', v, shape.value)}</entry>"
                          for k, v in value.items())
        return f"<{tag}>{entries}</{tag}>"
    return f"<{tag}>{escape(_scalar(value, kind))}</{tag}>"


def _scalar(value: Any, kind: str) -> str:
    if kind == "timestamp":
        stamp = read_timestamp(value) if not isinstance(value, datetime) else value
        stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
        return str(stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "blob":
        return base64.b64encode(value if isinstance(value, bytes) else str(value).encode()).decode()
    return str(value)


def serialize_error(service_model: ServiceModel, code: str, message: str, status: int) -> HttpResponse:
    kind = "Sender" if status < 500 else "Receiver"
    body = (f'<ErrorResponse xmlns="{_namespace(service_model)}"><Error><Type>{kind}</Type><Code>{escape(code)}</Code>'
            f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>")
    return HttpResponse(status, {"content-type": "text/xml"}, body.encode())


def _namespace(service_model: ServiceModel) -> str:
    return str(service_model.metadata.get("xmlNamespace") or
               f"https://{service_model.endpoint_prefix}.amazonaws.com/doc/{service_model.api_version}/")

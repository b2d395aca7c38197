"""The server side of botocore's `rest-xml` protocol for S3: which operation an HTTP request is, its
parameters as the caller gave them to boto3, and an operation's answer (or error) back on the wire.

Everything follows the botocore service model rather than a list of S3 operations: a request is
routed by the operation's `http.method` and `http.requestUri` template (`/{Bucket}/{Key+}?uploads`),
the querystring members and headers its input shape requires (`uploadId`, `x-amz-copy-source`);
members are read from and written to where their `location` puts them (uri, querystring, header,
the `x-amz-meta-` header map, statusCode) and the rest from/to the XML payload with the model's
element names (`locationName`, `flattened`, `xmlAttribute`, `xmlNamespace`).

What the model cannot say and S3 does on the wire is written here with the S3 API Reference as the
source: the two addressing styles, the root element names of answers without a payload member
(`ListBucketResult`), GetBucketLocation's bare `<LocationConstraint>`, 206/204 statuses, RFC 2047
for non-ASCII metadata, and the `<Error>` document.

Functions are parallel to the other codecs of `emulator.aws.wire`: `operation_name`,
`parse_request`, `serialize_response`, `serialize_error`, plus `address` for S3's bucket and key.
"""

from __future__ import annotations

import base64
import binascii
import email.header
import json
import math
import re
import secrets
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, unquote
from xml.etree import ElementTree

from botocore.model import OperationModel, ServiceModel, Shape
from botocore.utils import parse_timestamp

from emulator.aws.wire import HttpRequest, HttpResponse, WireError

S3_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
CHUNK = 64 * 1024  # a streamed body's piece
XML_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'
XML_CONTENT_TYPE = "application/xml"
# Host names that, after a bucket label, address this server in virtual-host style: botocore with
# `s3={"addressing_style": "virtual"}` and `endpoint_url="http://localhost:4590"` sends
# `Host: bucket.localhost:4590` (botocore.utils.switch_to_virtual_host_style prepends the bucket).
DEFAULT_HOSTS: tuple[str, ...] = ("localhost",)
# Element names of answers that have no payload member. botocore's service model does not keep the
# Smithy @xmlName of output shapes (and botocore's parser ignores the root's name), but other SDKs
# read these documents by their element path; names from the S3 API Reference's response syntax.
ROOT_ELEMENTS = {
    "CompleteMultipartUpload": "CompleteMultipartUploadResult",
    "CreateMultipartUpload": "InitiateMultipartUploadResult",
    "CreateSession": "CreateSessionResult",
    "DeleteObjects": "DeleteResult",
    "GetBucketAccelerateConfiguration": "AccelerateConfiguration",
    "GetBucketAcl": "AccessControlPolicy",
    "GetBucketCors": "CORSConfiguration",
    "GetBucketLifecycle": "LifecycleConfiguration",
    "GetBucketLifecycleConfiguration": "LifecycleConfiguration",
    "GetBucketLocation": "LocationConstraint",
    "GetBucketLogging": "BucketLoggingStatus",
    "GetBucketNotification": "NotificationConfiguration",
    "GetBucketNotificationConfiguration": "NotificationConfiguration",
    "GetBucketRequestPayment": "RequestPaymentConfiguration",
    "GetBucketTagging": "Tagging",
    "GetBucketVersioning": "VersioningConfiguration",
    "GetBucketWebsite": "WebsiteConfiguration",
    "GetObjectAcl": "AccessControlPolicy",
    "GetObjectAttributes": "GetObjectAttributesResponse",
    "GetObjectTagging": "Tagging",
    "ListBucketAnalyticsConfigurations": "ListBucketAnalyticsConfigurationResult",
    "ListBucketIntelligentTieringConfigurations": "ListBucketIntelligentTieringConfigurationsOutput",
    "ListBucketInventoryConfigurations": "ListInventoryConfigurationsResult",
    "ListBucketMetricsConfigurations": "ListMetricsConfigurationsResult",
    "ListBuckets": "ListAllMyBucketsResult",
    "ListDirectoryBuckets": "ListAllMyDirectoryBucketsResult",
    "ListMultipartUploads": "ListMultipartUploadsResult",
    "ListObjectVersions": "ListVersionsResult",
    "ListObjects": "ListBucketResult",
    "ListObjectsV2": "ListBucketResult",
    "ListParts": "ListPartsResult",
}
# GetBucketLocation's answer is the value as the root's text, `<LocationConstraint>eu-west-1</...>`,
# which the model cannot describe (botocore reads it in handlers.parse_get_bucket_location).
BARE_VALUE = frozenset({"GetBucketLocation"})
_LABEL = re.compile(r"\{([^}]+)\}")
_ENCODED_WORD = re.compile(r"=\?[^?]+\?[bBqQ]\?[^?]*\?=")
_LOCATED = frozenset({"uri", "querystring", "header", "headers", "statusCode"})


# ------------------------------------------------------------------------------------------------
# addressing


def address(request: HttpRequest, region_suffixes: Iterable[str] = DEFAULT_HOSTS) -> tuple[str | None, str | None]:
    """(bucket, key) a request names, each None when absent; the key percent-decoded.

    Virtual-host style when the Host's first label(s) precede a host this server answers to:
    one of `region_suffixes` (host names such as the server's own, `localhost` by default) or an
    S3-style endpoint (`bucket.s3.amazonaws.com`, `bucket.s3.us-west-2.amazonaws.com`,
    `bucket.s3-us-west-2.amazonaws.com`, `bucket.s3.localhost.localstack.cloud`); the path is then
    all key. Otherwise path style: `/bucket/key`."""
    bucket = virtual_bucket(request, region_suffixes)
    path = request.path or "/"
    if bucket is None:
        first, _, rest = path[1:].partition("/") if path.startswith("/") else path.partition("/")
        return (_decoded(first) or None), (_decoded(rest) or None)
    rest = path[1:] if path.startswith("/") else path
    return bucket, (_decoded(rest) or None)


def virtual_bucket(request: HttpRequest, region_suffixes: Iterable[str] = DEFAULT_HOSTS) -> str | None:
    """The bucket the Host header names in virtual-host style, or None (path style)."""
    host = _host(request)
    if not host or _is_ip(host):
        return None
    for suffix in region_suffixes:
        known = suffix.lower().rstrip(".")
        if known and host.endswith("." + known) and len(host) > len(known) + 1:
            return host[:-len(known) - 1]
    labels = host.split(".")
    # The S3 endpoint label: `s3`, `s3-<region>`, `s3-accelerate`, `s3express-<zone>` (directory
    # buckets); `s3express-control` serves bucket-less calls only. The last such label, since a
    # bucket's name may itself have an `s3` label.
    for at in range(len(labels) - 1, 0, -1):
        label = labels[at]
        if label == "s3" or label.startswith("s3-") or (label.startswith("s3express-")
                                                        and label != "s3express-control"):
            return ".".join(labels[:at])
    return None


def _host(request: HttpRequest) -> str:
    host = request.host or request.headers.get("host", "")
    if host.startswith("["):  # an IPv6 literal, `[::1]:4590`
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0].lower().rstrip(".") if host.count(":") <= 1 else host.lower()


def _is_ip(host: str) -> bool:
    return host.startswith("[") or ":" in host or bool(re.fullmatch(r"[\d.]+", host))


def _decoded(text: str) -> str:
    # A path is percent-decoded only: '+' in a path is a plus (botocore encodes a key's '+' as %2B
    # anyway), unlike in a query.
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise WireError("InvalidURI", "Couldn't parse the specified URI: it is not percent-encoded UTF-8") from None


# ------------------------------------------------------------------------------------------------
# routing


@dataclass(frozen=True)
class _Route:
    """What an operation's request must carry, from its model, and what only hints at it."""

    name: str
    method: str
    path: re.Pattern[str]  # against the path-style path (a virtual-host bucket put back in front)
    literal: bool  # a template without labels: `/` (ListBuckets), `/WriteGetObjectResponse`
    # The operation's endpoint has a hostPrefix (`{RequestRoute}.`): the Host's first label is that,
    # not a bucket, so its template is matched on the raw path.
    host_prefixed: bool
    flags: tuple[tuple[str, str | None], ...]  # the requestUri's query literals: `uploads`, `list-type=2`
    required_query: tuple[str, ...]
    required_headers: tuple[str, ...]  # lower-cased
    query_names: frozenset[str]  # every query name the operation knows (flags and members)
    deprecated: bool
    express_control: bool  # served on `s3express-control.<region>` (the model's static context param)

    @property
    def weight(self) -> int:
        return len(self.flags) + len(self.required_query) + len(self.required_headers) + int(self.literal)


_TABLES: weakref.WeakKeyDictionary[ServiceModel, list[_Route]] = weakref.WeakKeyDictionary()


def _routes(service_model: ServiceModel) -> list[_Route]:
    routes = _TABLES.get(service_model)
    if routes is None:
        routes = [_route(service_model.operation_model(name)) for name in service_model.operation_names]
        _TABLES[service_model] = routes
    return routes


def _route(operation: OperationModel) -> _Route:
    template, _, literal_query = operation.http["requestUri"].partition("?")
    flags: list[tuple[str, str | None]] = []
    for part in filter(None, literal_query.split("&")):
        name, equals, value = part.partition("=")
        flags.append((name, value if equals else None))
    required_query: list[str] = []
    required_headers: list[str] = []
    names = {name for name, _ in flags}
    shape = operation.input_shape
    if shape is not None:
        required = set(shape.required_members)
        for member_name, member in shape.members.items():
            location = member.serialization.get("location")
            wire = member.serialization.get("name", member_name)
            if location == "querystring":
                names.add(wire)
                if member_name in required:
                    required_query.append(wire)
            elif location == "header" and member_name in required:
                required_headers.append(wire.lower())
    labels = _LABEL.findall(template)
    express = any(param.name == "UseS3ExpressControlEndpoint" and param.value is True
                  for param in operation.static_context_parameters)
    return _Route(name=operation.name, method=operation.http["method"], path=_template_pattern(template),
                  literal=not labels, host_prefixed=bool((operation.endpoint or {}).get("hostPrefix")),
                  flags=tuple(flags), required_query=tuple(required_query),
                  required_headers=tuple(required_headers), query_names=frozenset(names),
                  deprecated=bool(operation.deprecated), express_control=express)


def _template_pattern(template: str) -> re.Pattern[str]:
    """`/{Bucket}/{Key+}` as a regular expression with a group per label; a bucket-only template
    also takes a trailing '/' (`PUT /bucket/` is CreateBucket)."""
    pattern = ""
    at = 0
    for found in _LABEL.finditer(template):
        pattern += re.escape(template[at:found.start()])
        label = found.group(1)
        greedy = label.endswith("+")
        name = re.sub(r"\W", "_", label.rstrip("+"))
        pattern += f"(?P<{name}>.+)" if greedy else f"(?P<{name}>[^/]+)"
        at = found.end()
    pattern += re.escape(template[at:])
    if template.endswith("}") and not template.endswith("+}"):
        pattern += "/?"
    return re.compile(pattern or "/")


def _path_style(request: HttpRequest, bucket: str | None) -> str:
    path = request.path or "/"
    if bucket is None:
        return path
    return "/" + quote(bucket, safe="") + (path if path.startswith("/") else "/" + path)


def operation_name(service_model: ServiceModel, request: HttpRequest, *,
                   region_suffixes: Iterable[str] = DEFAULT_HOSTS) -> str:
    """The S3 operation a request is, by the routing table built from the model.

    A route matches when the method is its own, the path fits its requestUri template, and the query
    has the template's literal flags and the querystring members and headers its input requires
    (`x-amz-copy-source` makes a PUT of an object CopyObject, and with `partNumber&uploadId`
    UploadPartCopy). Of the matching routes the most specific wins: the most requirements met, then
    the fewest query names the operation does not know, then the most optional query members it
    does. Two operations with the very same request (GetBucketLifecycle and
    GetBucketLifecycleConfiguration) go to the one the model does not mark deprecated;
    ListDirectoryBuckets and ListBuckets (`GET /`) to ListBuckets unless the request was sent to an
    `s3express-control` host. An `x-id=<Operation>` query (sent by the Go and JavaScript SDKs v2/v3)
    decides among the matching routes.

    No route: S3's `MethodNotAllowed` (405, "The specified method is not allowed against this
    resource"), or `NotImplemented` (501) for a browser-form POST Object, which S3 has but botocore's
    model does not."""
    bucket = virtual_bucket(request, region_suffixes)
    path = _path_style(request, bucket)
    present: dict[str, str] = {}
    for name, value in request.query:
        present.setdefault(name, value)
    method = request.method.upper()
    host = _host(request)
    candidates: list[tuple[tuple[int, ...], str]] = []
    for route in _routes(service_model):
        if route.method != method:
            continue
        if not route.path.fullmatch(request.path or "/" if route.host_prefixed else path):
            continue
        if any(name not in present or (value is not None and present[name] != value) for name, value in route.flags):
            continue
        if any(name not in present for name in route.required_query):
            continue
        if any(name not in request.headers for name in route.required_headers):
            continue
        unknown = sum(1 for name in present if name not in route.query_names and name != "x-id")
        optional = sum(1 for name in present if name in route.query_names)
        express_fit = route.express_control == host.startswith("s3express-control.")
        candidates.append(((route.weight, -unknown, optional, int(not route.deprecated), int(express_fit)),
                           route.name))
    if not candidates:
        kind = request.headers.get("content-type", "")
        if method == "POST" and kind.startswith("multipart/form-data"):
            raise WireError("NotImplemented", "A header you provided implies functionality that is not implemented: "
                            "POST Object (a browser-form upload) is not answered here; use PutObject", 501)
        raise WireError("MethodNotAllowed", f"The specified method is not allowed against this resource: "
                        f"{method} {request.path or '/'}{_query_text(request.query)} is no S3 operation", 405)
    chosen = present.get("x-id")
    if chosen and any(name == chosen for _, name in candidates):
        return chosen
    return max(candidates, key=lambda item: item[0])[1]


def _query_text(query: Sequence[tuple[str, str]]) -> str:
    if not query:
        return ""
    return "?" + "&".join(name if value == "" else f"{name}={value}" for name, value in query)


# ------------------------------------------------------------------------------------------------
# requests


def parse_request(operation_model: OperationModel, request: HttpRequest, bucket: str | None,
                  key: str | None) -> dict[str, Any]:
    """The operation's parameters as the boto3 caller gave them: uri labels (`Bucket`, `Key`, from
    `address`), querystring members, header members (timestamps as UTC datetimes, integers,
    booleans, header lists), the `x-amz-meta-` map, and the payload: a blob payload (`Body`) is the
    request's body object itself, untouched; a structure payload (`Delete`,
    `CompleteMultipartUpload`, `CreateBucketConfiguration`) is read from its XML."""
    shape = operation_model.input_shape
    params: dict[str, Any] = {}
    if shape is None:
        return params
    # S3's requestUri labels are {Bucket} and {Key+}, which `address` found (it knows the addressing style).
    labels = {name: value for name, value in (("Bucket", bucket), ("Key", key)) if value is not None}
    query: dict[str, list[str]] = {}
    for name, value in request.query:
        query.setdefault(name, []).append(value)
    claimed = {part.partition("=")[0] for part in operation_model.http["requestUri"].partition("?")[2].split("&")}
    for member_name, member in shape.members.items():
        if member.serialization.get("location") == "querystring" and member.type_name != "map":
            claimed.add(member.serialization.get("name", member_name))
    for member_name, member in shape.members.items():
        location = member.serialization.get("location")
        wire = member.serialization.get("name", member_name)
        if location == "uri":
            if wire in labels:
                params[member_name] = _scalar(member, labels[wire], member_name)
        elif location == "querystring":
            value = _query_member(member, wire, query, claimed, member_name)
            if value is not None:
                params[member_name] = value
        elif location == "header":
            text = request.headers.get(wire.lower())
            if text is not None:
                value = _header_member(member, wire, text, request.headers, member_name)
                if value is not None:
                    params[member_name] = value
        elif location == "headers":
            prefix = wire.lower()
            found = {name[len(prefix):]: _unmime(text) for name, text in request.headers.items()
                     if name.startswith(prefix) and len(name) > len(prefix)}
            if found:
                params[member_name] = found
    params.update(_payload(shape, request))
    return params


def _query_member(member: Shape, wire: str, query: Mapping[str, list[str]], claimed: set[str], name: str) -> Any:
    if member.type_name == "map":
        # A querystring map takes every pair no other member or literal of the operation names.
        rest = {k: v for k, v in query.items() if k not in claimed}
        if not rest:
            return None
        if member.value.type_name == "list":
            return {k: [_scalar(member.value.member, item, name) for item in v] for k, v in rest.items()}
        return {k: _scalar(member.value, v[0], name) for k, v in rest.items()}
    values = query.get(wire)
    if not values:
        return None
    if member.type_name == "list":
        return [_scalar(member.member, value, name) for value in values]
    return _scalar(member, values[0], name)


def _header_member(member: Shape, wire: str, text: str, headers: Mapping[str, str], name: str) -> Any:
    lower = wire.lower()
    if lower == "content-encoding":
        # `aws-chunked` is the transfer framing of a streamed, chunk-signed or trailer-checksummed
        # body (S3 "Transferring payload in multiple chunks"), not the object's encoding: S3 drops it.
        kept = [part.strip() for part in text.split(",") if part.strip() and part.strip().lower() != "aws-chunked"]
        return ",".join(kept) or None
    if lower == "content-length" and "x-amz-decoded-content-length" in headers:
        text = headers["x-amz-decoded-content-length"]
    if member.type_name == "list":
        return [_scalar(member.member, item, name) for item in _split_header_list(text)]
    if member.type_name == "timestamp":
        # RFC 9110 13.1.3: a conditional date that is no valid date is ignored, not refused.
        try:
            return _timestamp(text)
        except WireError:
            return None
    if member.type_name == "string" and member.serialization.get("jsonvalue"):
        try:
            return json.loads(base64.b64decode(text))
        except (ValueError, binascii.Error):
            raise WireError("InvalidArgument", f"The header {wire} is not base64-encoded JSON") from None
    return _scalar(member, text, name)


def _split_header_list(text: str) -> list[str]:
    """A comma-separated header list (RFC 9110 5.6.1), with quoted items that may hold commas."""
    items: list[str] = []
    current = ""
    quoted = escaped = False
    for char in text:
        if escaped:
            current += char
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    return [item for item in items if item]


def _unmime(text: str) -> str:
    """A metadata value as the caller gave it: S3 decodes RFC 2047 encoded words in user metadata
    (S3 User Guide, "Working with object metadata")."""
    if not _ENCODED_WORD.search(text):
        return text
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except (ValueError, LookupError, UnicodeDecodeError):
        return text


def _scalar(shape: Shape, text: str, name: str) -> Any:
    kind = shape.type_name
    try:
        if kind in ("integer", "long"):
            return int(text.strip())
        if kind in ("float", "double"):
            return float(text.strip())
        if kind == "boolean":
            return text.strip().lower() == "true"
        if kind == "timestamp":
            return _timestamp(text)
        if kind == "blob":
            return base64.b64decode(text.strip(), validate=True)
    except (ValueError, binascii.Error):
        raise WireError("InvalidArgument", f"{name}: {text!r} is no valid {kind}") from None
    return text


def _timestamp(text: str) -> datetime:
    try:
        stamp: datetime = parse_timestamp(text.strip())
    except (ValueError, TypeError, OverflowError):
        raise WireError("InvalidArgument", f"{text!r} is no date") from None
    return stamp.astimezone(timezone.utc)


def _payload(shape: Shape, request: HttpRequest) -> dict[str, Any]:
    payload = shape.serialization.get("payload")
    body = request.body
    if payload is not None:
        member = shape.members[payload]
        if member.type_name == "blob":
            # The body object itself, never read here: an upload may be gigabytes (a spooled file).
            return {payload: body} if not isinstance(body, (bytes, bytearray)) or body else {}
        text = _body_bytes(body)
        if not text.strip():
            return {}
        if member.type_name == "string":
            return {payload: text.decode("utf-8", "replace")}
        return {payload: _from_xml(member, _xml_root(text))}
    if not any(m.serialization.get("location") not in _LOCATED for m in shape.members.values()):
        return {}
    text = _body_bytes(body)
    if not text.strip():
        return {}
    parsed = _from_xml(shape, _xml_root(text))
    return parsed if isinstance(parsed, dict) else {}


def _body_bytes(body: bytes | Any) -> bytes:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    data = body.read()
    if hasattr(body, "seek"):
        body.seek(0)
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def _xml_root(text: bytes) -> ElementTree.Element:
    # ElementTree does not fetch external entities, and the expat it uses (>= 2.4.1) refuses
    # entity-expansion bombs.
    try:
        return ElementTree.fromstring(text)
    except ElementTree.ParseError as err:
        raise WireError("MalformedXML", "The XML you provided was not well-formed or did not validate against "
                        f"our published schema ({err})") from None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _from_xml(shape: Shape, node: ElementTree.Element) -> Any:
    kind = shape.type_name
    if kind == "structure":
        return _structure_from_xml(shape, node)
    if kind == "list":
        item_name = shape.member.serialization.get("name", "member")
        return [_from_xml(shape.member, child) for child in node if _local(child.tag) == item_name]
    if kind == "map":
        return dict(_entry_from_xml(shape, child) for child in node if _local(child.tag) == "entry")
    return _scalar(shape, node.text or "", _local(node.tag))


def _structure_from_xml(shape: Shape, node: ElementTree.Element) -> dict[str, Any]:
    children: dict[str, list[ElementTree.Element]] = {}
    for child in node:
        children.setdefault(_local(child.tag), []).append(child)
    attributes = {_local(name): value for name, value in node.attrib.items()}
    parsed: dict[str, Any] = {}
    for member_name, member in shape.members.items():
        if member.serialization.get("location") in _LOCATED:
            continue
        wire = member.serialization.get("name", member_name)
        if member.serialization.get("xmlAttribute"):
            value = attributes.get(wire.rsplit(":", 1)[-1])
            if value is not None:
                parsed[member_name] = value
            continue
        if member.type_name in ("list", "map") and member.serialization.get("flattened"):
            names = [wire]
            if member.type_name == "list" and member.member.serialization.get("name"):
                names.insert(0, member.member.serialization["name"])
            elements = next((children[n] for n in names if n in children), [])
            if elements:
                if member.type_name == "list":
                    parsed[member_name] = [_from_xml(member.member, element) for element in elements]
                else:
                    parsed[member_name] = dict(_entry_from_xml(member, element) for element in elements)
            continue
        if wire in children:
            parsed[member_name] = _from_xml(member, children[wire][0])
    return parsed


def _entry_from_xml(shape: Shape, entry: ElementTree.Element) -> tuple[Any, Any]:
    key_name = shape.key.serialization.get("name", "key")
    value_name = shape.value.serialization.get("name", "value")
    key: Any = None
    value: Any = None
    for part in entry:
        if _local(part.tag) == key_name:
            key = _from_xml(shape.key, part)
        elif _local(part.tag) == value_name:
            value = _from_xml(shape.value, part)
    return key, value


# ------------------------------------------------------------------------------------------------
# responses


def serialize_response(operation_model: OperationModel, output: Mapping[str, Any]) -> HttpResponse:
    """An operation's answer on the wire: header members as headers (timestamps RFC 1123,
    `Metadata` as `x-amz-meta-*`), a statusCode member as the status, a streaming payload (`Body`:
    bytes, a file-like object or a botocore StreamingBody) as an iterable of 64 KiB chunks, a
    structure payload or the body members as XML in the S3 namespace. HEAD answers carry headers only.

    The status: `ResponseMetadata.HTTPStatusCode` when the answer has it; else 206 for a ranged
    object (a `ContentRange` member), 204 for DELETE (S3 answers DeleteObject, DeleteBucket,
    AbortMultipartUpload... with 204 No Content), 200 otherwise."""
    shape = operation_model.output_shape
    method = operation_model.http["method"]
    headers = _request_id_headers()
    status = 204 if method == "DELETE" else 200
    body: bytes | Iterable[bytes] = b""
    if shape is not None:
        for member_name, member in shape.members.items():
            value = output.get(member_name)
            if value is None:
                continue
            location = member.serialization.get("location")
            wire = member.serialization.get("name", member_name)
            if location == "header":
                if member.type_name == "list" and not value:
                    continue
                headers[wire.lower()] = _mime(_header_text(member, value))
            elif location == "headers":
                for name, text in value.items():
                    headers[(wire + str(name)).lower()] = _mime(str(text))
            elif location == "statusCode":
                status = int(value)
        if output.get("ContentRange") and "ContentRange" in shape.members:
            status = 206
        body = _response_body(operation_model, shape, output, headers)
    metadata = output.get("ResponseMetadata")
    if isinstance(metadata, Mapping) and metadata.get("HTTPStatusCode"):
        status = int(metadata["HTTPStatusCode"])
    if method == "HEAD" or status in (204, 304):
        _close(body)
        body = b""
        if method != "HEAD":
            headers.pop("content-length", None)
    return HttpResponse(status, headers, body)


def _response_body(operation_model: OperationModel, shape: Shape, output: Mapping[str, Any],
                   headers: dict[str, str]) -> bytes | Iterable[bytes]:
    payload = shape.serialization.get("payload")
    if payload is not None:
        member = shape.members[payload]
        value = output.get(payload)
        if value is None:
            return b""
        if member.serialization.get("eventstream"):
            raise WireError("NotImplemented", f"{operation_model.name}'s event-stream answer is not implemented", 501)
        if member.type_name in ("blob", "string"):
            if isinstance(value, str):
                value = value.encode("utf-8")
            if isinstance(value, (bytes, bytearray, memoryview)):
                data = bytes(value)
                headers.setdefault("content-length", str(len(data)))
                return data
            return _chunks(value)
        root = member.serialization.get("name", payload)
        namespace = member.serialization.get("xmlNamespace") or S3_NAMESPACE
        return _xml_document(headers, _xml_element(root, member, value, namespace))
    body_members = [name for name, member in shape.members.items()
                    if member.serialization.get("location") not in _LOCATED]
    if not body_members:
        return b""
    root = ROOT_ELEMENTS.get(operation_model.name) or shape.serialization.get("name") \
        or re.sub(r"(Output|Response)?$", "Result", shape.name, count=1)
    if operation_model.name in BARE_VALUE and len(body_members) == 1:
        member = shape.members[body_members[0]]
        return _xml_document(headers, _xml_element(root, member, output.get(body_members[0]), S3_NAMESPACE))
    return _xml_document(headers, _xml_element(root, shape, {k: output[k] for k in body_members if k in output},
                                               S3_NAMESPACE))


def _xml_document(headers: dict[str, str], element: str) -> bytes:
    data = (XML_DECLARATION + element).encode("utf-8")
    headers["content-type"] = XML_CONTENT_TYPE
    headers["content-length"] = str(len(data))
    return data


def _chunks(value: Any) -> Iterator[bytes]:
    """A streaming payload in CHUNK-byte pieces, closing its file when done (or when the server
    stops early: a generator's close runs the finally)."""
    read = getattr(value, "read", None)
    if read is None:
        try:
            for piece in value:
                yield piece.encode("utf-8") if isinstance(piece, str) else bytes(piece)
        finally:
            _close(value)
        return
    try:
        while True:
            piece = read(CHUNK)
            if not piece:
                return
            yield piece.encode("utf-8") if isinstance(piece, str) else bytes(piece)
    finally:
        _close(value)


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


def _header_text(shape: Shape, value: Any) -> str:
    kind = shape.type_name
    if kind == "timestamp":
        return _format_time(value, shape.serialization.get("timestampFormat", "rfc822"))
    if kind == "list":
        return ",".join(_header_text(shape.member, item) for item in value)
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "string" and shape.serialization.get("jsonvalue"):
        return base64.b64encode(json.dumps(value, separators=(",", ":")).encode("utf-8")).decode("ascii")
    if kind == "blob":
        return base64.b64encode(value if isinstance(value, bytes) else str(value).encode()).decode("ascii")
    if kind in ("float", "double"):
        return _float_text(value)
    return str(value)


def _mime(text: str) -> str:
    """A header value HTTP/1.1 can carry: S3 answers non-ASCII metadata RFC 2047-encoded. Encoded
    words of at most 45 bytes of text (RFC 2047's 75 characters a word) joined by spaces, never folded
    onto lines as email.header would: a line break in a header value would end the header. A value
    with control characters is encoded the same way, for the same reason."""
    if text.isascii() and text.isprintable():
        return text
    words: list[str] = []
    current = b""
    for char in text:
        encoded = char.encode("utf-8", "surrogatepass")
        if len(current) + len(encoded) > 45:
            words.append(current.decode("utf-8", "surrogatepass"))
            current = b""
        current += encoded
    words.append(current.decode("utf-8", "surrogatepass"))
    return " ".join(f"=?UTF-8?B?{base64.b64encode(w.encode('utf-8', 'surrogatepass')).decode('ascii')}?="
                    for w in words if w)


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc)
    stamp: datetime = parse_timestamp(value)
    return stamp


def _format_time(value: Any, kind: str) -> str:
    stamp = _as_datetime(value).astimezone(timezone.utc)
    if kind == "rfc822":
        return formatdate(stamp.timestamp(), usegmt=True)
    if kind == "unixTimestamp":
        seconds = stamp.timestamp()
        return str(int(seconds)) if seconds.is_integer() else f"{seconds:.3f}"
    # S3 writes milliseconds: `2009-10-12T17:50:30.000Z`.
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _float_text(value: Any) -> str:
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _escape(text: str, *, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")
    if attribute:
        text = text.replace('"', "&quot;").replace("\n", "&#10;").replace("\t", "&#9;")
    else:
        text = text.replace('"', "&quot;")
    return text


def _namespace_attribute(namespace: Any) -> str:
    if isinstance(namespace, Mapping):
        prefix = namespace.get("prefix")
        return f' xmlns{":" + prefix if prefix else ""}="{_escape(namespace.get("uri", ""), attribute=True)}"'
    if isinstance(namespace, str) and namespace:
        return f' xmlns="{_escape(namespace, attribute=True)}"'
    return ""


def _xml_element(name: str, shape: Shape, value: Any, namespace: Any = None) -> str:
    """`value` as the element `name` per `shape`; `namespace` (the root's) or the shape's own
    xmlNamespace as its xmlns attribute."""
    attributes = _namespace_attribute(namespace or shape.serialization.get("xmlNamespace"))
    kind = shape.type_name
    if kind == "structure":
        inner: list[str] = []
        for member_name, member in shape.members.items():
            item = value.get(member_name) if isinstance(value, Mapping) else None
            if item is None or member.serialization.get("location") in _LOCATED:
                continue
            wire = member.serialization.get("name", member_name)
            if member.serialization.get("xmlAttribute"):
                attributes += f' {wire}="{_escape(_text(member, item), attribute=True)}"'
            else:
                inner.append(_member_xml(wire, member, item))
        return f"<{name}{attributes}>{''.join(inner)}</{name}>"
    if kind == "list":
        item_name = shape.member.serialization.get("name", "member")
        items = "".join(_xml_element(item_name, shape.member, item) for item in value)
        return f"<{name}{attributes}>{items}</{name}>"
    if kind == "map":
        entries = "".join(f"<entry>{_entry_xml(shape, key, item)}</entry>" for key, item in value.items())
        return f"<{name}{attributes}>{entries}</{name}>"
    if value is None:
        return f"<{name}{attributes}/>"
    return f"<{name}{attributes}>{_escape(_text(shape, value))}</{name}>"


def _member_xml(wire: str, member: Shape, value: Any) -> str:
    if member.serialization.get("flattened") and member.type_name == "list":
        # botocore's parser finds a flattened list's items by its member's name when it has one.
        item_name = member.member.serialization.get("name", wire)
        return "".join(_xml_element(item_name, member.member, item) for item in value)
    if member.serialization.get("flattened") and member.type_name == "map":
        return "".join(f"<{wire}>{_entry_xml(member, key, item)}</{wire}>" for key, item in value.items())
    return _xml_element(wire, member, value)


def _entry_xml(shape: Shape, key: Any, value: Any) -> str:
    key_name = shape.key.serialization.get("name", "key")
    value_name = shape.value.serialization.get("name", "value")
    return _xml_element(key_name, shape.key, key) + _xml_element(value_name, shape.value, value)


def _text(shape: Shape, value: Any) -> str:
    kind = shape.type_name
    if kind == "timestamp":
        return _format_time(value, shape.serialization.get("timestampFormat", "iso8601"))
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "blob":
        data = value if isinstance(value, (bytes, bytearray)) else str(value).encode("utf-8")
        return base64.b64encode(bytes(data)).decode("ascii")
    if kind in ("float", "double"):
        return _float_text(value)
    return str(value)


# ------------------------------------------------------------------------------------------------
# errors


def serialize_error(code: str, message: str, status: int, resource: str = "", *, method: str = "") -> HttpResponse:
    """S3's error document, `<Error><Code/><Message/><Resource/><RequestId/><HostId/></Error>` (no
    namespace: botocore's RestXMLParser recognises S3's errors by the bare root name `Error`).
    A HEAD answer (`method="HEAD"`) and a 304 carry the status only: S3 sends no body with them,
    and botocore then names the error by the status code ("404", "Not Found")."""
    headers = _request_id_headers()
    if method.upper() == "HEAD" or status == 304:
        return HttpResponse(status, headers, b"")
    fields = [("Code", code), ("Message", message)]
    if resource:
        fields.append(("Resource", resource))
    fields += [("RequestId", headers["x-amz-request-id"]), ("HostId", headers["x-amz-id-2"])]
    inner = "".join(f"<{name}>{_escape(text)}</{name}>" for name, text in fields)
    return HttpResponse(status, headers, _xml_document(headers, f"<Error>{inner}</Error>"))


def _request_id_headers() -> dict[str, str]:
    # Every S3 answer names its request (x-amz-request-id) and host (x-amz-id-2); botocore keeps both
    # in ResponseMetadata.
    return {"x-amz-request-id": uuid.uuid4().hex[:16].upper(),
            "x-amz-id-2": base64.b64encode(secrets.token_bytes(48)).decode("ascii")}

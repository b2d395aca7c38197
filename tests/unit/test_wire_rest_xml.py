"""The rest-xml codec for S3 (`emulator.aws.wire.rest_xml`) against botocore as the oracle: every S3
operation botocore's own serializer writes is routed to that operation (path style and virtual-host
style), parsed back to the parameters the caller gave, and every answer written here is read back
by botocore's own parser (and, end to end, by a real botocore client answered by the local S3)."""

from __future__ import annotations

import datetime as dt
import email.header
import hashlib
import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import botocore.handlers
import botocore.parsers
import botocore.serialize
import botocore.session
import pytest
from botocore.awsrequest import AWSResponse, create_request_object, prepare_request_dict
from botocore.config import Config
from botocore.endpoint import convert_to_response_dict
from botocore.exceptions import ClientError
from botocore.model import OperationModel, Shape
from botocore.response import StreamingBody
from botocore.utils import switch_to_virtual_host_style

from emulator.aws.s3 import S3
from emulator.aws.stub import ApiError
from emulator.aws.wire import HttpRequest, HttpResponse, WireError, rest_xml

MODEL = botocore.session.get_session().get_service_model("s3")
SERIALIZER = botocore.serialize.create_serializer("rest-xml")
ENDPOINT = "http://localhost:4590"
BUCKET = "example-bucket"
WHEN = dt.datetime(2024, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
# The operations emulator/aws/s3.py answers (S3.operations()).
EMULATED = ("ListBuckets", "HeadBucket", "CreateBucket", "GetBucketLocation", "PutObject", "GetObject",
            "HeadObject", "CopyObject", "DeleteObject", "DeleteObjects", "ListObjects", "ListObjectsV2",
            "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload",
            "AbortMultipartUpload")
KEYS = ("plain.txt", "dir/sub/file name.bin", "a+b c/ü€ 漢字.txt", "folder/", "a//b", "/leading",
        "%41 not-an-escape", "~tilde/&amp;=?#[]!$'()*,;@")
# Operations whose requests are byte for byte those of another operation: the same method, path,
# query and required headers. The request goes to the operation the model does not mark deprecated
# (or, for ListDirectoryBuckets, to ListBuckets unless the host is an s3express-control endpoint).
INDISTINGUISHABLE = {
    "GetBucketLifecycle": ("GetBucketLifecycleConfiguration", "GET /{Bucket}?lifecycle; deprecated twin"),
    "PutBucketLifecycle": ("PutBucketLifecycleConfiguration", "PUT /{Bucket}?lifecycle; deprecated twin"),
    "GetBucketNotification": ("GetBucketNotificationConfiguration", "GET /{Bucket}?notification; deprecated twin"),
    "PutBucketNotification": ("PutBucketNotificationConfiguration", "PUT /{Bucket}?notification; deprecated twin"),
    "ListDirectoryBuckets": ("ListBuckets", "GET / like ListBuckets; told apart by the s3express-control host "
                             "or its own query parameter max-directory-buckets"),
}
# Of those, the ones an optional query member of their own tells apart when the caller gives it.
TOLD_BY_OPTIONAL_QUERY = frozenset({"ListDirectoryBuckets"})
# Answers this codec does not write.
UNSERIALIZABLE = {"SelectObjectContent": "its answer is an event stream, which this codec does not write"}
# Shapes whose XML cannot say which member the caller set: the deprecated NotificationConfiguration
# names both `Event` (one event) and `Events` (a flattened list of them) `<Event>`, so neither this
# parser nor botocore's can take a body with both apart.
AMBIGUOUS_REQUEST_XML = {"PutBucketNotification": "NotificationConfigurationDeprecated: members Event and Events "
                                                   "are both <Event>"}
AMBIGUOUS_ANSWER_XML = {"GetBucketNotification": "NotificationConfigurationDeprecated: members Event and Events "
                                                 "are both <Event>"}


def _expected_failures(names: Iterable[str], failures: dict[str, str]) -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.xfail(reason=failures[name], strict=True)) if name in failures
            else name for name in names]


# ------------------------------------------------------------------------------------------------
# examples from the model


def example(shape: Shape, *, full: bool, header: bool = False, depth: int = 0) -> Any:
    """A valid value of `shape`: required members only, or (full) every member; header values ASCII,
    body text with XML's special characters and non-ASCII letters."""
    kind = shape.type_name
    if kind == "structure":
        if shape.is_tagged_union:
            names = [next(iter(shape.members))]
        else:
            names = list(shape.members) if full and depth < 8 else list(shape.required_members)
        value = {}
        for name in names:
            member = shape.members[name]
            if member.serialization.get("eventstream"):
                continue
            located = member.serialization.get("location") in ("header", "headers")
            value[name] = example(member, full=full, header=located, depth=depth + 1)
        return value
    if kind == "list":
        return [example(shape.member, full=full, header=header, depth=depth + 1)]
    if kind == "map":
        return {"color": "blue", "x-note": "a b"} if header else {"k": example(shape.value, full=full, depth=depth + 1)}
    if kind in ("integer", "long"):
        return 7
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return WHEN
    if kind in ("float", "double"):
        return 1.5
    if kind == "blob":
        return b"blob \x00\xff data"
    if shape.enum:
        return shape.enum[0]
    text = "text-value" if header else "text <&> \"q\" 'a' ü€"
    return text.ljust(shape.metadata.get("min", 0), "x")


def params_for(operation: OperationModel, *, full: bool, key: str = "dir/a key+€.txt") -> dict[str, Any]:
    params: dict[str, Any] = example(operation.input_shape, full=full) if operation.input_shape else {}
    members = operation.input_shape.members if operation.input_shape else {}
    if "Bucket" in params:
        params["Bucket"] = BUCKET
    if "Key" in params:
        params["Key"] = key
    if "RequestRoute" in params:
        params["RequestRoute"] = "route-1"  # a host label
    if "CopySource" in params:
        params["CopySource"] = "source-bucket/dir/source%20key.txt?versionId=v1"
    if "Range" in members and "Range" in params:
        params["Range"] = "bytes=100-199"
    if "IfMatch" in params:
        params["IfMatch"] = '"0123456789abcdef0123456789abcdef"'
    if members.get("Body") is not None and members["Body"].type_name == "blob" and full:
        params["Body"] = b"body bytes \x00\xff"
    return params


def http_request(operation: OperationModel, params: dict[str, Any], *, virtual: bool) -> HttpRequest:
    """The request botocore would send: its serializer's output, the endpoint's URL, and in virtual
    style the bucket moved into the host by botocore's own switch_to_virtual_host_style."""
    serialized = SERIALIZER.serialize_to_request(params, operation)
    prepare_request_dict(serialized, ENDPOINT)
    aws_request = create_request_object(serialized)
    if virtual and "Bucket" in params:  # botocore moves a bucket into the host, when there is one
        switch_to_virtual_host_style(aws_request, "s3v4")
    url = urlsplit(aws_request.url)
    headers = {name.lower(): str(value) for name, value in aws_request.headers.items()}
    body = serialized["body"]
    return HttpRequest(method=serialized["method"], path=url.path, query=parse_qsl(url.query, keep_blank_values=True),
                       headers=headers, body=body if body is not None else b"", host=url.hostname or "")


def route(request: HttpRequest) -> str:
    return rest_xml.operation_name(MODEL, request)


# ------------------------------------------------------------------------------------------------
# (a) routing


@pytest.mark.parametrize("virtual", [False, True], ids=["path", "virtual"])
@pytest.mark.parametrize("name", MODEL.operation_names)
def test_every_operation_routes_to_itself(name: str, virtual: bool) -> None:
    operation = MODEL.operation_model(name)
    request = http_request(operation, params_for(operation, full=False), virtual=virtual)
    expected = INDISTINGUISHABLE.get(name, (name, ""))[0]
    assert route(request) == expected


@pytest.mark.parametrize("name", MODEL.operation_names)
def test_every_operation_routes_with_all_its_members(name: str) -> None:
    """Optional query members (versionId, partNumber, prefix...) do not lead a request astray."""
    operation = MODEL.operation_model(name)
    request = http_request(operation, params_for(operation, full=True), virtual=True)
    expected = name if name in TOLD_BY_OPTIONAL_QUERY else INDISTINGUISHABLE.get(name, (name, ""))[0]
    assert route(request) == expected


@pytest.mark.parametrize("name", sorted(INDISTINGUISHABLE))
def test_x_id_names_the_operation_among_twins(name: str) -> None:
    """The Go and JavaScript SDKs send `x-id=<Operation>`: it decides between identical requests."""
    operation = MODEL.operation_model(name)
    request = http_request(operation, params_for(operation, full=False), virtual=False)
    request.query.append(("x-id", name))
    assert route(request) == name


def test_x_id_of_another_method_is_ignored() -> None:
    operation = MODEL.operation_model("GetObject")
    request = http_request(operation, params_for(operation, full=False), virtual=False)
    request.query.append(("x-id", "PutObject"))
    assert route(request) == "GetObject"


def test_list_directory_buckets_on_the_express_control_host() -> None:
    request = HttpRequest("GET", "/", [], {}, host="s3express-control.us-west-2.amazonaws.com")
    assert route(request) == "ListDirectoryBuckets"
    assert route(HttpRequest("GET", "/", [("max-directory-buckets", "5")], {}, host="localhost")) == \
        "ListDirectoryBuckets"
    assert route(HttpRequest("GET", "/", [], {}, host="localhost")) == "ListBuckets"


@pytest.mark.parametrize(("method", "path", "query", "headers", "expected"), [
    ("PUT", "/b/k", [], {}, "PutObject"),
    ("PUT", "/b/k", [], {"x-amz-copy-source": "s/k"}, "CopyObject"),
    ("PUT", "/b/k", [("partNumber", "1"), ("uploadId", "u")], {}, "UploadPart"),
    ("PUT", "/b/k", [("partNumber", "1"), ("uploadId", "u")], {"x-amz-copy-source": "s/k"}, "UploadPartCopy"),
    ("POST", "/b/k", [("uploads", "")], {}, "CreateMultipartUpload"),
    ("POST", "/b/k", [("uploadId", "u")], {}, "CompleteMultipartUpload"),
    ("DELETE", "/b/k", [("uploadId", "u")], {}, "AbortMultipartUpload"),
    ("DELETE", "/b/k", [("versionId", "v")], {}, "DeleteObject"),
    ("GET", "/b/k", [("uploadId", "u")], {}, "ListParts"),
    ("GET", "/b/k", [("partNumber", "2"), ("versionId", "v")], {}, "GetObject"),
    ("GET", "/b", [("list-type", "2"), ("prefix", "p")], {}, "ListObjectsV2"),
    ("GET", "/b", [("list-type", "1")], {}, "ListObjects"),
    ("GET", "/b/", [("prefix", "p"), ("marker", "m")], {}, "ListObjects"),
    ("GET", "/b", [("location", "")], {}, "GetBucketLocation"),
    ("GET", "/b", [("uploads", "")], {}, "ListMultipartUploads"),
    ("POST", "/b", [("delete", "")], {}, "DeleteObjects"),
    ("PUT", "/b", [], {}, "CreateBucket"),
    ("PUT", "/b/", [], {}, "CreateBucket"),
    ("HEAD", "/b", [], {}, "HeadBucket"),
    ("HEAD", "/b/k", [], {}, "HeadObject"),
    ("GET", "/b", [("tagging", "")], {}, "GetBucketTagging"),
    ("GET", "/b/k", [("tagging", "")], {}, "GetObjectTagging"),
    ("GET", "/b", [("analytics", ""), ("id", "i")], {}, "GetBucketAnalyticsConfiguration"),
    ("GET", "/b", [("analytics", "")], {}, "ListBucketAnalyticsConfigurations"),
    ("GET", "/", [], {}, "ListBuckets"),
])
def test_request_shapes_route_by_method_path_query_and_headers(method: str, path: str, query: list[tuple[str, str]],
                                                               headers: dict[str, str], expected: str) -> None:
    assert route(HttpRequest(method, path, query, headers, host="localhost")) == expected


@pytest.mark.parametrize(("method", "path", "query"), [
    ("PATCH", "/b/k", []),
    ("POST", "/b/k", []),
    ("DELETE", "/", []),
    ("PUT", "/", []),
    ("OPTIONS", "/b", []),
])
def test_no_operation_is_method_not_allowed(method: str, path: str, query: list[tuple[str, str]]) -> None:
    with pytest.raises(WireError) as caught:
        route(HttpRequest(method, path, query, {}, host="localhost"))
    assert (caught.value.code, caught.value.status) == ("MethodNotAllowed", 405)
    assert method in caught.value.message and path in caught.value.message


def test_browser_form_post_is_not_implemented() -> None:
    request = HttpRequest("POST", "/b", [], {"content-type": "multipart/form-data; boundary=x"}, host="localhost")
    with pytest.raises(WireError) as caught:
        route(request)
    assert (caught.value.code, caught.value.status) == ("NotImplemented", 501)


# ------------------------------------------------------------------------------------------------
# addressing


@pytest.mark.parametrize(("host", "path", "expected"), [
    ("localhost", "/bkt/dir/a%20b.txt", ("bkt", "dir/a b.txt")),
    ("localhost", "/bkt", ("bkt", None)),
    ("localhost", "/bkt/", ("bkt", None)),
    ("localhost", "/", (None, None)),
    ("127.0.0.1", "/bkt/k", ("bkt", "k")),
    ("[::1]", "/bkt/k", ("bkt", "k")),
    ("bkt.localhost", "/dir/a%2Bb+c", ("bkt", "dir/a+b+c")),
    ("bkt.localhost", "/", ("bkt", None)),
    ("my.dotted.bkt.localhost", "/k", ("my.dotted.bkt", "k")),
    ("bkt.s3.amazonaws.com", "/k", ("bkt", "k")),
    ("bkt.s3.us-west-2.amazonaws.com", "/k", ("bkt", "k")),
    ("bkt.s3-us-west-2.amazonaws.com", "/k", ("bkt", "k")),
    ("bkt.s3.dualstack.eu-west-1.amazonaws.com", "/k", ("bkt", "k")),
    ("a.s3.b.s3.amazonaws.com", "/k", ("a.s3.b", "k")),
    ("s3.us-west-2.amazonaws.com", "/bkt/k", ("bkt", "k")),
    ("bkt.s3.localhost.localstack.cloud", "/k", ("bkt", "k")),
    ("BKT.LOCALHOST", "/k", ("bkt", "k")),
    ("bkt.localhost", "//k", ("bkt", "/k")),
])
def test_address_path_and_virtual_host_styles(host: str, path: str, expected: tuple[str | None, str | None]) -> None:
    assert rest_xml.address(HttpRequest("GET", path, [], {}, host=host)) == expected


def test_address_with_the_servers_own_host_names() -> None:
    request = HttpRequest("GET", "/k", [], {}, host="bkt.emu.internal")
    assert rest_xml.address(request) == ("k", None)  # an unknown host: path style
    assert rest_xml.address(request, region_suffixes=("emu.internal",)) == ("bkt", "k")
    assert rest_xml.operation_name(MODEL, HttpRequest("GET", "/", [], {}, host="bkt.emu.internal"),
                                   region_suffixes=("emu.internal",)) == "ListObjects"


def test_address_falls_back_to_the_host_header() -> None:
    assert rest_xml.address(HttpRequest("GET", "/k", [], {"host": "bkt.localhost:4590"})) == ("bkt", "k")


def test_address_refuses_a_path_that_is_not_utf8() -> None:
    with pytest.raises(WireError) as caught:
        rest_xml.address(HttpRequest("GET", "/bkt/%ff", [], {}, host="localhost"))
    assert caught.value.code == "InvalidURI"


def _captured_requests(addressing: str) -> list[Any]:
    """What a real botocore client sends to http://localhost:4590 (answered here, nothing on the network)."""
    client = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=ENDPOINT, aws_access_key_id="k", aws_secret_access_key="s",
        config=Config(s3={"addressing_style": addressing}))
    sent: list[Any] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent.append(request)
        return AWSResponse(request.url, 200, {}, _Raw(b""))

    client.meta.events.register("before-send", answer)
    client.put_object(Bucket="bkt", Key="dir/a b+c.txt", Body=b"x")
    client.list_objects_v2(Bucket="bkt")
    return sent


@pytest.mark.parametrize("addressing", ["virtual", "path"])
def test_a_real_clients_requests_are_addressed_and_routed(addressing: str) -> None:
    put, listing = _captured_requests(addressing)
    if addressing == "virtual":
        assert urlsplit(put.url).netloc == "bkt.localhost:4590"  # the Host: header urllib3 sends
    requests = [_from_prepared(put), _from_prepared(listing)]
    assert [rest_xml.address(r) for r in requests] == [("bkt", "dir/a b+c.txt"), ("bkt", None)]
    assert [route(r) for r in requests] == ["PutObject", "ListObjectsV2"]


# ------------------------------------------------------------------------------------------------
# (b) parsing requests


def _with_keys(names: Iterable[str]) -> list[tuple[str, str]]:
    """(operation, key): every key for an operation on objects, one for the others."""
    return [(name, key) for name in names
            for key in (KEYS if "Key" in (MODEL.operation_model(name).input_shape.members) else KEYS[:1])]


@pytest.mark.parametrize("virtual", [False, True], ids=["path", "virtual"])
@pytest.mark.parametrize(("name", "key"), _with_keys(EMULATED))
def test_emulated_operations_parse_back_to_the_callers_params(name: str, key: str, virtual: bool) -> None:
    operation = MODEL.operation_model(name)
    params = params_for(operation, full=True, key=key)
    request = http_request(operation, params, virtual=virtual)
    bucket, parsed_key = rest_xml.address(request)
    assert rest_xml.parse_request(operation, request, bucket, parsed_key) == params


@pytest.mark.parametrize("name", _expected_failures(sorted(set(MODEL.operation_names) - set(EMULATED)),
                                                    AMBIGUOUS_REQUEST_XML))
def test_every_other_operation_parses_back_too(name: str) -> None:
    operation = MODEL.operation_model(name)
    params = params_for(operation, full=True)
    request = http_request(operation, params, virtual=True)
    bucket, key = rest_xml.address(request)
    assert rest_xml.parse_request(operation, request, bucket, key) == params


def test_rich_object_params_are_typed() -> None:
    operation = MODEL.operation_model("GetObject")
    params = {"Bucket": BUCKET, "Key": "a b/c+d", "Range": "bytes=0-9", "IfModifiedSince": WHEN,
              "IfNoneMatch": '"abc"', "PartNumber": 3, "ResponseContentType": "text/plain; charset=utf-8",
              "ChecksumMode": "ENABLED"}
    parsed = rest_xml.parse_request(operation, http_request(operation, params, virtual=False), BUCKET, "a b/c+d")
    assert parsed == params
    assert isinstance(parsed["IfModifiedSince"], dt.datetime) and parsed["IfModifiedSince"].tzinfo is not None
    assert parsed["PartNumber"] == 3


def test_a_file_body_is_passed_on_unread() -> None:
    operation = MODEL.operation_model("PutObject")
    body = io.BytesIO(b"x" * 1000)
    request = HttpRequest("PUT", "/b/k", [], {"content-length": "1000", "x-amz-meta-a": "1"}, body=body)
    parsed = rest_xml.parse_request(operation, request, "b", "k")
    assert parsed["Body"] is body and body.tell() == 0
    assert parsed["ContentLength"] == 1000 and parsed["Metadata"] == {"a": "1"}


def test_an_empty_body_is_no_body_param() -> None:
    operation = MODEL.operation_model("PutObject")
    assert rest_xml.parse_request(operation, HttpRequest("PUT", "/b/k", [], {}), "b", "k") == {"Bucket": "b",
                                                                                                 "Key": "k"}


def test_aws_chunked_is_transfer_framing_not_the_objects_encoding() -> None:
    operation = MODEL.operation_model("PutObject")
    headers = {"content-encoding": "gzip,aws-chunked", "content-length": "200",
               "x-amz-decoded-content-length": "150"}
    parsed = rest_xml.parse_request(operation, HttpRequest("PUT", "/b/k", [], headers, body=b"."), "b", "k")
    assert (parsed["ContentEncoding"], parsed["ContentLength"]) == ("gzip", 150)
    headers["content-encoding"] = "aws-chunked"
    assert "ContentEncoding" not in rest_xml.parse_request(operation, HttpRequest("PUT", "/b/k", [], headers), "b",
                                                           "k")


def test_rfc2047_metadata_is_decoded() -> None:
    operation = MODEL.operation_model("PutObject")
    encoded = email.header.Header("grün €", "utf-8").encode()
    parsed = rest_xml.parse_request(operation, HttpRequest("PUT", "/b/k", [], {"x-amz-meta-note": encoded}), "b", "k")
    assert parsed["Metadata"] == {"note": "grün €"}


def test_an_invalid_conditional_date_is_ignored_and_a_bad_number_refused() -> None:
    operation = MODEL.operation_model("GetObject")
    parsed = rest_xml.parse_request(operation, HttpRequest("GET", "/b/k", [], {"if-modified-since": "yesterday"}),
                                    "b", "k")
    assert "IfModifiedSince" not in parsed
    with pytest.raises(WireError) as caught:
        rest_xml.parse_request(operation, HttpRequest("GET", "/b/k", [("partNumber", "two")], {}), "b", "k")
    assert caught.value.code == "InvalidArgument"


def test_malformed_xml_is_s3s_malformed_xml() -> None:
    operation = MODEL.operation_model("DeleteObjects")
    with pytest.raises(WireError) as caught:
        rest_xml.parse_request(operation, HttpRequest("POST", "/b", [("delete", "")], {}, body=b"<Delete><Obj"), "b",
                               None)
    assert (caught.value.code, caught.value.status) == ("MalformedXML", 400)


def test_xml_bodies_without_namespace_and_with_a_file_body() -> None:
    operation = MODEL.operation_model("CompleteMultipartUpload")
    body = io.BytesIO(b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part>"
                      b"<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag></Part></CompleteMultipartUpload>")
    parsed = rest_xml.parse_request(operation, HttpRequest("POST", "/b/k", [("uploadId", "u")], {}, body=body), "b",
                                    "k")
    assert parsed["MultipartUpload"] == {"Parts": [{"PartNumber": 1, "ETag": '"e1"'},
                                                   {"PartNumber": 2, "ETag": '"e2"'}]}
    assert parsed["UploadId"] == "u"


# ------------------------------------------------------------------------------------------------
# (c) answers read back by botocore


def example_output(operation: OperationModel) -> dict[str, Any]:
    shape = operation.output_shape
    if shape is None:
        return {}
    value: dict[str, Any] = example(shape, full=True)
    payload = shape.serialization.get("payload")
    if payload is not None and shape.members[payload].serialization.get("eventstream"):
        value[payload] = iter([])
    elif payload is not None and shape.members[payload].type_name == "blob":
        value[payload] = b"object bytes \x00\xff"
        if "ContentLength" in shape.members:
            value["ContentLength"] = len(value[payload])  # botocore checks a stream's length
    if operation.name == "GetBucketLocation":
        value["LocationConstraint"] = "eu-west-1"
    return value


def read_back(operation: OperationModel, response: HttpResponse) -> dict[str, Any]:
    """What botocore makes of `response`: its endpoint's response dict, its parser, and (for
    GetBucketLocation) the handler that reads the bare LocationConstraint."""
    body = response.body if isinstance(response.body, bytes) else b"".join(response.body)
    http_response = AWSResponse(f"{ENDPOINT}/", response.status, response.headers, _Raw(body))
    response_dict = convert_to_response_dict(http_response, operation)
    parser = botocore.parsers.create_parser("rest-xml")
    parsed: dict[str, Any] = parser.parse(response_dict, operation.output_shape)
    if operation.name == "GetBucketLocation":
        botocore.handlers.parse_get_bucket_location(parsed, http_response)
    parsed.pop("ResponseMetadata", None)
    return {name: value.read() if isinstance(value, StreamingBody) else value for name, value in parsed.items()}


def comparable(operation: OperationModel, value: dict[str, Any]) -> dict[str, Any]:
    """`value` as botocore's parser gives it back: the header map (Metadata) always there."""
    shape = operation.output_shape
    expected = dict(value)
    for name, member in (shape.members.items() if shape else []):
        if member.serialization.get("location") == "headers":
            expected.setdefault(name, {})
    return expected


@pytest.mark.parametrize("name", EMULATED)
def test_emulated_answers_read_back_by_botocore(name: str) -> None:
    operation = MODEL.operation_model(name)
    output = example_output(operation)
    response = rest_xml.serialize_response(operation, output)
    assert read_back(operation, response) == comparable(operation, output)
    if operation.http["method"] == "HEAD" or operation.http["method"] == "DELETE":
        assert response.body == b""


@pytest.mark.parametrize("name", _expected_failures(sorted(set(MODEL.operation_names) - set(EMULATED)),
                                                    AMBIGUOUS_ANSWER_XML))
def test_every_other_answer_reads_back(name: str) -> None:
    operation = MODEL.operation_model(name)
    output = example_output(operation)
    if name in UNSERIALIZABLE:
        with pytest.raises(WireError) as caught:
            rest_xml.serialize_response(operation, output)
        assert caught.value.status == 501
        return
    assert read_back(operation, rest_xml.serialize_response(operation, output)) == comparable(operation, output)


def test_answer_xml_has_s3s_root_names_and_namespace() -> None:
    listing = rest_xml.serialize_response(MODEL.operation_model("ListObjectsV2"), {
        "Name": "b", "KeyCount": 1, "IsTruncated": False,
        "Contents": [{"Key": "a&b", "LastModified": WHEN, "ETag": '"e"', "Size": 3}]})
    body = bytes(listing.body)  # type: ignore[arg-type]
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
                           b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
    assert b"<Contents><Key>a&amp;b</Key><LastModified>2024-02-03T04:05:06.000Z</LastModified>" in body
    assert listing.headers["content-type"] == "application/xml"
    assert listing.headers["content-length"] == str(len(body))
    location = rest_xml.serialize_response(MODEL.operation_model("GetBucketLocation"), {"LocationConstraint": None})
    assert bytes(location.body).endswith(  # type: ignore[arg-type]
        b'<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>')
    upload = rest_xml.serialize_response(MODEL.operation_model("CreateMultipartUpload"),
                                         {"Bucket": "b", "Key": "k", "UploadId": "u"})
    assert b"<InitiateMultipartUploadResult " in bytes(upload.body)  # type: ignore[arg-type]


def test_us_east_1_location_reads_back_as_none() -> None:
    operation = MODEL.operation_model("GetBucketLocation")
    assert read_back(operation, rest_xml.serialize_response(operation, {})) == {"LocationConstraint": None}


def test_acl_grantee_type_is_an_xsi_attribute() -> None:
    operation = MODEL.operation_model("GetObjectAcl")
    output = {"Owner": {"ID": "o"}, "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": "o"},
                                                "Permission": "FULL_CONTROL"}]}
    response = rest_xml.serialize_response(operation, output)
    assert b'xsi:type="CanonicalUser"' in bytes(response.body)  # type: ignore[arg-type]
    assert read_back(operation, response) == output


@pytest.mark.parametrize("wrap", ["file", "streaming-body", "iterable"])
def test_a_large_body_streams_in_64k_chunks(wrap: str) -> None:
    data = hashlib.sha256(b"seed").digest() * (200_000 // 32)  # 200,000 bytes
    source = io.BytesIO(data)
    body: Any = {"file": source, "streaming-body": StreamingBody(source, len(data)),
                 "iterable": iter([data[:70_000], data[70_000:]])}[wrap]
    operation = MODEL.operation_model("GetObject")
    response = rest_xml.serialize_response(operation, {"Body": body, "ContentLength": len(data), "ETag": '"e"'})
    assert not isinstance(response.body, bytes)
    chunks = list(response.body)
    assert b"".join(chunks) == data
    if wrap != "iterable":
        assert [len(c) for c in chunks[:-1]] == [rest_xml.CHUNK] * (len(chunks) - 1)
        assert source.closed
    assert response.headers["content-length"] == str(len(data))
    http_response = AWSResponse(f"{ENDPOINT}/", response.status, response.headers, _Raw(data))
    assert convert_to_response_dict(http_response, operation)["body"].read() == data


def test_a_ranged_object_is_206_and_delete_is_204() -> None:
    get = rest_xml.serialize_response(MODEL.operation_model("GetObject"),
                                      {"Body": b"abc", "ContentRange": "bytes 0-2/10", "ContentLength": 3})
    assert get.status == 206 and get.headers["content-range"] == "bytes 0-2/10"
    delete = rest_xml.serialize_response(MODEL.operation_model("DeleteObject"), {"DeleteMarker": True})
    assert (delete.status, delete.body, delete.headers["x-amz-delete-marker"]) == (204, b"", "true")
    told = rest_xml.serialize_response(MODEL.operation_model("PutObject"),
                                       {"ETag": '"e"', "ResponseMetadata": {"HTTPStatusCode": 201}})
    assert told.status == 201


def test_head_object_has_headers_and_no_body() -> None:
    operation = MODEL.operation_model("HeadObject")
    response = rest_xml.serialize_response(operation, {"ContentLength": 12345, "LastModified": WHEN,
                                                       "ETag": '"e"', "Metadata": {"color": "blue"}})
    assert response.body == b""
    assert response.headers["content-length"] == "12345"
    assert response.headers["last-modified"] == "Sat, 03 Feb 2024 04:05:06 GMT"
    assert response.headers["x-amz-meta-color"] == "blue"


@pytest.mark.parametrize("text", ["grün €", "ü" * 200 + " 漢字 end", "line\r\nX-Injected: 1"])
def test_non_ascii_metadata_is_rfc2047_encoded_on_one_line(text: str) -> None:
    response = rest_xml.serialize_response(MODEL.operation_model("HeadObject"), {"Metadata": {"note": text}})
    value = response.headers["x-amz-meta-note"]
    assert value.isascii() and value.isprintable()  # no line break: one header
    assert str(email.header.make_header(email.header.decode_header(value))) == text
    operation = MODEL.operation_model("PutObject")  # and S3 decodes it back on the way in
    parsed = rest_xml.parse_request(operation, HttpRequest("PUT", "/b/k", [], {"x-amz-meta-note": value}), "b", "k")
    assert parsed["Metadata"] == {"note": text}


# ------------------------------------------------------------------------------------------------
# (d) errors


@pytest.mark.parametrize(("code", "status"), [("NoSuchKey", 404), ("NoSuchBucket", 404), ("AccessDenied", 403),
                                              ("InvalidRange", 416), ("BucketAlreadyOwnedByYou", 409)])
def test_errors_read_back_by_botocore(code: str, status: int) -> None:
    response = rest_xml.serialize_error(code, "a <message> & more", status, resource="/b/k")
    operation = MODEL.operation_model("GetObject")
    http_response = AWSResponse(f"{ENDPOINT}/", response.status, response.headers, _Raw(bytes(response.body)))  # type: ignore[arg-type]
    parsed = botocore.parsers.create_parser("rest-xml").parse(convert_to_response_dict(http_response, operation),
                                                             operation.output_shape)
    assert parsed["Error"]["Code"] == code
    assert parsed["Error"]["Message"] == "a <message> & more"
    assert parsed["Error"]["Resource"] == "/b/k"
    assert parsed["ResponseMetadata"]["RequestId"] == response.headers["x-amz-request-id"]
    assert response.status == status


@pytest.mark.parametrize(("status", "method"), [(404, "HEAD"), (403, "HEAD"), (304, "GET")])
def test_head_and_304_errors_have_no_body(status: int, method: str) -> None:
    response = rest_xml.serialize_error("NoSuchKey", "gone", status, resource="/b/k", method=method)
    assert (response.status, response.body) == (status, b"")
    operation = MODEL.operation_model("HeadObject")
    http_response = AWSResponse(f"{ENDPOINT}/", status, response.headers, _Raw(b""))
    parsed = botocore.parsers.create_parser("rest-xml").parse(convert_to_response_dict(http_response, operation),
                                                             operation.output_shape)
    assert parsed["Error"]["Code"] == str(status)


# ------------------------------------------------------------------------------------------------
# end to end: a real botocore client answered through the codec by the local S3


class _Raw(io.BytesIO):
    """The urllib3 response botocore reads: `stream()` for small answers, `read(n)` for streams."""

    def stream(self, amt: int = 1024, decode_content: bool = False) -> Iterator[bytes]:
        while True:
            chunk = self.read(amt)
            if not chunk:
                return
            yield chunk


def _from_prepared(request: Any) -> HttpRequest:
    url = urlsplit(request.url)
    body = request.body
    if body is None:
        body = b""
    elif isinstance(body, str):
        body = body.encode("utf-8")
    elif not isinstance(body, bytes):
        body = body.read()
    headers = {name.lower(): value.decode() if isinstance(value, bytes) else value
               for name, value in request.headers.items()}
    return HttpRequest(method=request.method, path=url.path, query=parse_qsl(url.query, keep_blank_values=True),
                       headers=headers, body=body, host=url.hostname or "")


def _answer(service: S3, request: HttpRequest) -> HttpResponse:
    try:
        name = route(request)
        operation = MODEL.operation_model(name)
        bucket, key = rest_xml.address(request)
        answer = service.operations()[name](rest_xml.parse_request(operation, request, bucket, key))
        return rest_xml.serialize_response(operation, answer)
    except (ApiError, WireError) as err:
        return rest_xml.serialize_error(err.code, err.message, err.status, resource=request.path,
                                        method=request.method)


def _joined(body: bytes | Iterable[bytes]) -> bytes:
    return body if isinstance(body, bytes) else b"".join(body)


@pytest.fixture(params=["virtual", "path"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    service = S3(tmp_path, region="us-east-1")
    made = botocore.session.get_session().create_client(
        "s3", region_name="us-east-1", endpoint_url=ENDPOINT, aws_access_key_id="k", aws_secret_access_key="s",
        config=Config(s3={"addressing_style": request.param}, retries={"max_attempts": 1}))

    def send(request: Any, **_: Any) -> AWSResponse:
        response = _answer(service, _from_prepared(request))
        return AWSResponse(request.url, response.status, response.headers, _Raw(_joined(response.body)))

    made.meta.events.register("before-send", send)
    return made


def test_a_real_client_round_trip(client: Any) -> None:
    client.create_bucket(Bucket="bkt")
    assert client.get_bucket_location(Bucket="bkt")["LocationConstraint"] is None
    key = "dir/a b+c ü.txt"
    put = client.put_object(Bucket="bkt", Key=key, Body=b"0123456789", Metadata={"color": "blue"},
                            ContentType="text/plain")
    assert put["ETag"] == f'"{hashlib.md5(b"0123456789").hexdigest()}"'
    got = client.get_object(Bucket="bkt", Key=key, Range="bytes=2-5")
    assert (got["Body"].read(), got["ContentRange"], got["ResponseMetadata"]["HTTPStatusCode"]) == \
        (b"2345", "bytes 2-5/10", 206)
    head = client.head_object(Bucket="bkt", Key=key)
    assert head["ContentLength"] == 10 and head["LastModified"].tzinfo is not None
    client.copy_object(Bucket="bkt", Key="copy", CopySource={"Bucket": "bkt", "Key": key})
    listed = client.list_objects_v2(Bucket="bkt", Prefix="dir/")
    assert [o["Key"] for o in listed["Contents"]] == [key]
    assert [o["Key"] for o in client.list_objects(Bucket="bkt")["Contents"]] == ["copy", key]
    deleted = client.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "copy"}, {"Key": key}]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == ["copy", key]
    with pytest.raises(ClientError) as missing:
        client.get_object(Bucket="bkt", Key=key)
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as head_missing:
        client.head_object(Bucket="bkt", Key=key)
    assert head_missing.value.response["Error"]["Code"] == "404"
    with pytest.raises(ClientError) as no_bucket:
        client.list_objects_v2(Bucket="nope")
    assert no_bucket.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_real_client_multipart_upload(client: Any) -> None:
    client.create_bucket(Bucket="bkt")
    upload = client.create_multipart_upload(Bucket="bkt", Key="big", Metadata={"m": "1"})["UploadId"]
    first = client.upload_part(Bucket="bkt", Key="big", UploadId=upload, PartNumber=1, Body=b"a" * (5 << 20))
    client.put_object(Bucket="bkt", Key="tail", Body=b"tail")
    second = client.upload_part_copy(Bucket="bkt", Key="big", UploadId=upload, PartNumber=2,
                                     CopySource={"Bucket": "bkt", "Key": "tail"})
    done = client.complete_multipart_upload(Bucket="bkt", Key="big", UploadId=upload, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]}]})
    head = client.head_object(Bucket="bkt", Key="big")
    assert (head["ContentLength"], head["ETag"]) == ((5 << 20) + 4, done["ETag"])
    assert client.get_object(Bucket="bkt", Key="big", Range="bytes=-6")["Body"].read() == b"aatail"
    aborted = client.create_multipart_upload(Bucket="bkt", Key="gone")["UploadId"]
    assert client.abort_multipart_upload(Bucket="bkt", Key="gone", UploadId=aborted)["ResponseMetadata"][
        "HTTPStatusCode"] == 204

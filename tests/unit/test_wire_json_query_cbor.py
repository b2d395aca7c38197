"""The awsJson, query and RPC v2 CBOR codecs of `hetero-emu serve`, with botocore as the oracle.

For EVERY operation of SageMaker, CloudWatch Logs, CloudWatch (in each of its three protocols), STS
and IAM: parameters generated from the input shape, written by botocore's own serializer (with its
parameter validation on) and sent as botocore would send them, read back here to the same values;
an answer generated from the output shape, written here, read by botocore's own parser to the same
values. Then the same through real boto3 clients whose HTTP is answered by the codecs, and errors,
unknown operations and bodies that are not what they claim."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import botocore.session
import cbor2
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse, create_request_object, prepare_request_dict
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.model import OperationModel, ServiceModel, Shape
from botocore.parsers import create_parser
from botocore.serialize import create_serializer

from emulator.aws.stub import ApiError
from emulator.aws.wire import HttpRequest, HttpResponse, WireError, json_rpc, query, rpc_cbor

SESSION = botocore.session.get_session()
SERVICES = ("sagemaker", "logs", "cloudwatch", "sts", "iam")
MODELS: dict[str, ServiceModel] = {name: SESSION.get_service_model(name) for name in SERVICES}
JSON, CBOR, QUERY = "json", "smithy-rpc-v2-cbor", "query"
CASES = [("sagemaker", JSON), ("logs", JSON), ("cloudwatch", JSON), ("cloudwatch", CBOR), ("cloudwatch", QUERY),
         ("sts", QUERY), ("iam", QUERY)]
CODECS: dict[str, Any] = {JSON: json_rpc, CBOR: rpc_cbor, QUERY: query}
BASE = dt.datetime(2026, 12, 4, 5, 6, 7, tzinfo=dt.timezone.utc)
# Text XML, URL encoding and JSON each have to escape: markup, quotes, separators, non-ASCII, CR/LF.
AWKWARD = " a&b <c> \"q\" 'é' ✓ +%=/?#\r\n\t"
DEPTH = 5


# --------------------------------------------------------------------------------------------------
# Example values from shapes


class Examples:
    """Values for shapes that botocore's validator accepts (required members, `min` lengths and
    values, one member of a union), every member filled down to DEPTH levels, each leaf different so
    that a value put in the wrong member shows."""

    def __init__(self) -> None:
        self.count = 0

    def value(self, shape: Shape, depth: int = 0) -> Any:
        self.count += 1
        n = self.count
        kind = shape.type_name
        least = int(shape.metadata.get("min", 0))
        if kind == "structure":
            return self.structure(shape, depth)
        if kind == "list":
            if depth > DEPTH + 3:
                return None
            items = [self.value(shape.member, depth + 1) for _ in range(max(2, least))]
            return None if any(item is None for item in items) else items
        if kind == "map":
            if depth > DEPTH + 3:
                return None
            keys = shape.key.enum[:2] if shape.key.enum else [f"key-{n}-{i}" for i in range(2)]
            values = [self.value(shape.value, depth + 1) for _ in keys]
            return None if any(v is None for v in values) else dict(zip(keys, values, strict=True))
        if kind == "string":
            if shape.enum:
                return shape.enum[n % len(shape.enum)]
            text = f"{shape.name[:16]}-{n}{AWKWARD}"
            return text + "x" * max(0, least - len(text))
        if kind in ("integer", "long"):
            return max(n, least) + (2**40 if kind == "long" else 0)
        if kind == "float":
            return max(n, least) + 0.5  # exact in the single precision CBOR gives floats
        if kind == "double":
            return max(n, least) + 0.1
        if kind == "boolean":
            return n % 2 == 0
        if kind == "timestamp":
            return BASE + dt.timedelta(days=n, microseconds=(n * 7919) % 1_000_000)
        if kind == "blob":
            return bytes([n % 256, 0, 255, 10, 13]) + b"blob" + b"." * least
        raise AssertionError(f"no example for {kind}")

    def structure(self, shape: Shape, depth: int) -> dict[str, Any] | None:
        if shape.is_document_type:
            return {"document": [1, "two"]}
        required = set(shape.required_members)
        out: dict[str, Any] = {}
        for name, member in shape.members.items():
            if member.serialization.get("eventstream"):
                continue
            if depth > DEPTH and name not in required and not shape.is_tagged_union:
                continue  # deep enough: only what the validator demands (and a union's one member)
            if depth > DEPTH + 3:
                return None
            value = self.value(member, depth + 1)
            if value is None:
                if name in required:
                    return None
                continue
            out[name] = value
            if shape.is_tagged_union:
                break
        return out


def example(shape: Shape | None) -> dict[str, Any]:
    if shape is None:
        return {}
    value = Examples().value(shape)
    assert isinstance(value, dict), shape.name
    return value


def without_empty(value: Any) -> Any:
    """`value` as the query protocol carries it: an empty structure or map sends no name at all."""
    if isinstance(value, dict):
        kept = {k: without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list):
        return [without_empty(v) for v in value]
    return value


def assert_same(got: Any, want: Any, path: str = "", *, utc: bool = False) -> None:
    """Equal, and of the same types (True is no 1, 2.0 no 2); datetimes the same instant, aware, and
    with `utc` in UTC itself."""
    if isinstance(want, dict):
        assert isinstance(got, dict), path
        assert sorted(got) == sorted(want), path
        for key in want:
            assert_same(got[key], want[key], f"{path}.{key}", utc=utc)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]", utc=utc)
    elif isinstance(want, dt.datetime):
        assert isinstance(got, dt.datetime) and got.tzinfo is not None, path
        assert got == want, path
        if utc:
            assert got.tzinfo is dt.timezone.utc, path
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), path
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def operations(service: str) -> Iterator[OperationModel]:
    model = MODELS[service]
    for name in model.operation_names:
        yield model.operation_model(name)


# --------------------------------------------------------------------------------------------------
# Requests as botocore sends them, answers as botocore reads them


def server_request(prepared: AWSPreparedRequest) -> HttpRequest:
    """What the server receives for a request botocore prepared."""
    url = urlsplit(prepared.url)
    body = prepared.body or b""
    if isinstance(body, str):
        body = body.encode()
    return HttpRequest(method=prepared.method, path=url.path or "/",
                       query=parse_qsl(url.query, keep_blank_values=True),
                       headers={k.lower(): v.decode() if isinstance(v, bytes) else v
                                for k, v in prepared.headers.items()},
                       body=body, host=url.hostname or "")


def botocore_request(protocol: str, operation: OperationModel, params: dict[str, Any]) -> HttpRequest:
    """`params` serialized by botocore (validated first, as a client does) and prepared for the wire."""
    serializer = create_serializer(protocol, include_validation=True)
    request_dict = serializer.serialize_to_request(params, operation)
    prepare_request_dict(request_dict, endpoint_url="https://emulator.test")
    return server_request(create_request_object(request_dict).prepare())


def read_request(protocol: str, operation: OperationModel, request: HttpRequest) -> dict[str, Any]:
    """The operation and parameters the codec reads from a request, as the endpoint asks for them."""
    if protocol == QUERY:
        form = query.read_form(request)
        assert query.operation_name(form, operation.service_model) == operation.name
        return dict(query.parse_request(operation, form))
    codec = CODECS[protocol]
    assert codec.operation_name(operation.service_model, request) == operation.name
    return dict(codec.parse_request(operation, request))


def body_of(response: HttpResponse) -> bytes:
    assert isinstance(response.body, bytes)  # these codecs never stream
    return response.body


def botocore_reads(protocol: str, response: HttpResponse, shape: Shape | None) -> dict[str, Any]:
    parsed: dict[str, Any] = create_parser(protocol).parse(
        {"status_code": response.status, "headers": response.headers, "body": body_of(response)}, shape)
    return parsed


def with_iso_text(value: Any, offset: dt.timezone) -> Any:
    """Every datetime of `value` as ISO 8601 text in another zone, as job records store times."""
    if isinstance(value, dt.datetime):
        return value.astimezone(offset).isoformat()
    if isinstance(value, dict):
        return {k: with_iso_text(v, offset) for k, v in value.items()}
    if isinstance(value, list):
        return [with_iso_text(v, offset) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# Every operation, both directions


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_every_operations_request_reads_back_to_its_parameters(service: str, protocol: str) -> None:
    checked = 0
    for operation in operations(service):
        params = example(operation.input_shape)
        request = botocore_request(protocol, operation, params)
        expected = without_empty(params) if protocol == QUERY else params
        assert_same(read_request(protocol, operation, request), expected, operation.name, utc=True)
        checked += 1
    assert checked == len(MODELS[service].operation_names) > 10


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_every_operations_answer_is_read_by_botocore_as_written(service: str, protocol: str) -> None:
    checked = 0
    for operation in operations(service):
        if operation.has_event_stream_output:
            continue  # live tail and the like: not answered over these codecs
        output = example(operation.output_shape)
        response = CODECS[protocol].serialize_response(operation, output)
        assert response.status == 200
        parsed = botocore_reads(protocol, response, operation.output_shape)
        parsed.pop("ResponseMetadata")
        assert_same(parsed, output, operation.name)
        checked += 1
    assert checked > 10


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_timestamps_given_as_iso_text_are_read_by_botocore_as_the_same_instants(service: str, protocol: str) -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    for operation in operations(service):
        if operation.has_event_stream_output:
            continue
        output = example(operation.output_shape)
        response = CODECS[protocol].serialize_response(operation, with_iso_text(output, plus_two))
        parsed = botocore_reads(protocol, response, operation.output_shape)
        parsed.pop("ResponseMetadata")
        assert_same(parsed, output, operation.name)


# --------------------------------------------------------------------------------------------------
# Real clients: what a user's boto3 sends and raises


class _Raw:
    """The raw body botocore's AWSResponse reads (`.stream()`)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


Handler = Callable[[OperationModel, dict[str, Any]], dict[str, Any]]


def client_answered_by(service: str, handler: Handler) -> Any:
    """A botocore client of `service` (its own choice of protocol, validation and exceptions) whose
    requests `handler` answers through the codecs: botocore takes a `before-send` handler's
    response instead of sending (endpoint.py `_do_get_response`)."""
    client = SESSION.create_client(service, region_name="us-east-1", endpoint_url="https://emulator.test",
                                   aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                                   config=Config(retries={"total_max_attempts": 1}))
    model = client.meta.service_model
    protocol = model.resolved_protocol

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        incoming = server_request(request)
        codec = CODECS[protocol]
        if protocol == QUERY:
            form = query.read_form(incoming)
            operation = model.operation_model(query.operation_name(form, model))
            params = query.parse_request(operation, form)
        else:
            operation = model.operation_model(codec.operation_name(model, incoming))
            params = codec.parse_request(operation, incoming)
        try:
            answer = codec.serialize_response(operation, handler(operation, params))
        except ApiError as err:
            answer = codec.serialize_error(model, err.code, err.message, err.status)
        assert isinstance(answer.body, bytes)
        return AWSResponse(request.url, answer.status, answer.headers, _Raw(answer.body))

    client.meta.events.register("before-send", send)
    return client


def test_a_default_boto3_cloudwatch_client_speaks_json() -> None:
    # Why json_rpc, not rpc_cbor, answers botocore's CloudWatch calls: botocore's priority order.
    client = client_answered_by("cloudwatch", lambda operation, params: {})
    assert client.meta.service_model.resolved_protocol == JSON
    assert MODELS["cloudwatch"].metadata["protocols"][0] == CBOR


@pytest.mark.parametrize("service", SERVICES)
def test_every_operation_round_trips_through_a_real_boto3_client(service: str) -> None:
    """The user's view: every operation called with its generated parameters, which the handler
    receives exactly; its generated answer, which the caller gets exactly."""
    seen: dict[str, Any] = {}

    def handler(operation: OperationModel, params: dict[str, Any]) -> dict[str, Any]:
        seen["params"] = params
        output: dict[str, Any] = seen["output"]
        return output

    client = client_answered_by(service, handler)
    protocol = client.meta.service_model.resolved_protocol
    called = 0
    for operation in operations(service):
        if operation.has_event_stream_output or operation.has_event_stream_input:
            continue
        params = example(operation.input_shape)
        seen["output"] = example(operation.output_shape)
        answer = getattr(client, botocore.xform_name(operation.name))(**params)
        answer.pop("ResponseMetadata")
        assert_same(seen["params"], without_empty(params) if protocol == QUERY else params, operation.name, utc=True)
        assert_same(answer, seen["output"], operation.name)
        called += 1
    assert called > 10


def test_an_answer_keeps_the_members_the_emulator_adds_to_describe_training_job() -> None:
    sagemaker = MODELS["sagemaker"].operation_model("DescribeTrainingJob")
    answer = {"TrainingJobName": "job", "TrainingJobStatus": "InProgress", "CreationTime": "2026-01-02T03:04:05Z",
              "HeteroEmu": {"Hosts": [{"Name": "algo-1", "Started": BASE, "Log": b"\x00x"}], "Ratio": 0.5}}
    response = json_rpc.serialize_response(sagemaker, answer)
    assert isinstance(response.body, bytes)
    raw = json.loads(response.body)
    assert raw["CreationTime"] == 1767323045
    assert raw["HeteroEmu"] == {"Hosts": [{"Name": "algo-1", "Started": BASE.timestamp(), "Log": "AHg="}],
                                "Ratio": 0.5}
    parsed = botocore_reads(JSON, response, sagemaker.output_shape)
    assert parsed["CreationTime"] == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    cbor = cbor2.loads(body_of(rpc_cbor.serialize_response(MODELS["cloudwatch"].operation_model("ListMetrics"),
                                                           {"Metrics": [], "Extra": {"At": BASE}})))
    assert cbor == {"Metrics": [], "Extra": {"At": BASE}}



def test_a_list_of_plain_structures_is_written_as_each_item_would_be() -> None:
    """Items of plain values are written as they are; an item with a None, a member the model does not
    name, a renamed or converted member, or a value that is not plain is written member by member."""
    events = MODELS["logs"].operation_model("GetLogEvents")
    answer = {"events": [{"timestamp": 1, "message": "a", "ingestionTime": 2},
                         {"timestamp": 3, "message": None, "ingestionTime": 4},
                         {"timestamp": 5, "message": "b", "ingestionTime": 6, "Extra": {"At": BASE}},
                         {"timestamp": 7, "message": AWKWARD, "ingestionTime": True}]}
    raw = json.loads(body_of(json_rpc.serialize_response(events, answer)))
    assert raw["events"] == [{"timestamp": 1, "message": "a", "ingestionTime": 2},
                             {"timestamp": 3, "ingestionTime": 4},
                             {"timestamp": 5, "message": "b", "ingestionTime": 6, "Extra": {"At": BASE.timestamp()}},
                             {"timestamp": 7, "message": AWKWARD, "ingestionTime": True}]
    parsed = botocore_reads(JSON, json_rpc.serialize_response(events, answer), events.output_shape)
    assert [e.get("message") for e in parsed["events"]] == ["a", None, "b", AWKWARD]
    # Unmodelled plain dicts and lists are kept; one holding a time or a None is converted.
    jobs = MODELS["sagemaker"].operation_model("DescribeTrainingJob")
    extra = {"Plain": {"a": 1, "b": "x", "c": [1, "y", False]}, "Mixed": {"a": None, "b": [BASE]}}
    raw = json.loads(body_of(json_rpc.serialize_response(jobs, {"TrainingJobName": "job", "Emulator": extra})))
    assert raw["Emulator"] == {"Plain": {"a": 1, "b": "x", "c": [1, "y", False]}, "Mixed": {"b": [BASE.timestamp()]}}


def test_json_that_orjson_refuses_is_written_by_the_standard_library() -> None:
    """A lone surrogate (text read with surrogateescape) and an integer past 64 bits still make JSON;
    a datetime or other object the writer left is its text, as with the standard library."""
    for value in ({"m": "bad \udcff byte"}, {"n": 2**70}, {"when": BASE, "what": object.__name__}):
        written = json_rpc.json_bytes(value)
        assert json.loads(written) == json.loads(json.dumps(value, default=str))
    assert json.loads(json_rpc.json_bytes({"m": AWKWARD})) == {"m": AWKWARD}


def test_as_output_converts_timestamp_text_at_any_depth_and_copies_an_answer_it_leaves_as_it_is() -> None:
    from emulator.aws.stub import as_output

    described = MODELS["sagemaker"].operation_model("DescribeTrainingJob").output_shape
    answer = as_output({"TrainingJobName": "job", "SecondaryStatusTransitions": [
        {"Status": "Starting", "StartTime": "2026-01-02T03:04:05+00:00"}]}, described)
    assert answer["SecondaryStatusTransitions"][0]["StartTime"] == dt.datetime(2026, 1, 2, 3, 4, 5,
                                                                                 tzinfo=dt.timezone.utc)
    # GetLogEvents' shapes hold no timestamp (its times are epoch milliseconds, `long`): nothing is
    # walked, yet the caller's dict is not the one botocore adds ResponseMetadata to.
    events = {"events": [{"timestamp": 1, "message": "m", "ingestionTime": 2}], "nextForwardToken": "f/0"}
    kept = as_output(events, MODELS["logs"].operation_model("GetLogEvents").output_shape)
    assert kept == events
    kept.setdefault("ResponseMetadata", {})
    assert "ResponseMetadata" not in events


# --------------------------------------------------------------------------------------------------
# Errors


def error_cases() -> Iterator[tuple[str, str, Shape]]:
    for service, protocol in CASES:
        for shape in MODELS[service].error_shapes:
            yield service, protocol, shape


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_every_modelled_error_is_read_with_the_code_the_client_maps_to_its_exception(service: str,
                                                                                     protocol: str) -> None:
    model = MODELS[service]
    exceptions = SESSION.create_client(service, region_name="us-east-1", aws_access_key_id="a",
                                       aws_secret_access_key="b").exceptions
    operation = next(operations(service))
    assert model.error_shapes
    for shape in model.error_shapes:
        # Handlers may name an exception by its code or by its shape's name; both are the exception.
        for given in {shape.error_code, shape.name}:
            response = CODECS[protocol].serialize_error(model, given, f"{given} <&> went wrong", 400)
            parsed = botocore_reads(protocol, response, operation.output_shape)
            assert parsed["Error"]["Code"] == shape.error_code, (shape.name, given)
            assert parsed["Error"]["Message"] == f"{given} <&> went wrong"
            assert parsed["ResponseMetadata"]["RequestId"]
            # (CloudWatch gives two exceptions the code ResourceNotFound: the client has one class for it.)
            assert exceptions.from_code(parsed["Error"]["Code"]) in {
                getattr(exceptions, other.name) for other in model.error_shapes if other.error_code == shape.error_code}
            assert exceptions.from_code(parsed["Error"]["Code"]) is not exceptions.ClientError


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_an_unmodelled_error_is_a_client_error_with_its_code(service: str, protocol: str) -> None:
    model = MODELS[service]
    response = CODECS[protocol].serialize_error(model, "NotEmulated", "hetero-emu does not emulate it", 501)
    assert response.status == 501
    parsed = botocore_reads(protocol, response, next(operations(service)).output_shape)
    assert parsed["Error"]["Code"] == "NotEmulated"
    assert parsed["Error"]["Message"] == "hetero-emu does not emulate it"


@pytest.mark.parametrize(("service", "operation", "params", "code", "exception"), [
    ("sagemaker", "DescribeTrainingJob", {"TrainingJobName": "gone"}, "ResourceNotFound", "ResourceNotFound"),
    ("logs", "GetLogEvents", {"logGroupName": "g", "logStreamName": "s"}, "ResourceNotFoundException",
     "ResourceNotFoundException"),
    ("cloudwatch", "ListMetrics", {}, "InvalidParameterValue", "InvalidParameterValueException"),
    ("cloudwatch", "ListMetrics", {}, "InvalidParameterCombinationException", "InvalidParameterCombinationException"),
    ("iam", "GetRole", {"RoleName": "gone"}, "NoSuchEntity", "NoSuchEntityException"),
    ("sts", "AssumeRole", {"RoleArn": "arn:aws:iam::123456789012:role/r", "RoleSessionName": "session"},
     "ExpiredTokenException", "ExpiredTokenException"),
])
def test_a_modelled_error_raises_the_real_clients_own_exception(service: str, operation: str, params: dict[str, Any],
                                                               code: str, exception: str) -> None:
    def handler(model: OperationModel, given: dict[str, Any]) -> dict[str, Any]:
        raise ApiError(code, "it went wrong", 404)

    client = client_answered_by(service, handler)
    with pytest.raises(getattr(client.exceptions, exception)) as caught:
        getattr(client, botocore.xform_name(operation))(**params)
    assert caught.value.response["Error"]["Message"] == "it went wrong"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


@pytest.mark.parametrize("service", SERVICES)
def test_an_unmodelled_error_raises_a_client_error_with_its_code_from_a_real_client(service: str) -> None:
    def handler(model: OperationModel, given: dict[str, Any]) -> dict[str, Any]:
        raise ApiError("NotEmulated", "not here", 400)

    client = client_answered_by(service, handler)
    operation = next(op for op in operations(service) if not op.input_shape or not op.input_shape.required_members)
    with pytest.raises(ClientError) as caught:
        getattr(client, botocore.xform_name(operation.name))()
    assert type(caught.value) is ClientError  # no modelled exception's subclass
    assert caught.value.response["Error"]["Code"] == "NotEmulated"


def test_a_query_compatible_json_error_carries_the_query_code_and_fault() -> None:
    response = json_rpc.serialize_error(MODELS["cloudwatch"], "InvalidParameterValue", "bad", 400)
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["__type"] == "InvalidParameterValueException"
    assert response.headers["x-amzn-query-error"] == "InvalidParameterValue;Sender"
    server_fault = json_rpc.serialize_error(MODELS["cloudwatch"], "InternalServiceError", "down", 500)
    assert server_fault.headers["x-amzn-query-error"] == "InternalServiceError;Receiver"
    assert "x-amzn-query-error" not in json_rpc.serialize_error(MODELS["logs"], "X", "y", 400).headers


def test_a_query_error_is_the_error_response_document() -> None:
    response = query.serialize_error(MODELS["iam"], "NoSuchEntityException", "no role \r\n<x>", 404)
    assert isinstance(response.body, bytes)
    root = ET.fromstring(response.body)
    ns = "{https://iam.amazonaws.com/doc/2010-05-08/}"
    assert root.tag == f"{ns}ErrorResponse"
    assert [child.tag for child in root] == [f"{ns}Error", f"{ns}RequestId"]
    assert root.findtext(f"{ns}Error/{ns}Type") == "Sender"
    assert root.findtext(f"{ns}Error/{ns}Code") == "NoSuchEntity"
    assert root.findtext(f"{ns}Error/{ns}Message") == "no role \r\n<x>"
    assert body_of(query.serialize_error(MODELS["sts"], "Boom", "x", 503)).count(b"<Type>Receiver</Type>") == 1


# --------------------------------------------------------------------------------------------------
# Unknown operations


def json_request(target: str | None, body: bytes = b"{}") -> HttpRequest:
    headers = {"content-type": "application/x-amz-json-1.1"}
    if target is not None:
        headers["x-amz-target"] = target
    return HttpRequest("POST", "/", [], headers, body)


@pytest.mark.parametrize(("target", "named"), [
    ("Logs_20140328.GetLogEvents", "Logs_20140328.GetLogEvents"),
    ("SageMaker.FlyToTheMoon", "SageMaker.FlyToTheMoon"),
    ("SageMakerListTrainingJobs", "SageMakerListTrainingJobs"),
    (None, "X-Amz-Target"),
])
def test_a_json_target_the_model_does_not_have_is_an_unknown_operation(target: str | None, named: str) -> None:
    with pytest.raises(WireError) as caught:
        json_rpc.operation_name(MODELS["sagemaker"], json_request(target))
    assert (caught.value.code, caught.value.status) == ("UnknownOperationException", 400)
    assert named in caught.value.message


@pytest.mark.parametrize(("path", "named"), [
    ("/service/GraniteServiceVersion20100801/operation/FlyToTheMoon", "FlyToTheMoon"),
    ("/service/Logs_20140328/operation/ListMetrics", "Logs_20140328"),
    ("/operation/ListMetrics", "/operation/ListMetrics"),
])
def test_a_cbor_path_the_model_does_not_have_is_an_unknown_operation(path: str, named: str) -> None:
    request = HttpRequest("POST", path, [], {"smithy-protocol": "rpc-v2-cbor"}, b"\xa0")
    with pytest.raises(WireError) as caught:
        rpc_cbor.operation_name(MODELS["cloudwatch"], request)
    assert caught.value.code == "UnknownOperationException"
    assert named in caught.value.message


def test_a_cbor_path_under_a_prefix_still_names_its_operation() -> None:
    request = HttpRequest("POST", "/cw/service/GraniteServiceVersion20100801/operation/ListMetrics", [], {}, b"")
    assert rpc_cbor.operation_name(MODELS["cloudwatch"], request) == "ListMetrics"


def test_a_query_form_without_an_action_or_with_an_unknown_one_is_refused() -> None:
    with pytest.raises(WireError) as caught:
        query.operation_name([("Version", "2011-06-15")])
    assert caught.value.code == "MissingAction"
    with pytest.raises(WireError) as caught:
        query.operation_name({"Action": "FlyToTheMoon"}, MODELS["sts"])
    assert caught.value.code == "InvalidAction" and "FlyToTheMoon" in caught.value.message
    assert query.operation_name({"Action": "FlyToTheMoon"}) == "FlyToTheMoon"  # no model: the endpoint decides


# --------------------------------------------------------------------------------------------------
# Bodies that are not what they claim


LIST_JOBS = MODELS["sagemaker"].operation_model("ListTrainingJobs")
LIST_METRICS = MODELS["cloudwatch"].operation_model("ListMetrics")
GET_DATA = MODELS["cloudwatch"].operation_model("GetMetricData")


@pytest.mark.parametrize(("body", "says"), [
    (b"{nope", "not JSON"),
    (b"\xff\xfe\x00", "not JSON"),
    (b"[1, 2]", "array"),
    (b'{"MaxResults": "ten"}', "MaxResults"),
    (b'{"MaxResults": true}', "MaxResults"),
    (b'{"CreationTimeAfter": "yesterday-ish"}', "CreationTimeAfter"),
    (b'{"CreationTimeAfter": {"at": 1}}', "CreationTimeAfter"),
    (b'{"NameContains": 5}', "NameContains"),
    (b'{"NameContains": ["a"]}', "NameContains"),
    (b"[" * 100_000, "not JSON"),
])
def test_a_json_body_that_is_not_the_operations_input_is_a_serialization_error(body: bytes, says: str) -> None:
    with pytest.raises(WireError) as caught:
        json_rpc.parse_request(LIST_JOBS, json_request("SageMaker.ListTrainingJobs", body))
    assert (caught.value.code, caught.value.status) == ("SerializationException", 400)
    assert says in caught.value.message


def test_a_json_body_reads_types_by_the_model_and_keeps_unknown_members() -> None:
    body = json.dumps({"MaxResults": 5.0, "CreationTimeAfter": "2026-01-02T03:04:05.5+01:00",
                       "CreationTimeBefore": 1767323045, "NameContains": None, "NewerMember": {"a": [1]}}).encode()
    params = json_rpc.parse_request(LIST_JOBS, json_request("SageMaker.ListTrainingJobs", body))
    assert params == {"MaxResults": 5, "CreationTimeAfter": dt.datetime(2026, 1, 2, 2, 4, 5, 500000, dt.timezone.utc),
                      "CreationTimeBefore": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
                      "NewerMember": {"a": [1]}}
    assert type(params["MaxResults"]) is int
    assert params["CreationTimeAfter"].tzinfo is dt.timezone.utc


@pytest.mark.parametrize("codec", [json_rpc, rpc_cbor])
def test_an_empty_body_is_no_parameters(codec: Any) -> None:
    request = HttpRequest("POST", "/", [], {}, b"")
    operation = LIST_JOBS if codec is json_rpc else LIST_METRICS
    assert codec.parse_request(operation, request) == {}
    assert codec.parse_request(operation, HttpRequest("POST", "/", [], {}, io.BytesIO(b""))) == {}


def cbor_request(body: bytes) -> HttpRequest:
    return HttpRequest("POST", "/service/GraniteServiceVersion20100801/operation/ListMetrics", [],
                       {"smithy-protocol": "rpc-v2-cbor", "content-type": "application/cbor"}, body)


@pytest.mark.parametrize(("body", "says"), [
    (b"\xff\xff", "not CBOR"),
    (b"\xa1", "not CBOR"),
    (b"\x5b\xff\xff\xff\xff\xff\xff\xff\xff", "not CBOR"),  # a byte string of 2**64-1 bytes, announced
    (b"\x9f" * 5000, "not CBOR"),
    (cbor2.dumps({"Namespace": "a"}) + b"\x00", "1 bytes more"),
    (cbor2.dumps([1, 2]), "not a map"),
    (cbor2.dumps({"Namespace": b"bytes"}), "Namespace"),
    (cbor2.dumps({"Dimensions": {"Name": "a"}}), "Dimensions"),
    (cbor2.dumps({"Dimensions": [{"Name": 5}]}), "Dimensions[0].Name"),
])
def test_a_cbor_body_that_is_not_the_operations_input_is_a_serialization_error(body: bytes, says: str) -> None:
    with pytest.raises(WireError) as caught:
        rpc_cbor.parse_request(LIST_METRICS, cbor_request(body))
    assert caught.value.code == "SerializationException"
    assert says in caught.value.message


def test_a_cbor_body_takes_epoch_numbers_for_timestamps_and_drops_undefined() -> None:
    body = cbor2.dumps({"StartTime": 1767323045, "EndTime": cbor2.CBORTag(1, 1767323045.25),
                        "MaxDatapoints": cbor2.undefined, "MetricDataQueries": []})
    params = rpc_cbor.parse_request(GET_DATA, cbor_request(body))
    assert params == {"StartTime": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
                      "EndTime": dt.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=dt.timezone.utc),
                      "MetricDataQueries": []}


@pytest.mark.parametrize(("pairs", "says"), [
    ([("MaxItems", "ten")], "MaxItems"),
    ([("MaxItems", "1_000")], "MaxItems"),
    ([("PathPrefix.member.1", "x")], "PathPrefix"),
])
def test_a_query_value_not_of_its_members_type_is_a_validation_error(pairs: list[tuple[str, str]], says: str) -> None:
    with pytest.raises(WireError) as caught:
        query.parse_request(MODELS["iam"].operation_model("ListRoles"), pairs)
    assert caught.value.code == "ValidationError"
    assert says in caught.value.message


@pytest.mark.parametrize(("name", "text"), [("ScanBy", None), ("StartTime", "last tuesday-ish"),
                                            ("MaxDatapoints", "1.5")])
def test_a_query_scalar_that_cannot_be_read_is_a_validation_error(name: str, text: str | None) -> None:
    pairs = [("MetricDataQueries", ""), ("StartTime", "2026-01-01T00:00:00Z"), ("EndTime", "2026-01-02T00:00:00Z")]
    if text is None:
        pairs.append((f"{name}.Sub", "x"))
    else:
        pairs = [(k, v) for k, v in pairs if k != name] + [(name, text)]
    with pytest.raises(WireError) as caught:
        query.parse_request(GET_DATA, pairs)
    assert caught.value.code == "ValidationError" and name in caught.value.message


def test_a_query_form_is_read_from_a_post_body_and_from_a_get_query_string() -> None:
    body = urlencode({"Action": "GetRole", "Version": "2010-05-08", "RoleName": "a b+c&d"}).encode()
    post = HttpRequest("POST", "/", [], {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}, body)
    assert query.read_form(post) == [("Action", "GetRole"), ("Version", "2010-05-08"), ("RoleName", "a b+c&d")]
    get = HttpRequest("GET", "/", [("Action", "GetRole"), ("RoleName", "r")], {}, b"")
    assert query.read_form(get) == [("Action", "GetRole"), ("RoleName", "r")]
    assert query.parse_request(MODELS["iam"].operation_model("GetRole"), query.read_form(get)) == {"RoleName": "r"}
    json_post = HttpRequest("POST", "/", [], {"content-type": "application/json"}, b'{"Action": "x"}')
    assert query.read_form(json_post) == []


def test_a_query_form_that_is_not_utf8_is_malformed() -> None:
    bad = HttpRequest("POST", "/", [], {"content-type": "application/x-www-form-urlencoded"}, b"RoleName=%ff%fe")
    with pytest.raises(WireError) as caught:
        query.read_form(bad)
    assert caught.value.code == "MalformedQueryString"


def test_an_empty_query_list_reads_as_an_empty_list_and_writes_as_an_empty_element() -> None:
    put = MODELS["cloudwatch"].operation_model("PutMetricAlarm")
    request = botocore_request(QUERY, put, {"AlarmName": "a", "EvaluationPeriods": 1, "ComparisonOperator":
                                            "GreaterThanThreshold", "AlarmActions": []})
    assert query.parse_request(put, query.read_form(request))["AlarmActions"] == []
    listed = MODELS["iam"].operation_model("ListRoles")
    response = query.serialize_response(listed, {"Roles": [], "IsTruncated": False})
    assert b"<Roles></Roles>" in body_of(response)
    assert botocore_reads(QUERY, response, listed.output_shape)["Roles"] == []


# --------------------------------------------------------------------------------------------------
# What the real models do not exercise: locationName, flattened, timestampFormat, special floats


def synthetic(protocol: str) -> ServiceModel:
    """A model with the serialization traits none of the five services uses in these shapes."""
    shapes: dict[str, Any] = {
        "Str": {"type": "string"}, "Num": {"type": "double"}, "Data": {"type": "blob"},
        "Iso": {"type": "timestamp", "timestampFormat": "iso8601"},
        "Rfc": {"type": "timestamp", "timestampFormat": "rfc822"},
        "Epoch": {"type": "timestamp"},
        "FlatNames": {"type": "list", "member": {"shape": "Str", "locationName": "Name"}, "flattened": True},
        "FlatPlain": {"type": "list", "member": {"shape": "Str"}, "flattened": True},
        "Items": {"type": "list", "member": {"shape": "Inner", "locationName": "item"}},
        "FlatAttrs": {"type": "map", "key": {"shape": "Str", "locationName": "K"},
                      "value": {"shape": "Str", "locationName": "V"}, "flattened": True},
        "Tags": {"type": "map", "key": {"shape": "Str", "locationName": "TagKey"},
                 "value": {"shape": "Inner", "locationName": "TagValue"}},
        "Inner": {"type": "structure", "members": {"Label": {"shape": "Str", "locationName": "label"},
                                                   "Size": {"shape": "Num"}}},
        "Body": {"type": "structure", "members": {
            "Renamed": {"shape": "Str", "locationName": "renamed_member"},
            "Names": {"shape": "FlatNames"}, "Plain": {"shape": "FlatPlain"}, "Items": {"shape": "Items"},
            "Attrs": {"shape": "FlatAttrs"}, "Tags": {"shape": "Tags"}, "Data": {"shape": "Data"},
            "IsoAt": {"shape": "Iso"}, "RfcAt": {"shape": "Rfc"}, "At": {"shape": "Epoch"},
            "Numbers": {"shape": "Nums"}, "Tree": {"shape": "Tree"}}},
        "Tree": {"type": "structure", "members": {"Child": {"shape": "Tree"}, "Label": {"shape": "Str"}}},
        "Nums": {"type": "list", "member": {"shape": "Num"}},
    }
    return ServiceModel({
        "metadata": {"protocol": protocol, "protocols": [protocol], "apiVersion": "2020-01-01",
                     "targetPrefix": "Synthetic_20200101", "jsonVersion": "1.0", "endpointPrefix": "synthetic",
                     "serviceId": "Synthetic", "signatureVersion": "v4",
                     "xmlNamespace": "https://synthetic.example/doc/2020-01-01/"},
        "operations": {"Do": {"name": "Do", "http": {"method": "POST", "requestUri": "/"},
                              "input": {"shape": "Body"}, "output": {"shape": "Body", "resultWrapper": "DoResult"}}},
        "shapes": shapes}, service_name="synthetic")


SYNTHETIC = {
    "Renamed": "r", "Names": ["n1", "n2"], "Plain": ["p1", "p2"],
    "Items": [{"Label": "i1", "Size": 1.5}, {"Label": "i2", "Size": -2.25}],
    "Attrs": {"a": "1", "b": "2"}, "Tags": {"t": {"Label": "x", "Size": 3.0}},
    "Data": b"\x00\x01binary\xff", "IsoAt": BASE.replace(microsecond=123456), "RfcAt": BASE,
    "At": BASE.replace(microsecond=5), "Numbers": [1.0, 0.1],
}


@pytest.mark.parametrize("protocol", [JSON, CBOR, QUERY])
def test_location_names_flattening_and_timestamp_formats_round_trip(protocol: str) -> None:
    operation = synthetic(protocol).operation_model("Do")
    request = botocore_request(protocol, operation, SYNTHETIC)
    assert_same(read_request(protocol, operation, request), SYNTHETIC, utc=True)
    response = CODECS[protocol].serialize_response(operation, SYNTHETIC)
    parsed = botocore_reads(protocol, response, operation.output_shape)
    parsed.pop("ResponseMetadata")
    assert_same(parsed, SYNTHETIC)


def test_the_synthetic_models_traits_show_on_the_wire() -> None:
    operation = synthetic(QUERY).operation_model("Do")
    form = dict(query.read_form(botocore_request(QUERY, operation, SYNTHETIC)))
    assert {"Name.1", "Plain.1", "Items.item.1.label", "Attrs.1.K", "Tags.entry.1.TagKey",
            "renamed_member"} <= set(form)
    body = query.serialize_response(operation, SYNTHETIC).body
    assert isinstance(body, bytes)
    assert b"<Name>n1</Name><Name>n2</Name>" in body and b"<Attrs><K>a</K><V>1</V></Attrs>" in body
    assert b"<RfcAt>Fri, 04 Dec 2026 05:06:07 GMT</RfcAt>" in body
    as_json = json.loads(body_of(json_rpc.serialize_response(synthetic(JSON).operation_model("Do"), SYNTHETIC)))
    assert as_json["renamed_member"] == "r" and as_json["IsoAt"] == "2026-12-04T05:06:07.123456Z"
    assert as_json["Items"][0] == {"label": "i1", "Size": 1.5}


@pytest.mark.parametrize("protocol", [JSON, CBOR, QUERY])
def test_nan_and_infinities_round_trip(protocol: str) -> None:
    operation = synthetic(protocol).operation_model("Do")
    params = {"Numbers": [math.nan, math.inf, -math.inf]}
    read = read_request(protocol, operation, botocore_request(protocol, operation, params))
    assert_same(read, params)
    parsed = botocore_reads(protocol, CODECS[protocol].serialize_response(operation, params), operation.output_shape)
    if protocol == JSON:  # awsJson writes them as text, and botocore's JSON parser hands the text on
        assert parsed["Numbers"] == ["NaN", "Infinity", "-Infinity"]
    else:
        assert_same(parsed["Numbers"], params["Numbers"])


def test_text_xml_cannot_hold_is_replaced_and_carriage_returns_survive() -> None:
    operation = synthetic(QUERY).operation_model("Do")
    response = query.serialize_response(operation, {"Renamed": "a\x00b\x1bc\r\nd\ud800"})
    parsed = botocore_reads(QUERY, response, operation.output_shape)
    assert parsed["Renamed"] == "a\ufffdb\ufffdc\r\nd\ufffd"


def test_json_answers_name_their_json_version_and_request_id() -> None:
    cloudwatch = json_rpc.serialize_response(LIST_METRICS, {})
    sagemaker = json_rpc.serialize_response(LIST_JOBS, {"TrainingJobSummaries": []})
    assert cloudwatch.headers["content-type"] == "application/x-amz-json-1.0"
    assert sagemaker.headers["content-type"] == "application/x-amz-json-1.1"
    parsed = botocore_reads(JSON, sagemaker, LIST_JOBS.output_shape)
    assert parsed["ResponseMetadata"]["RequestId"] == sagemaker.headers["x-amzn-requestid"]
    cbor = rpc_cbor.serialize_response(LIST_METRICS, {})
    assert cbor.headers["smithy-protocol"] == "rpc-v2-cbor" and cbor.body == b"\xa0"
    assert botocore_reads(CBOR, cbor, LIST_METRICS.output_shape)["ResponseMetadata"]["RequestId"]


def test_a_query_answer_has_its_result_wrapper_and_request_id() -> None:
    operation = MODELS["sts"].operation_model("GetCallerIdentity")
    response = query.serialize_response(operation, {"Account": "123456789012", "Arn": "arn:aws:iam::1:user/u",
                                                    "UserId": "AID", "ResponseMetadata": {"RequestId": "old"}})
    assert isinstance(response.body, bytes)
    root = ET.fromstring(response.body)
    ns = "{https://sts.amazonaws.com/doc/2011-06-15/}"
    assert root.tag == f"{ns}GetCallerIdentityResponse"
    assert [child.tag for child in root] == [f"{ns}GetCallerIdentityResult", f"{ns}ResponseMetadata"]
    assert root.findtext(f"{ns}GetCallerIdentityResult/{ns}Account") == "123456789012"
    parsed = botocore_reads(QUERY, response, operation.output_shape)
    assert parsed["ResponseMetadata"]["RequestId"] == response.headers["x-amzn-requestid"] != "old"


def test_base64_of_a_json_blob_is_checked() -> None:
    operation = synthetic(JSON).operation_model("Do")
    good = json_rpc.parse_request(operation, json_request("Synthetic_20200101.Do", b'{"Data": "AAE="}'))
    assert good == {"Data": b"\x00\x01"}
    with pytest.raises(WireError) as caught:
        json_rpc.parse_request(operation, json_request("Synthetic_20200101.Do", b'{"Data": "not base64!"}'))
    assert caught.value.code == "SerializationException" and "Data" in caught.value.message


def test_a_recursive_shape_nested_without_end_is_refused_not_a_crash() -> None:
    deep = 5000
    form = [("Tree." + "Child." * deep + "Label", "x")]
    with pytest.raises(WireError) as caught:
        query.parse_request(synthetic(QUERY).operation_model("Do"), form)
    assert caught.value.code == "ValidationError"
    body = ('{"Tree": ' + '{"Child": ' * deep + "{}" + "}" * deep + "}").encode()
    with pytest.raises(WireError) as caught:
        json_rpc.parse_request(synthetic(JSON).operation_model("Do"), json_request("Synthetic_20200101.Do", body))
    assert caught.value.code == "SerializationException"
    shallow = query.parse_request(synthetic(QUERY).operation_model("Do"), [("Tree.Child.Child.Label", "x")])
    assert shallow == {"Tree": {"Child": {"Child": {"Label": "x"}}}}

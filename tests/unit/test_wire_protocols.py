"""The JSON, query and CBOR codecs of `hetero-emu serve` against botocore, the client every user has:
for EVERY operation of the services the server answers in these protocols, a request botocore's own
serializer wrote is read back to the same parameters, and an answer written here is read by
botocore's own parser to the same values. Errors come back as the codes botocore raises."""

from __future__ import annotations

import datetime as dt
from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser
from botocore.serialize import create_serializer

from emulator.aws.wire import HttpRequest, WireError, json_rpc, query, rpc_cbor

SESSION = botocore.session.get_session()
STAMP = dt.datetime(2026, 12, 4, 5, 6, 7, tzinfo=dt.timezone.utc)
CASES = [("sagemaker", "json"), ("logs", "json"), ("cloudwatch", "json"), ("cloudwatch", "smithy-rpc-v2-cbor"),
         ("cloudwatch", "query"), ("sts", "query"), ("iam", "query")]
CODECS: dict[str, Any] = {"json": json_rpc, "query": query, "smithy-rpc-v2-cbor": rpc_cbor}


def example(shape: Any, depth: int = 0) -> Any:
    """A value of `shape` botocore's serializer accepts, every member filled down to a few levels
    (None below that: such members are left out, so no empty structure stands for one)."""
    kind = shape.type_name
    if kind == "structure":
        if depth > 3:
            return None
        members = {name: example(member, depth + 1) for name, member in shape.members.items()
                   if not member.serialization.get("eventstream")}
        members = {k: v for k, v in members.items() if v is not None}
        if getattr(shape, "is_tagged_union", False):  # exactly one member set
            members = dict(list(members.items())[:1])
        return members or None
    if kind == "list":
        item = example(shape.member, depth + 1)
        return None if item is None else [item, item]
    if kind == "map":
        value = example(shape.value, depth + 1)
        return None if value is None else {"k1": value}
    if kind == "string":
        return shape.enum[0] if shape.enum else "text-" + shape.name[:12]
    if kind in ("integer", "long"):
        return 7
    if kind in ("float", "double"):
        return 2.5
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return STAMP
    if kind == "blob":
        return b"\x00bytes\xff"
    raise AssertionError(kind)


def operations(service: str) -> list[str]:
    return sorted(SESSION.get_service_model(service).operation_names)


def model_for(service: str, protocol: str) -> Any:
    model = SESSION.get_service_model(service)
    model.metadata["protocol"] = protocol  # the service's other protocols, as a client that picks one
    return model


def as_server_request(serialized: dict[str, Any]) -> HttpRequest:
    from urllib.parse import urlsplit

    body = serialized["body"]
    if isinstance(body, dict):  # the query serializer leaves the form as a dict
        from urllib.parse import urlencode

        body = urlencode(body).encode()
        serialized["headers"]["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8"
    query_pairs = list(serialized.get("query_string", {}).items()) if isinstance(
        serialized.get("query_string"), dict) else []
    return HttpRequest(method=serialized["method"], path=urlsplit(serialized["url_path"]).path, query=query_pairs,
                       headers={k.lower(): v.decode() if isinstance(v, bytes) else v
                                for k, v in serialized["headers"].items()},
                       body=body if isinstance(body, bytes) else (body or "").encode())


def normalised(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.timezone.utc).replace(microsecond=0)
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def read_request(codec: Any, operation: Any, request: HttpRequest) -> dict[str, Any]:
    if codec is query:
        form = query.read_form(request)
        assert query.operation_name(dict(form)) == operation.name
        return dict(query.parse_request(operation, form))
    assert codec.operation_name(operation.service_model, request) == operation.name
    return dict(codec.parse_request(operation, request))


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_every_operations_request_reads_back_to_its_parameters(service: str, protocol: str) -> None:
    model = model_for(service, protocol)
    serializer = create_serializer(protocol, include_validation=False)
    checked = 0
    for name in operations(service):
        operation = model.operation_model(name)
        if operation.input_shape is None:
            continue
        params = example(operation.input_shape) or {}
        serialized = serializer.serialize_to_request(params, operation)
        read = read_request(CODECS[protocol], operation, as_server_request(serialized))
        assert normalised(read) == normalised(params), name
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize(("service", "protocol"), CASES)
def test_every_operations_answer_is_read_by_botocore_as_written(service: str, protocol: str) -> None:
    model = model_for(service, protocol)
    parser = create_parser(protocol)
    codec = CODECS[protocol]
    for name in operations(service):
        operation = model.operation_model(name)
        if operation.output_shape is None or operation.has_event_stream_output:
            continue
        output = example(operation.output_shape) or {}
        response = codec.serialize_response(operation, output)
        parsed = parser.parse({"status_code": response.status, "headers": response.headers, "body": response.body},
                              operation.output_shape)
        assert normalised(parsed) == normalised(output), name


@pytest.mark.parametrize(("service", "protocol", "code"), [
    ("sagemaker", "json", "ResourceNotFound"), ("logs", "json", "ResourceNotFoundException"),
    ("cloudwatch", "smithy-rpc-v2-cbor", "InvalidParameterValueException"), ("sts", "query", "InvalidAction"),
    ("iam", "query", "NoSuchEntity")])
def test_errors_are_read_by_botocore_with_their_code_and_message(service: str, protocol: str, code: str) -> None:
    model = model_for(service, protocol)
    response = CODECS[protocol].serialize_error(model, code, "it went wrong", 400)
    operation = model.operation_model(operations(service)[0])
    parsed = create_parser(protocol).parse(
        {"status_code": response.status, "headers": response.headers, "body": response.body}, operation.output_shape)
    assert parsed["Error"]["Code"] == code
    assert parsed["Error"]["Message"] == "it went wrong"


def test_a_body_that_is_not_json_or_cbor_is_a_serialization_error() -> None:
    sagemaker = SESSION.get_service_model("sagemaker")
    bad = HttpRequest("POST", "/", [], {"x-amz-target": "SageMaker.ListTrainingJobs"}, b"{nope")
    with pytest.raises(WireError) as caught:
        json_rpc.parse_request(sagemaker.operation_model("ListTrainingJobs"), bad)
    assert caught.value.code == "SerializationException"
    cloudwatch = SESSION.get_service_model("cloudwatch")
    garbage = HttpRequest("POST", "/service/GraniteServiceVersion20100801/operation/ListMetrics", [],
                          {"smithy-protocol": "rpc-v2-cbor"}, b"\xff\xff")
    with pytest.raises(WireError) as caught:
        rpc_cbor.parse_request(cloudwatch.operation_model("ListMetrics"), garbage)
    assert caught.value.code == "SerializationException"


def test_a_target_of_another_service_names_no_operation() -> None:
    sagemaker = SESSION.get_service_model("sagemaker")
    with pytest.raises(WireError) as caught:
        json_rpc.operation_name(sagemaker, HttpRequest("POST", "/", [], {"x-amz-target": "Logs_20140328.GetLogEvents"}))
    assert caught.value.code == "UnknownOperationException" and "Logs_20140328.GetLogEvents" in caught.value.message

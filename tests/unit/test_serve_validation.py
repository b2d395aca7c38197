"""Every served operation's input checked against its botocore model (emulator/aws/validation.py): the
issue's bad values answered by a real server in each service's words, the wording of nested members,
and a property test over every served operation's input shape, through the endpoint in process and
through a real server, that never sees a 5xx, an answer botocore cannot parse, or a hang."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import requests
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import create_request_object, prepare_request_dict
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from botocore.model import OperationModel, Shape
from botocore.parsers import create_parser
from botocore.serialize import create_serializer
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st
from serving import Server, running_server
from test_wire_json_query_cbor import server_request

from emulator.aws import validation
from emulator.aws.endpoint import Endpoint
from emulator.aws.logs import GROUP
from emulator.aws.wire import HttpResponse
from emulator.jobspec.request import HostPaths
from emulator.sagemaker.local import local_aws, services

SESSION = botocore.session.get_session()
SETTINGS = settings(deadline=None, database=None,  # no .hypothesis/ folder in the repository
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])
# No answer may take longer: validation is microseconds, every handler milliseconds.
ANSWER_WITHIN = 10.0
# Where every generated CreateTrainingJob writes its output: a bucket that is a file in the S3 root, so
# no job can pass the rules and start a driver, whatever else the example holds.
BLOCKED_OUTPUT = "s3://blocked-bucket/out"
# Each service's protocols as served: CloudWatch in all three of its own.
PROTOCOLS = {"sagemaker": ("json",), "logs": ("json",), "cloudwatch": ("json", "smithy-rpc-v2-cbor", "query"),
             "sts": ("query",), "iam": ("query",), "s3": ("rest-xml",)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("serve")
    (folder / "s3").mkdir()
    (folder / "s3" / "blocked-bucket").write_text("a file where a bucket's folder would be\n")
    with running_server(folder) as running:
        yield running
        assert not list((running.state_dir / "drivers").glob("*.json")), "a generated request started a job"


def client(server: Server, service: str) -> Any:
    """A boto3 client that sends what it is given (its own parameter checks off), as any SDK may."""
    session = boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name=server.region)
    return session.client(service, endpoint_url=server.url,  # type: ignore[call-overload]
                          config=Config(retries={"max_attempts": 1}, parameter_validation=False))


def error_of(call: Any, **params: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    response = caught.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return dict(response["Error"])


def enum_of(service: str, shape: str) -> str:
    return ", ".join(sorted(SESSION.get_service_model(service).shape_for(shape).metadata["enum"]))


# --------------------------------------------------------------------------------------------------
# The bad values, over HTTP


def test_a_garbage_next_token_is_the_services_400_not_a_500(server: Server) -> None:
    sagemaker = client(server, "sagemaker")
    listed = error_of(sagemaker.list_training_jobs, NextToken="garbage!!")
    assert listed["Code"] == "ValidationException"
    assert listed["Message"].startswith('Invalid pagination token because "garbage!!"')
    streams = error_of(client(server, "logs").describe_log_streams, logGroupName=GROUP, nextToken="garbage!!")
    assert streams == {"Code": "InvalidParameterException", "Message": "The specified nextToken is invalid."}
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="tokens", CreateBucketConfiguration={"LocationConstraint": server.region})
    objects = error_of(s3.list_objects_v2, Bucket="tokens", ContinuationToken="garbage!!")
    assert objects["Code"] == "InvalidArgument"


@pytest.mark.parametrize(("params", "says"), [
    ({"MaxResults": -5}, "Value '-5' at 'maxResults' failed to satisfy constraint: "
                         "Member must have value greater than or equal to 1"),
    ({"MaxResults": 10 ** 20}, "Value '100000000000000000000' at 'maxResults' failed to satisfy constraint: "
                               "Member must have value less than or equal to 100"),
    ({"StatusEquals": "Bogus"}, "Value 'Bogus' at 'statusEquals' failed to satisfy constraint: Member must "
                                f"satisfy enum value set: [{enum_of('sagemaker', 'TrainingJobStatus')}]"),
])
def test_list_training_jobs_bad_values_are_validation_exceptions(server: Server, params: dict[str, Any],
                                                                 says: str) -> None:
    error = error_of(client(server, "sagemaker").list_training_jobs, **params)
    assert error == {"Code": "ValidationException", "Message": f"1 validation error detected: {says}"}


def test_every_problem_of_a_request_is_in_one_answer(server: Server) -> None:
    error = error_of(client(server, "sagemaker").list_training_jobs, MaxResults=0, StatusEquals="Bogus",
                     SortOrder="Sideways")
    assert error["Message"].startswith("3 validation errors detected: Value '0' at 'maxResults'")
    assert error["Message"].count("; Value '") == 2


def test_a_volume_no_int32_holds_is_refused(server: Server) -> None:
    error = error_of(client(server, "sagemaker").create_training_job, TrainingJobName="huge-volume",
                     RoleArn="arn:aws:iam::000000000000:role/x", OutputDataConfig={"S3OutputPath": "s3://b/o"},
                     ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10 ** 12})
    assert error["Code"] == "ValidationException"
    assert ("Value '1000000000000' at 'resourceConfig.volumeSizeInGB' failed to satisfy constraint: "
            "Member must have value less than or equal to 2147483647") in error["Message"]


def test_cloudwatch_logs_answers_invalid_parameter_exception(server: Server) -> None:
    error = error_of(client(server, "logs").get_log_events, logGroupName=GROUP, logStreamName="job/algo-1-1",
                     limit=-1)
    assert error == {"Code": "InvalidParameterException", "Message": "1 validation error detected: Value '-1' at "
                     "'limit' failed to satisfy constraint: Member must have value greater than or equal to 1"}


def test_the_query_services_answer_validation_error(server: Server) -> None:
    error = error_of(client(server, "iam").get_role, RoleName="")
    assert error["Code"] == "ValidationError"
    assert "Value '' at 'roleName' failed to satisfy constraint: Member must have length greater than or equal to 1" \
        in error["Message"]
    metrics = error_of(client(server, "cloudwatch").get_metric_statistics, Namespace="/aws/sagemaker/TrainingJobs",
                       MetricName="loss", StartTime=dt.datetime(2026, 1, 1), EndTime=dt.datetime(2026, 1, 2),
                       Period=0, Statistics=["Average"])
    assert metrics["Code"] == "ValidationError"
    assert "at 'period' failed to satisfy constraint: Member must have value greater than or equal to 1" \
        in metrics["Message"]


def test_s3_checks_only_what_s3_checks(server: Server) -> None:
    s3 = client(server, "s3")
    s3.create_bucket(Bucket="widths", CreateBucketConfiguration={"LocationConstraint": server.region})
    error = error_of(s3.list_objects_v2, Bucket="widths", MaxKeys=2 ** 40)
    assert (error["Code"], error["Message"]) == ("InvalidArgument", "Argument maxKeys must be an integer between "
                                                 "-2147483648 and 2147483647")


# --------------------------------------------------------------------------------------------------
# The wording, in process


def operation(service: str, name: str) -> OperationModel:
    return SESSION.get_service_model(service).operation_model(name)


def test_list_elements_and_nested_members_are_named_as_the_services_name_them() -> None:
    found = validation.problems(operation("sagemaker", "CreateTrainingJob"), {
        "TrainingJobName": "ok", "RoleArn": "arn:aws:iam::000000000000:role/x",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/d"}}},
                            {"DataSource": {}}]})
    assert found == [
        "Value null at 'inputDataConfig.1.member.dataSource.s3DataSource.s3DataType' failed to satisfy "
        "constraint: Member must not be null",
        "Value null at 'inputDataConfig.2.member.channelName' failed to satisfy constraint: Member must not be null",
    ]


def test_a_maps_values_are_checked_as_the_map() -> None:
    found = validation.problems(operation("sagemaker", "CreateTrainingJob"), {
        "TrainingJobName": "ok", "RoleArn": "arn:aws:iam::000000000000:role/x",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"}, "HyperParameters": {"epochs": "1", "long": "x" * 2501}})
    assert len(found) == 1
    assert found[0].startswith("Value '{epochs=1, long=xxx")
    assert found[0].endswith("' at 'hyperParameters' failed to satisfy constraint: Map value must satisfy "
                             "constraint: [Member must have length less than or equal to 2500, Member must have "
                             "length greater than or equal to 0, Member must satisfy regular expression pattern: .*]")


def test_a_service_that_checks_its_own_s3_uris_is_left_them() -> None:
    params = {"TrainingJobName": "ok", "RoleArn": "arn:aws:iam::000000000000:role/x",
              "OutputDataConfig": {"S3OutputPath": "/srv/allowed/out"}}
    create = operation("sagemaker", "CreateTrainingJob")
    assert "at 'outputDataConfig.s3OutputPath'" in validation.problems(create, params)[0]
    assert validation.problems(create, params, frozenset({"S3Uri"})) == []


# --------------------------------------------------------------------------------------------------
# Every served operation's input, generated from its shape

ODD_TEXT = ["", " ", "../../etc/passwd", "file:///etc/shadow", "/etc", "s3://b/k", "https://b.s3.amazonaws.com/k",
            "\x00", "\u202e", "é✓", "a" * 3000, "%00%2e%2e", "${jndi:x}", "{}", "null", "-1", "1e999", "\r\n"]
ODD_NUMBERS = [-1, 0, 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 63, 10 ** 20, -(10 ** 20)]
WRONG_TYPES = [None, True, 7, "text", [], {}]


def values(shape: Shape, depth: int = 0, *, xml: bool = False) -> st.SearchStrategy[Any]:
    """Values for `shape`: valid ones (enums, in-range numbers), odd ones (paths, NULs, huge numbers,
    long text), missing members, and now and then a value of another type. `xml`: text without the
    control characters XML 1.0 cannot hold at all, which S3 itself can only echo with EncodingType=url
    (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html#API_ListObjectsV2_RequestSyntax)."""
    if xml and shape.type_name == "string" and not shape.metadata.get("enum"):
        return st.one_of(st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=30),
                         st.sampled_from([text for text in ODD_TEXT if text.isprintable() or text == ""]))
    kind = shape.type_name
    if depth > 4 and kind in ("structure", "list", "map"):
        return st.just({} if kind != "list" else [])
    odd: st.SearchStrategy[Any] = st.sampled_from(WRONG_TYPES)
    if kind == "structure":
        members = {name: values(member, depth + 1, xml=xml) for name, member in shape.members.items()}
        return st.fixed_dictionaries({}, optional=members)
    if kind == "list":
        return st.lists(values(shape.member, depth + 1, xml=xml), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), values(shape.value, depth + 1, xml=xml), max_size=3)
    if kind == "string":
        enum = shape.metadata.get("enum")
        text = st.one_of(st.text(max_size=30), st.sampled_from(ODD_TEXT))
        # A value of another type one time in ten: in a large request, one is enough to make the whole
        # of it a SerializationException, and the members' own checks would seldom be reached.
        return st.one_of(st.sampled_from(enum), text) if enum else st.one_of(*[text] * 9, odd)
    if kind in ("integer", "long"):
        low, high = shape.metadata.get("min", -(2 ** 31)), shape.metadata.get("max", 2 ** 31 - 1)
        return st.one_of(st.integers(low, high), st.sampled_from(ODD_NUMBERS))
    if kind in ("float", "double"):
        return st.floats(allow_nan=True, allow_infinity=True)
    if kind == "boolean":
        return st.booleans()
    if kind == "timestamp":
        return st.datetimes(min_value=dt.datetime(1, 1, 2), timezones=st.just(dt.timezone.utc))
    if kind == "blob":
        return st.binary(max_size=16)
    return odd


def served() -> list[tuple[str, str, str]]:
    aws = local_aws(s3_root=Path("/"), images=None, region="us-west-2", engine="docker", origin="test")
    found = Endpoint(services(aws.training, aws.s3_root, aws.region), aws.region).operations
    return [(service, protocol, name) for service, ops in sorted(found.items()) for name in sorted(ops)
            for protocol in PROTOCOLS[service]]


SERVED = served()


def http_request(protocol: str, model: OperationModel, params: dict[str, Any], endpoint_url: str) -> Any:
    """The request a client would send for `params`, written by botocore's own serializer (its
    parameter checks off: a client in another language checks other things, or nothing); None when
    botocore cannot write such a value at all."""
    try:
        request_dict = create_serializer(protocol, include_validation=False).serialize_to_request(params, model)
    except Exception:  # noqa: BLE001 - a value of another type that no serializer writes
        return None
    if not all(isinstance(value, (str, bytes)) for value in request_dict["headers"].values()):
        return None  # a header of null or a list: no HTTP request carries one
    prepare_request_dict(request_dict, endpoint_url=endpoint_url)
    return create_request_object(request_dict)


def assert_answer_reads(protocol: str, model: OperationModel, response: dict[str, Any]) -> None:
    """No failure of the server's own (a 5xx), but S3's documented 501 for what it does not emulate
    (docs/serve.md: a key-less path can name a bucket operation), and botocore reads the answer."""
    parsed = create_parser(protocol).parse(response, model.output_shape)
    if response["status_code"] == 501 and protocol == "rest-xml":
        assert parsed["Error"]["Code"] == "NotImplemented", response
        return
    assert response["status_code"] < 500, response
    if response["status_code"] >= 300:
        assert parsed["Error"]["Code"], response


def generated(protocol: str, model: OperationModel) -> st.SearchStrategy[dict[str, Any]]:
    def without_output(params: Any) -> Any:
        # Every CreateTrainingJob's output where no job can be written (BLOCKED_OUTPUT).
        if model.name == "CreateTrainingJob" and isinstance(params.get("OutputDataConfig"), dict):
            params["OutputDataConfig"]["S3OutputPath"] = BLOCKED_OUTPUT
        return params
    assert model.input_shape is not None
    return values(model.input_shape, xml=protocol == "rest-xml").map(without_output)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """The endpoint `serve` makes (S3 only), in process, with a state folder and S3 root of its own."""
    folder = tmp_path_factory.mktemp("endpoint")
    (folder / "s3" / "blocked-bucket").parent.mkdir()
    (folder / "s3" / "blocked-bucket").write_text("a file where a bucket's folder would be\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HETERO_EMU_STATE_DIR", str(folder / "state"))
        aws = local_aws(s3_root=folder / "s3", images=None, region="us-west-2", engine="docker", origin="test",
                        host_paths=HostPaths.only())
        yield Endpoint(services(aws.training, aws.s3_root, aws.region), aws.region)
        assert not list((folder / "state" / "drivers").glob("*.json")), "a generated request started a job"


@pytest.mark.parametrize(("service", "protocol", "name"), SERVED, ids=["-".join(case) for case in SERVED])
def test_any_input_to_any_served_operation_gets_an_answer_botocore_reads(endpoint: Endpoint, service: str,
                                                                         protocol: str, name: str) -> None:
    model = endpoint.models[service].operation_model(name)

    @settings(SETTINGS, max_examples=25)
    @given(params=generated(protocol, model))
    def answers(params: dict[str, Any]) -> None:
        prepared = http_request(protocol, model, params, "https://emulator.test")
        assume(prepared is not None)
        started = time.monotonic()
        answer: HttpResponse = endpoint.handle(server_request(prepared.prepare()))
        assert time.monotonic() - started < ANSWER_WITHIN
        body = answer.body if isinstance(answer.body, bytes) else b"".join(answer.body)
        assert_answer_reads(protocol, model, {"status_code": answer.status, "headers": answer.headers,
                                              "body": body})
    answers()


@settings(SETTINGS, max_examples=40)
@given(data=st.data())
def test_any_input_sent_to_a_real_server_gets_an_answer_botocore_reads(server: Server, data: st.DataObject) -> None:
    service, protocol, name = data.draw(st.sampled_from(SERVED))
    model = SESSION.get_service_model(service).operation_model(name)
    params = data.draw(generated(protocol, model))
    request = http_request(protocol, model, params, server.url)
    assume(request is not None)
    signing = model.service_model.signing_name or service
    region = "us-east-1" if service == "iam" else server.region
    signer = S3SigV4Auth if service == "s3" else SigV4Auth
    signer(Credentials("emu", "emu"), signing, region).add_auth(request)
    prepared = request.prepare()
    started = time.monotonic()
    try:
        answer = requests.request(prepared.method, prepared.url, headers=dict(prepared.headers.items()),
                                  data=prepared.body, timeout=ANSWER_WITHIN, allow_redirects=False)
    except ValueError:
        # A header value no HTTP client sends (not Latin-1, leading blanks, CR/LF): requests refuses
        # it before a byte goes out (InvalidHeader, UnicodeEncodeError are ValueErrors); a refused or
        # dropped connection is not one, and fails the test.
        reject()
    assert time.monotonic() - started < ANSWER_WITHIN
    assert_answer_reads(protocol, model, {"status_code": answer.status_code, "headers": dict(answer.headers),
                                          "body": answer.content})



"""Serve AWS API calls locally, inside botocore, for every client of one boto3 session.

botocore emits `before-call.<service>.<Operation>` after it has validated and serialized a call and
before it sends it; a handler that returns `(http_response, parsed_response)` replaces the HTTP
round trip, and botocore goes on exactly as after a real answer: a status >= 300 raises the
client's own modelled exception (`client.exceptions.NoSuchKey`, a `ClientError`) from the parsed
`Error`. (botocore/client.py `BaseClient._make_api_call`.) So the SageMaker SDK, boto3 resources
and the user's own boto3 code keep their own parameter validation, retries and exceptions, and only
the answer comes from here.

The handler gets the serialized request; the operation's parameters as the caller gave them are
copied into the call's `context` at `before-parameter-build`, which botocore emits for the same call
with the same context dict.

A call no service here answers gets a `NotEmulated` error at once: nothing is ever sent to AWS.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Mapping
from typing import Any

from botocore.awsrequest import AWSResponse

# An operation's error answer, which botocore turns into the client's exception (defined with the
# other errors: the jobs layer beneath the AWS services raises it too).
from emulator.errors import ApiError as ApiError  # noqa: E402

PARAMS_KEY = "hetero_emu_params"

# An operation's answer: the parsed response (the shape boto3 returns), or an ApiError.
Operation = Callable[[dict[str, Any]], dict[str, Any]]


class Service:
    """The operations one AWS service answers locally, by botocore operation name."""

    name = ""  # botocore's service name: "sagemaker", "s3", "sts", "logs"
    # Shape names whose model pattern the service checks itself, by a rule of its own, so the
    # endpoint's model check (emulator/aws/validation.py) leaves them to it: SageMaker's `S3Uri`
    # when `serve --allow-host-path` lets a request name a folder under a root given at start.
    own_patterns: frozenset[str] = frozenset()
    # Operations that only read small files of the emulator's own, which `hetero-emu serve` answers on
    # its event loop; each calls `blocking.may_block()` before anything that could wait, and is then
    # run again in a worker thread (emulator/state/blocking.py).
    quick: frozenset[str] = frozenset()

    def operations(self) -> Mapping[str, Operation]:
        raise NotImplementedError


def install(boto_session: Any, services: list[Service]) -> None:
    """Answer every API call of the clients `boto_session` makes from now on with `services`.

    Clients copy the session's event handlers when they are created, so this must run before the
    first client is made (the SageMaker `Session` makes its clients in its constructor)."""
    by_service = {s.name: s.operations() for s in services}
    events = boto_session.events
    events.register("before-parameter-build", _keep_params)
    events.register("before-call", lambda **kw: _answer(by_service, **kw))


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    context[PARAMS_KEY] = dict(params)


def _answer(by_service: Mapping[str, Mapping[str, Operation]], model: Any, context: dict[str, Any],
            **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
    service = model.service_model.service_name
    operation = by_service.get(service, {}).get(model.name)
    try:
        if operation is None:
            raise ApiError("NotEmulated", f"hetero-emu does not emulate {service}:{model.name} (nothing is sent "
                           f"to AWS); answered here: {_known(by_service)}")
        parsed = as_output(operation(dict(context.get(PARAMS_KEY) or {})), model.output_shape)
        status = 200
    except ApiError as err:
        parsed = {"Error": {"Code": err.code, "Message": err.message}}
        status = err.status
    parsed.setdefault("ResponseMetadata", {"HTTPStatusCode": status, "HTTPHeaders": {}, "RetryAttempts": 0})
    return AWSResponse(f"https://{service}.hetero-emu.local/", status, {}, None), parsed


def _known(by_service: Mapping[str, Mapping[str, Operation]]) -> str:
    """`sagemaker` CreateTrainingJob, ...: SageMaker's training and tuning operations by name; S3's
    two dozen operations in full would drown the message."""
    return "; ".join(f"{s} " + (", ".join(sorted(ops)) if len(ops) <= 12 else f"{len(ops)} operations")
                     for s, ops in sorted(by_service.items()))


# Leaf values as_output returns as they are, by their exact type.
_LEAVES = frozenset({str, int, bool, float})


@functools.lru_cache(maxsize=4096)
def _holds_timestamps(shape: Any) -> bool:
    """Whether a timestamp shape is anywhere in `shape` (a botocore shape lives as long as its model,
    and is hashed by identity). A recursive shape is followed once."""
    seen: set[int] = set()
    todo = [shape]
    while todo:
        here = todo.pop()
        if id(here) in seen:
            continue
        seen.add(id(here))
        kind = here.type_name
        if kind == "timestamp":
            return True
        if kind == "structure":
            todo.extend(here.members.values())
        elif kind == "list":
            todo.append(here.member)
        elif kind == "map":
            todo.append(here.value)
    return False


def as_output(value: Any, shape: Any) -> Any:
    """An answer in the types botocore's parser would give: ISO 8601 text (how job.json stores times)
    becomes a timezone-aware datetime where the API model says timestamp; members the model does not
    name are kept (the emulator's own additions to DescribeTrainingJob, such as per-host details)."""
    if shape is None or value is None:
        return value
    kind = shape.type_name
    if kind != "timestamp" and type(value) in _LEAVES:  # most of an answer: nothing to convert, nothing below
        return value
    if not _holds_timestamps(shape):
        # Nothing in it to convert (GetLogEvents' thousands of events): a copy of the top only, as the
        # walk would give, so botocore's `setdefault("ResponseMetadata", ...)` never touches the
        # operation's own dict.
        return dict(value) if type(value) is dict else value
    if kind == "structure" and isinstance(value, dict):
        members = shape.members
        return {k: as_output(v, members.get(k)) for k, v in value.items()}
    if kind == "list" and isinstance(value, list):
        return [as_output(v, shape.member) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: as_output(v, shape.value) for k, v in value.items()}
    if kind == "timestamp" and isinstance(value, str):
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)
    return value

"""One AWS endpoint for every service the emulator answers: an HTTP request in, the answer out.

The operations are the very ones the in-process session answers (`emulator.aws.stub` installs the
same `Service` objects inside botocore); only the transport differs. Here a request is read with its
service's wire protocol (`emulator.aws.wire`), the operation runs, and its answer (or its `ApiError`)
is written back in the same protocol, so botocore, the AWS CLI or any other SDK reads it as AWS's.

Which service a request is for, in the order the clients make it plain:

1. the SigV4 credential scope (`Authorization: AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/...`,
   or `X-Amz-Credential` in a presigned URL): its service is the signing name (`monitoring` is
   CloudWatch);
2. `X-Amz-Target: <targetPrefix>.<Operation>` (the JSON protocol: SageMaker, CloudWatch Logs);
3. `smithy-protocol: rpc-v2-cbor` with `/service/<name>/operation/<op>` (CloudWatch in recent SDKs);
4. a form with `Action` and `Version` (the query protocol: STS, IAM, CloudWatch's older one);
5. anything else is S3 (an anonymous request, or a presigned one).

When the server was given credentials, each request's signature is checked first
(`emulator.aws.sigv4`). A request signed for another region gets the error the service gives in that
case, which botocore's S3 client follows to the right region by itself.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence

import botocore.session
from botocore.model import ServiceModel

from emulator.aws import sigv4, validation
from emulator.aws.s3 import S3
from emulator.aws.stub import ApiError, Operation, Service, as_output
from emulator.aws.wire import HttpRequest, HttpResponse, WireError, json_rpc, query, rest_xml, rpc_cbor
from emulator.state import blocking

log = logging.getLogger(__name__)

# SigV4 signing names that are not the botocore service name.
SIGNING_NAMES = {"monitoring": "cloudwatch"}
# Services without regions: their requests are signed for us-east-1 wherever the client is.
GLOBAL = frozenset({"iam"})
SCOPE = re.compile(r"Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request")
# The protocols whose codecs read a request and name its operation alike (json_rpc, rpc_cbor).
RPC = {"json": json_rpc, "cbor": rpc_cbor}
CBOR_PATH = re.compile(r"^/service/([^/]+)/operation/([^/?]+)$")


class Endpoint:
    """Answers HTTP requests with `services` (the same objects the in-process session uses), in
    `region`. `credentials`: when given, every request must be signed with them."""

    def __init__(self, services: Sequence[Service], region: str, *,
                 credentials: sigv4.Credentials | None = None) -> None:
        self.region = region
        self.credentials = credentials
        self.operations: dict[str, Mapping[str, Operation]] = {s.name: s.operations() for s in services}
        self.own_patterns = {s.name: s.own_patterns for s in services}
        self.quick_operations = {s.name: s.quick for s in services}
        loader = botocore.session.get_session()
        self.models: dict[str, ServiceModel] = {name: loader.get_service_model(name) for name in self.operations}
        self._targets = {m.metadata.get("targetPrefix"): name for name, m in self.models.items()
                         if m.metadata.get("targetPrefix")}
        self._versions = {m.api_version: name for name, m in self.models.items()}
        # The S3 roots' paths (as given and with links resolved, longest first): never in a message.
        roots = {str(p) for s in services if isinstance(s, S3) for p in (s.root, s.root.resolve())}
        self.private_roots = sorted((r.rstrip("/") for r in roots if r.rstrip("/")), key=len, reverse=True)

    # ----------------------------------------------------------------------------------------------

    def handle(self, request: HttpRequest) -> HttpResponse:
        """The answer to one request, never an exception: a request that cannot be read, an operation
        that is not emulated, a wrong signature or a failing operation each get the service's error.
        (Only inside `blocking.forbidden()` may it raise: `WouldBlock`, for the caller to run it again
        where it may wait.)"""
        try:
            service, protocol = self.identify(request)
        except Exception as err:  # noqa: BLE001 - a bug of ours: still an answer, in the commonest shape
            return self.failed(request, err, ("s3", "rest-xml"))
        try:
            if service not in self.models:
                raise WireError("UnknownOperationException" if protocol == "json" else "InvalidAction",
                                f"hetero-emu serve does not emulate the {service!r} service; it answers "
                                f"{', '.join(sorted(self.models))}")
            self.check_signature(request, service)
            return _inert(self._call(service, protocol, request))
        except blocking.WouldBlock:
            raise  # for the server: it runs the request again in a worker thread
        except _S3RegionError as err:
            return self.wrong_s3_region(self.error(service, protocol, err.code, err.message, err.status, request))
        except (ApiError, WireError, sigv4.SignatureError) as err:
            code, message, status = _error_parts(err)
            return self.error(service, protocol, code, message, status, request)
        except Exception as err:  # noqa: BLE001 - a bug of ours: the client gets a 500 in its own shape
            return self.failed(request, err, (service, protocol))

    def failed(self, request: HttpRequest, err: BaseException,
               identified: tuple[str, str] | None = None) -> HttpResponse:
        """The answer to a request the server itself failed on: a 500 in the service's shape whose
        message names only a request ID, and the traceback in the server's log under that ID. The
        exception's text is not sent: it may hold a host path or a piece of another request (the
        services' own 500s say no more: S3's `InternalError` "We encountered an internal error.
        Please try again.", https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)."""
        try:
            service, protocol = identified or self.identify(request)
        except Exception:  # noqa: BLE001 - the request cannot even be told apart: S3's shape
            service, protocol = "s3", "rest-xml"
        # The ID in the form its protocol's codec writes (S3: 16 hex digits; the others: a UUID).
        rid = uuid.uuid4().hex[:16].upper() if protocol == "rest-xml" else str(uuid.uuid4())
        log.error("request %s: %s %s failed", rid, request.method, request.path, exc_info=err)
        code = "InternalError" if protocol == "rest-xml" else "InternalFailure"
        message = f"We encountered an internal error (request ID {rid}; the server's log has the details)."
        return _with_request_id(self.error(service, protocol, code, message, 500, request), rid)

    def too_large(self, request: HttpRequest, limit: int) -> HttpResponse:
        service, protocol = self.identify(request)
        if service == "s3":
            return self.error(service, protocol, "EntityTooLarge", "Your proposed upload exceeds the maximum "
                              f"allowed size ({limit:,} bytes on this server)", 400, request)
        return self.error(service, protocol, "RequestEntityTooLarge", f"The request body exceeds {limit:,} bytes",
                          413, request)

    def headers_too_large(self, request: HttpRequest, limit: int) -> HttpResponse:
        service, protocol = self.identify(request)
        return self.error(service, protocol, "RequestHeaderSectionTooLarge", "Your request header section "
                          f"exceeds the maximum allowed size ({limit:,} bytes on this server)", 400, request)

    def malformed(self, request: HttpRequest, message: str) -> HttpResponse:
        service, protocol = self.identify(request)
        return self.error(service, protocol, "IncompleteBody" if service == "s3" else "SerializationException",
                          message, 400, request)

    # ----------------------------------------------------------------------------------------------

    def quick(self, request: HttpRequest) -> bool:
        """Whether the request is for one of its service's `quick` operations, which the server answers
        on its event loop (emulator/state/blocking.py). Only a body already in memory is looked at; a request
        that cannot be read is not quick (the worker answers it with its error)."""
        if not isinstance(request.body, bytes):
            return False
        try:
            service, protocol = self.identify(request)
            if protocol == "rest-xml" or not self.quick_operations.get(service):
                return False
            return self._operation_name(service, protocol, request)[0] in self.quick_operations[service]
        except Exception:  # noqa: BLE001 - the worker answers it, with the error it deserves
            return False

    def identify(self, request: HttpRequest) -> tuple[str, str]:
        """(service, protocol) of a request; see the module docstring for the order."""
        headers = request.headers
        scope = _scope(request)
        target = headers.get("x-amz-target", "")
        service = SIGNING_NAMES.get(scope[3], scope[3]) if scope else None
        if target:
            service = service or self._targets.get(target.split(".", 1)[0], target.split(".", 1)[0])
            return service, "json"
        if headers.get("smithy-protocol") == "rpc-v2-cbor":
            found = CBOR_PATH.match(request.path)
            named = found.group(1) if found else ""
            return service or self._targets.get(named, named), "cbor"
        try:
            form = dict(query.read_form(request)) if _is_form(request) else {}
        except WireError:
            # A form that cannot be read (not UTF-8) is still a form: the query protocol's error says
            # so when `_call` reads it again. Which query service is unknown without its Action.
            return service or "sts", "query"
        if "Action" in form:
            version = form.get("Version", "")
            return service or self._versions.get(version, f"an API of version {version!r}"), "query"
        if service is None or service == "s3":
            return "s3", "rest-xml"
        return service, _protocol_of(self.models, service)

    def _operation_name(self, service: str, protocol: str, request: HttpRequest) -> tuple[str, list[tuple[str, str]]]:
        """The operation a request names, and for the query protocol its form (read once: it holds the
        operation's name and its parameters)."""
        model = self.models[service]
        if protocol == "rest-xml":
            return rest_xml.operation_name(model, request), []
        if protocol == "query":
            form = query.read_form(request)
            return query.operation_name(dict(form)), form
        return RPC[protocol].operation_name(model, request), []

    def check_signature(self, request: HttpRequest, service: str) -> None:
        scope = _scope(request)
        if self.credentials is not None:
            sigv4.verify(request, self.credentials, family=_family(service))
        if scope is None or service in GLOBAL:
            return
        region = scope[2]
        if region != self.region:
            if service == "s3":
                raise _S3RegionError(region, self.region)
            raise ApiError("InvalidSignatureException", f"Credential should be scoped to a valid region, not "
                           f"'{region}'. This endpoint serves '{self.region}' (hetero-emu serve --region).", 403)

    def _call(self, service: str, protocol: str, request: HttpRequest) -> HttpResponse:
        model = self.models[service]
        bucket = key = None
        if protocol == "rest-xml":
            bucket, key = rest_xml.address(request)
        name, form = self._operation_name(service, protocol, request)
        if name not in model.operation_names:
            raise _unknown(service, protocol, name)
        operation_model = model.operation_model(name)
        handler = self.operations[service].get(name)
        if handler is None:
            raise _not_emulated(service, protocol, name, self.operations[service])
        if protocol == "rest-xml":
            params = rest_xml.parse_request(operation_model, request, bucket, key)
        elif protocol == "query":
            params = query.parse_request(operation_model, form)
        else:
            params = RPC[protocol].parse_request(operation_model, request)
        # The model's constraints, checked before any handler as each service checks them: a value
        # past them is the service's 400, never a handler's surprise (emulator/aws/validation.py).
        found = validation.problems(operation_model, params, self.own_patterns[service])
        if found:
            raise ApiError(*validation.error(service, found))
        answer = as_output(handler(params), operation_model.output_shape)
        # Each codec drops ResponseMetadata; S3's reads its status there (206 for a range, 204 for a delete).
        codec = rest_xml if protocol == "rest-xml" else query if protocol == "query" else RPC[protocol]
        response: HttpResponse = codec.serialize_response(operation_model, answer)
        return response

    def error(self, service: str, protocol: str, code: str, message: str, status: int,
              request: HttpRequest) -> HttpResponse:
        """The service's error answer. Its message names objects as S3 names them (`s3://bucket/key`),
        never by where they lie on this machine: a path under the S3 root, which an operation's
        message may name (a spec's check, the local filesystem's error), is written as its URI."""
        message = self.without_paths(message)
        if protocol == "rest-xml":
            return _inert(rest_xml.serialize_error(code, message, status, resource=request.path,
                                                   method=request.method))
        model = self.models.get(service) or self.models.get("sagemaker")
        assert model is not None
        codec = query if protocol == "query" else RPC[protocol]
        response: HttpResponse = codec.serialize_error(model, code, message, status)
        return _inert(response)

    def without_paths(self, message: str) -> str:
        """`message` with each path under the S3 root written as its s3:// URI, and the root itself
        as "the S3 root" (the spec's own wording, "S3 root PATH (origin)", loses the path)."""
        for root in self.private_roots:
            message = message.replace(f"S3 root {root}", "S3 root").replace(root + "/", "s3://")
            message = message.replace(root, "the S3 root")
        return message

    def wrong_s3_region(self, response: HttpResponse) -> HttpResponse:
        """S3's answer to a request signed for another region names the right one, in a `Region`
        element and the `x-amz-bucket-region` header; botocore's S3 client then signs again for it
        by itself (botocore/utils.py `S3RegionRedirectorv2`)."""
        if isinstance(response.body, bytes):
            response.body = response.body.replace(b"</Message>", f"</Message><Region>{self.region}</Region>".encode())
            response.headers["content-length"] = str(len(response.body))
        response.headers["x-amz-bucket-region"] = self.region
        return response


class _S3RegionError(ApiError):
    def __init__(self, asked: str, served: str) -> None:
        super().__init__("AuthorizationHeaderMalformed", f"The authorization header is malformed; the region "
                         f"'{asked}' is wrong; expecting '{served}'", 400)


def _error_parts(err: Exception) -> tuple[str, str, int]:
    if isinstance(err, ApiError):
        return err.code, err.message, err.status
    if isinstance(err, WireError):
        return err.code, err.message, err.status
    assert isinstance(err, sigv4.SignatureError)
    return err.code, err.message, err.status


def _unknown(service: str, protocol: str, name: str) -> WireError:
    if protocol == "query":
        return WireError("InvalidAction", f"The action {name} is not valid for this web service ({service}).", 400)
    return WireError("UnknownOperationException", f"{service} has no operation {name!r}", 400)


def _not_emulated(service: str, protocol: str, name: str, known: Mapping[str, Operation]) -> WireError:
    message = (f"hetero-emu does not emulate {service}:{name}; it answers {service}'s "
               f"{', '.join(sorted(known))}")
    if protocol == "rest-xml":
        return WireError("NotImplemented", message, 501)
    if protocol == "query":
        return WireError("InvalidAction", message, 400)
    return WireError("UnknownOperationException", message, 400)


def _scope(request: HttpRequest) -> tuple[str, str, str, str] | None:
    """(access key, date, region, service) of a signed request."""
    found = SCOPE.search(request.headers.get("authorization", ""))
    if found:
        return found.group(1), found.group(2), found.group(3), found.group(4)
    for name, value in request.query:
        if name == "X-Amz-Credential":
            parts = value.split("/")
            if len(parts) == 5:
                return parts[0], parts[1], parts[2], parts[3]
    return None


def _is_form(request: HttpRequest) -> bool:
    kind = request.headers.get("content-type", "")
    return (request.method == "POST" and kind.startswith("application/x-www-form-urlencoded")) or any(
        name == "Action" for name, _ in request.query)


def _protocol_of(models: Mapping[str, ServiceModel], service: str) -> str:
    model = models.get(service)
    if model is None:
        return "query"
    return {"rest-xml": "rest-xml", "json": "json", "query": "query"}.get(model.protocol, "json")


def _family(service: str) -> str:
    return {"s3": "s3", "sts": "query", "iam": "query"}.get(service, "json")


# What every answer carries so that a browser never runs what it holds on the server's origin (where
# the live page is): an object stored as text/html or image/svg+xml opened by a presigned URL, or a
# message echoing a key. `sandbox` gives the document an opaque origin with scripts, forms and
# plugins off (https://developer.mozilla.org/docs/Web/HTTP/Headers/Content-Security-Policy/sandbox);
# `nosniff` keeps the browser to the Content-Type sent. SDKs ignore both headers.
INERT_HEADERS = {"content-security-policy": "sandbox", "x-content-type-options": "nosniff"}


def _inert(response: HttpResponse) -> HttpResponse:
    response.headers.update(INERT_HEADERS)
    return response


def _with_request_id(response: HttpResponse, rid: str) -> HttpResponse:
    """`response` naming `rid` as its request ID (header and body) instead of the one its codec made,
    so that the ID in the message is the one botocore reports (ResponseMetadata.RequestId). Both IDs
    have one length, so a body's lengths (Content-Length, CBOR's string heads) stay right."""
    for header in ("x-amzn-requestid", "x-amz-request-id"):
        made = response.headers.get(header)
        if made:
            response.headers[header] = rid
            if isinstance(response.body, bytes):
                response.body = response.body.replace(made.encode(), rid.encode())
    return response

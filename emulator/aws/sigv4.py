"""AWS Signature Version 4, checked on the requests `hetero-emu serve --credentials KEY:SECRET` receives.

A client that signs with the one key pair the server was given gets its answer; any other request gets
the error the real service gives for it, in the code and HTTP status its SDK knows (botocore raises the
client's own `ClientError` with that code). The check follows the AWS reference for signed requests,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html, and S3's own
pages for what is particular to S3 (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html,
https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html):

* the signature in an `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`
  header, or in a presigned URL's query (`X-Amz-Algorithm`, `X-Amz-Credential`, `X-Amz-Date`,
  `X-Amz-Expires`, `X-Amz-SignedHeaders`, `X-Amz-Signature`), whose expiry is checked;
* the canonical request: S3 signs the path exactly as sent, every other service its normalised path
  (no `.`/`..` segments, no empty ones) URI-encoded once more; the query pairs URI-encoded and sorted by
  name, then value; the signed headers with their values trimmed;
* the payload: S3 signs the value of `x-amz-content-sha256` (a hex digest, which must then be the body's,
  `UNSIGNED-PAYLOAD`, or one of the `STREAMING-...` kinds of an aws-chunked body); other services the
  SHA-256 of the body, unless the client declared `x-amz-content-sha256` itself (botocore does, with
  `UNSIGNED-PAYLOAD`, for operations whose payload it does not sign);
* the clock: a request signed more than 15 minutes before or after the server's time is refused.

Not checked: the per-chunk signatures of a `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` body (each chunk's
signature chains from the header's; the header signature, over the declared value, is checked), the
trailing checksum of a `...-TRAILER` body, security tokens (`X-Amz-Security-Token` is signed like any
header but not looked up: the server knows one key pair and no sessions), and Signature Version 2 or 4a:
they are refused as S3 refuses them on buckets made since 2020 (SigV2 is turned off,
https://docs.aws.amazon.com/AmazonS3/latest/API/Appendix-Sigv2.html).

Which error codes: they depend on the protocol family of the service, which `verify` takes as `family`
(the endpoint knows the service it routed the request to; without it the family is read off the
credential scope's service name: `s3`, `sts` and `iam` are the S3 and query services the emulator
answers, any other is a JSON one):

=================  ========================  ====================================  =============================
                   s3                        json (sagemaker, logs, ...)           query (sts, iam)
=================  ========================  ====================================  =============================
no signature       AccessDenied 403          MissingAuthenticationTokenException   MissingAuthenticationToken 403
                                             400
unknown key        InvalidAccessKeyId 403    UnrecognizedClientException 400       InvalidClientTokenId 403
wrong signature    SignatureDoesNotMatch     InvalidSignatureException 400         SignatureDoesNotMatch 403
                   403
clock off 15 min   RequestTimeTooSkewed 403  InvalidSignatureException 400         SignatureDoesNotMatch 403
                                             "Signature expired: ..."              "Signature expired: ..."
presign expired    AccessDenied 403          (as clock off)                        (as clock off)
                   "Request has expired"
malformed          AuthorizationHeader-      IncompleteSignatureException 400      IncompleteSignature 400
                   Malformed 400 /
                   AuthorizationQuery-
                   ParametersError 400
=================  ========================  ====================================  =============================

Sources: S3's error code list (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html#ErrorCodeList);
the common errors of the query services (https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html:
InvalidClientTokenId and MissingAuthenticationToken 403, IncompleteSignature 400); the JSON services'
400s as DynamoDB lists them (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html:
IncompleteSignatureException, InvalidSignatureException, MissingAuthenticationTokenException,
UnrecognizedClientException); and the answers users quote from the services themselves: JSON services'
"InvalidSignatureException ... Signature expired: 20140325T143453Z is now earlier than 20140325T143751Z
(20140325T145251Z - 15 min.)" with status 400 (github.com/aws/aws-sdk-js/issues/254), STS's
"SignatureDoesNotMatch ... Signature expired" (github.com/aws/aws-cli/issues/6676) and its canonical string
in the message (github.com/boto/boto3/issues/756), S3's "AccessDenied: Request has expired"
(github.com/aws/aws-sdk-js/issues/3493) and "XAmzContentSHA256Mismatch" with status 400
(github.com/grosskur/lua-resty-aws/issues/2). botocore's service models do not model these errors (a
signature failure happens before any operation), so its clients read them as plain `ClientError`s.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import BinaryIO, Literal
from urllib.parse import quote

from emulator.aws.wire import HttpRequest

Family = Literal["s3", "json", "query"]
FAMILIES: tuple[Family, ...] = ("s3", "json", "query")
# The signing names of the query-protocol services the emulator answers; S3's is "s3"; all others are JSON.
QUERY_SERVICES = frozenset({"sts", "iam"})

ALGORITHM = "AWS4-HMAC-SHA256"
TIMESTAMP = "%Y%m%dT%H%M%SZ"
# "If the request is more than 15 minutes off the AWS time, the request is rejected" (both directions):
# the reference for signed requests, and S3's RequestTimeTooSkewed.
MAX_SKEW = dt.timedelta(minutes=15)
# A presigned URL lives at most seven days: "The minimum value you can set is 1, and the maximum is 604800"
# (sigv4-query-string-auth.html, X-Amz-Expires).
MAX_EXPIRES = 7 * 24 * 3600

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
# The values of x-amz-content-sha256 for an aws-chunked body (sigv4-streaming.html,
# sigv4-streaming-trailers.html). The ECDSA ones belong to SigV4a, refused with its Authorization header.
STREAMING_PAYLOADS = frozenset({
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
    "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
})
HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
ISO_BASIC = re.compile(r"\d{8}T\d{6}Z")
PRESIGN_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature", "X-Amz-Date", "X-Amz-SignedHeaders",
                  "X-Amz-Expires")
_READ_CHUNK = 1 << 20

# (code, HTTP status) by family, for each way a request can fail; see the module docstring for sources.
_ERRORS: dict[str, dict[Family, tuple[str, int]]] = {
    "missing": {"s3": ("AccessDenied", 403), "json": ("MissingAuthenticationTokenException", 400),
                "query": ("MissingAuthenticationToken", 403)},
    "unknown_key": {"s3": ("InvalidAccessKeyId", 403), "json": ("UnrecognizedClientException", 400),
                    "query": ("InvalidClientTokenId", 403)},
    "mismatch": {"s3": ("SignatureDoesNotMatch", 403), "json": ("InvalidSignatureException", 400),
                 "query": ("SignatureDoesNotMatch", 403)},
    "expired": {"s3": ("RequestTimeTooSkewed", 403), "json": ("InvalidSignatureException", 400),
                "query": ("SignatureDoesNotMatch", 403)},
    "malformed": {"s3": ("AuthorizationHeaderMalformed", 400), "json": ("IncompleteSignatureException", 400),
                  "query": ("IncompleteSignature", 400)},
}
_MISMATCH_S3 = ("The request signature we calculated does not match the signature you provided. Check your key "
                "and signing method.")
_MISMATCH = ("The request signature we calculated does not match the signature you provided. Check your AWS "
             "Secret Access Key and signing method. Consult the service documentation for details.")
_UNSUPPORTED = ("The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256. "
                "(For a boto3 S3 client: botocore.config.Config(signature_version='s3v4').)")


@dataclass(frozen=True)
class Credentials:
    """The one key pair the server accepts; the secret stays out of reprs and logs."""

    access_key: str
    secret_key: str = field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Credentials:
        """`KEY:SECRET` (split at the first colon: an access key has none). The error never repeats the
        text, which holds the secret."""
        access_key, colon, secret_key = text.partition(":")
        usage = ("credentials are ACCESS_KEY:SECRET_KEY, e.g. "
                 "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
        if not colon:
            raise ValueError(f"{usage}; this value has no ':'")
        if not access_key:
            raise ValueError(f"{usage}; the access key (before the ':') is empty")
        if not secret_key:
            raise ValueError(f"{usage}; the secret key (after the ':') is empty")
        if any(ch.isspace() for ch in text):
            raise ValueError(f"{usage}; this value contains white space")
        return cls(access_key, secret_key)


class SignatureError(Exception):
    """A request whose signature is missing, malformed or wrong: answered as the service's error.
    `details`: the extra elements S3 puts in such an error (CanonicalRequest, StringToSign, ...)."""

    def __init__(self, code: str, message: str, status: int = 403, details: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details = dict(details or {})


@dataclass(frozen=True)
class _Signed:
    """What a request says about its own signature."""

    presigned: bool
    access_key: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    timestamp: str  # YYYYMMDDTHHMMSSZ, the second line of the string to sign
    expires: int | None  # a presigned URL's X-Amz-Expires


def verify(request: HttpRequest, credentials: Credentials, *, family: str | None = None,
           payload_hash: str | None = None, now: dt.datetime | None = None) -> str:
    """The signing service name of the credential scope (e.g. "s3", "sagemaker", "monitoring") when
    `request` is signed with `credentials`; raises SignatureError otherwise.

    `family`: "s3", "json" or "query", which picks the error codes (see the module docstring); None reads
    it off the scope's service name, and answers a request with no scope as S3 does.
    `payload_hash`: the body's SHA-256 (hex) when the caller computed it while reading the body; else
    `request.payload_sha256`, else it is computed here when needed (a file body is read and put back
    where it was).
    `now`: the server's time (UTC; a naive datetime is taken as UTC), for the 15-minute and expiry checks.

    The chunk signatures of a `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` body are not verified: the header's
    signature is, with the declared value as the payload hash."""
    clock = _utc(now or dt.datetime.now(dt.timezone.utc))
    header = request.headers.get("authorization")
    names = {name for name, _ in request.query}
    presigned = bool(names & {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"})
    scope_service = _scope_service(request, header, presigned)
    kind = _family(family, scope_service)

    if header is not None and presigned:
        if kind == "s3":
            raise SignatureError("InvalidArgument", "Only one auth mechanism allowed; only the X-Amz-Algorithm "
                                 "query parameter, Signature query string parameter or the Authorization header "
                                 "should be specified", 400)
        raise _error("malformed", kind, "A request is signed either in its Authorization header or in its query "
                     "(X-Amz-Algorithm, X-Amz-Credential, ...), not both.")
    if header is None and not presigned:
        if kind == "s3" and {"AWSAccessKeyId", "Signature"} <= names:
            raise SignatureError("InvalidRequest", _UNSUPPORTED, 400)  # a SigV2 presigned URL
        raise _missing(kind)

    signed = _from_query(request, kind) if presigned else _from_header(request, header or "", kind)
    if signed.access_key != credentials.access_key:
        raise _error("unknown_key", kind, {
            "s3": "The AWS Access Key Id you provided does not exist in our records.",
            "json": "The security token included in the request is invalid.",
            "query": "The security token included in the request is invalid.",
        }[kind] + " (hetero-emu serve accepts only the access key given with --credentials.)",
            details={"AWSAccessKeyId": signed.access_key})
    _check_time(signed, kind, clock)

    actual: Callable[[], str] = _lazy_body_hash(request, payload_hash)
    declared = _declared_payload(request, signed, kind)
    canonical = canonical_request(request, signed.signed_headers, declared or actual(),
                                  normalize_path=kind != "s3", presigned=presigned)
    scope = f"{signed.date}/{signed.region}/{signed.service}/aws4_request"
    to_sign = "\n".join((ALGORITHM, signed.timestamp, scope, hashlib.sha256(canonical.encode()).hexdigest()))
    expected = signature(credentials.secret_key, signed.date, signed.region, signed.service, to_sign)
    if not hmac.compare_digest(expected.encode(), signed.signature.encode("utf-8", "replace")):
        raise _mismatch(kind, canonical, to_sign, signed)
    # S3 checks a declared digest against the body it received, after the signature over the declared
    # value: XAmzContentSHA256Mismatch, 400. Other services sign the body's own hash, so a changed body
    # already fails the signature; a digest they were told and do not get is a signature mismatch.
    if declared is not None and HEX_SHA256.fullmatch(declared) and declared.lower() != actual():
        if kind == "s3":
            raise SignatureError("XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not "
                                 "match what was computed.", 400,
                                 {"ClientComputedContentSHA256": declared, "S3ComputedContentSHA256": actual()})
        raise _error("mismatch", kind, f"{_MISMATCH} (x-amz-content-sha256 is not the SHA-256 of the body.)")
    return signed.service


# ---------------------------------------------------------------------------------------------------
# The signature itself: canonical request, string to sign, key, as the AWS reference defines them.


def canonical_request(request: HttpRequest, signed_headers: Sequence[str], payload_hash: str, *,
                      normalize_path: bool, presigned: bool = False) -> str:
    """The canonical request of `request` ("Create a canonical request" in the reference).

    `normalize_path`: every service but S3 signs the path with dot segments and empty segments removed
    (RFC 3986 5.2.4), URI-encoded again (the path as sent is encoded once, so it ends up encoded twice).
    S3 signs the path as sent: "Do not normalize URI paths for requests to Amazon S3".
    The query pairs (decoded, as the server has them) are URI-encoded (everything but A-Z a-z 0-9 - _ . ~)
    and sorted by encoded name, then encoded value; a presigned URL's X-Amz-Signature is left out.
    Each signed header is `name:value` with the value trimmed and inner runs of spaces made one."""
    path = request.path or "/"
    uri = quote(_normalized_path(path), safe="/") if normalize_path else path
    pairs = sorted((_encode(name), _encode(value)) for name, value in request.query
                   if not (presigned and name == "X-Amz-Signature"))
    query = "&".join(f"{name}={value}" for name, value in pairs)
    headers = "".join(f"{name}:{_header_value(request, name)}\n" for name in signed_headers)
    return "\n".join((request.method.upper(), uri, query, headers, ";".join(signed_headers), payload_hash))


def signature(secret_key: str, date: str, region: str, service: str, string_to_sign: str) -> str:
    """The hex HMAC-SHA256 of `string_to_sign` with the key derived from the secret for the scope."""
    key = _hmac(f"AWS4{secret_key}".encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    # URI-encode as SigV4 defines it: quote's always-safe set is exactly the unreserved A-Z a-z 0-9 - _ . ~,
    # its escapes are upper-case, and a space is %20 (never '+').
    return quote(text, safe="")


def _normalized_path(path: str) -> str:
    kept: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    return "/" + "/".join(kept) + ("/" if kept and path.endswith("/") else "")


def _header_value(request: HttpRequest, name: str) -> str:
    value = request.headers.get(name)
    if value is None and name == "host":
        value = request.host
    return " ".join((value or "").split())


# ---------------------------------------------------------------------------------------------------
# Reading the request's own claims.


def _scope_service(request: HttpRequest, header: str | None, presigned: bool) -> str | None:
    credential = _query_value(request, "X-Amz-Credential") if presigned else None
    if header is not None:
        found = re.search(r"Credential=([^,\s]*)", header)
        credential = found.group(1) if found else None
    parts = (credential or "").split("/")
    return parts[3] if len(parts) == 5 else None


def _family(family: str | None, service: str | None) -> Family:
    if family is not None:
        for known in FAMILIES:
            if family == known:
                return known
        raise ValueError(f"family is one of {', '.join(FAMILIES)}, not {family!r}")
    if service is None or service == "s3":
        return "s3"
    return "query" if service in QUERY_SERVICES else "json"


def _from_header(request: HttpRequest, header: str, kind: Family) -> _Signed:
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        if kind == "s3" and (algorithm == "AWS" or algorithm.startswith("AWS4-")):
            raise SignatureError("InvalidRequest", _UNSUPPORTED, 400)
        raise _malformed(kind, False, f"the Authorization header's algorithm is {algorithm!r}, expecting "
                         f"'{ALGORITHM}'")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, equals, value = item.strip().partition("=")
        if equals:
            fields.setdefault(name.strip(), value.strip())
    absent = [name for name in ("Credential", "SignedHeaders", "Signature") if not fields.get(name)]
    if absent:
        raise _malformed(kind, False, " ".join(f"Authorization header requires '{name}' parameter." for name in absent))
    timestamp = _header_timestamp(request, kind)
    return _claims(kind, False, fields["Credential"], fields["SignedHeaders"], fields["Signature"], timestamp, None)


def _from_query(request: HttpRequest, kind: Family) -> _Signed:
    values = {name: _query_value(request, name) for name in PRESIGN_PARAMS}
    required = PRESIGN_PARAMS if kind == "s3" else PRESIGN_PARAMS[:-1]  # only S3 insists on X-Amz-Expires
    if any(not values[name] for name in required):
        raise _malformed(kind, True, "Query-string authentication version 4 requires the X-Amz-Algorithm, "
                         "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires "
                         "parameters.")
    if values["X-Amz-Algorithm"] != ALGORITHM:
        raise _malformed(kind, True, f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    timestamp = values["X-Amz-Date"] or ""
    if not ISO_BASIC.fullmatch(timestamp) or _parse_timestamp(timestamp) is None:
        raise _malformed(kind, True, "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    expires: int | None = None
    raw = values["X-Amz-Expires"]
    if raw:
        if not raw.isdigit():
            raise _malformed(kind, True, "X-Amz-Expires should be a number")
        expires = int(raw)
        if kind == "s3" and not 1 <= expires <= MAX_EXPIRES:
            raise _malformed(kind, True, f"X-Amz-Expires must be less than a week (in seconds) that is {MAX_EXPIRES}"
                             if expires else "X-Amz-Expires must be non-negative")
    return _claims(kind, True, values["X-Amz-Credential"] or "", values["X-Amz-SignedHeaders"] or "",
                   values["X-Amz-Signature"] or "", timestamp, expires)


def _claims(kind: Family, presigned: bool, credential: str, signed_headers: str, signature_value: str,
            timestamp: str, expires: int | None) -> _Signed:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not re.fullmatch(r"\d{8}", parts[1]) or not all(parts):
        raise _malformed(kind, presigned, f"the Credential {credential!r} is mal-formed; expecting "
                         "\"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".")
    access_key, date, region, service, _ = parts
    if date != timestamp[:8]:
        if kind == "s3":
            raise _malformed(kind, presigned, "Invalid credential date. Date is not the same as X-Amz-Date.")
        raise _error("mismatch", kind, f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of "
                     f"date from HTTP: '{date}' != '{timestamp[:8]}', from '{timestamp}'.")
    headers = tuple(signed_headers.split(";"))
    if not all(headers):
        raise _malformed(kind, presigned, f"SignedHeaders {signed_headers!r} is not a ';'-separated list of names")
    return _Signed(presigned, access_key, date, region, service, headers, signature_value, timestamp, expires)


def _header_timestamp(request: HttpRequest, kind: Family) -> str:
    """The request's time as the string to sign carries it: X-Amz-Date as sent, or else the Date header
    (RFC 1123) in ISO 8601 basic form; botocore signs with Date when the request already has one."""
    amz_date = request.headers.get("x-amz-date")
    if amz_date is not None:
        if ISO_BASIC.fullmatch(amz_date.strip()) and _parse_timestamp(amz_date.strip()) is not None:
            return amz_date.strip()
        problem = f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601"
    else:
        date = request.headers.get("date")
        parsed: dt.datetime | None = None
        if date:
            try:
                parsed = parsedate_to_datetime(date)
            except (TypeError, ValueError):
                parsed = None
        if parsed is not None:
            return _utc(parsed).strftime(TIMESTAMP)
        problem = "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
    if kind == "s3":
        raise SignatureError("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header", 403)
    raise _error("malformed", kind, problem)


def _declared_payload(request: HttpRequest, signed: _Signed, kind: Family) -> str | None:
    """The payload hash the client signed when it declared one; None when it signed the body's own hash."""
    if signed.presigned:
        if kind != "s3":
            return None
        # S3 presigned URLs sign UNSIGNED-PAYLOAD ("you don't know anything about the payload"), unless the
        # signer put X-Amz-Content-Sha256 in the query (the JavaScript SDK v3 does: aws-sdk-js-v3#5577).
        return _query_value(request, "X-Amz-Content-Sha256") or UNSIGNED_PAYLOAD
    declared = request.headers.get("x-amz-content-sha256")
    if declared is None:
        if kind == "s3":
            raise SignatureError("InvalidRequest", "Missing required header for this request: x-amz-content-sha256",
                                 400)
        return None
    declared = declared.strip()
    if declared == UNSIGNED_PAYLOAD or declared in STREAMING_PAYLOADS or HEX_SHA256.fullmatch(declared):
        return declared
    if kind == "s3":
        raise SignatureError("InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                             f"{', '.join(sorted(STREAMING_PAYLOADS))} or a valid sha256 value.", 400)
    raise _error("malformed", kind, f"x-amz-content-sha256 {declared!r} is neither a SHA-256 (hex) nor "
                 f"{UNSIGNED_PAYLOAD}")


def _query_value(request: HttpRequest, name: str) -> str | None:
    return next((value for key, value in request.query if key == name), None)


def _lazy_body_hash(request: HttpRequest, given: str | None) -> Callable[[], str]:
    """The body's SHA-256, computed at most once and only when asked for (a declared digest, or a
    service that signs the body itself): the caller's value first, then the one the server noted."""
    known: list[str] = [given.lower()] if given else [request.payload_sha256.lower()] if request.payload_sha256 else []

    def value() -> str:
        if not known:
            known.append(_body_sha256(request.body))
        return known[0]

    return value


def _body_sha256(body: bytes | BinaryIO) -> str:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return hashlib.sha256(body).hexdigest()
    start = body.tell()
    digest = hashlib.sha256()
    for chunk in iter(lambda: body.read(_READ_CHUNK), b""):
        digest.update(chunk)
    body.seek(start)  # the protocol codec reads the body next
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------
# Time.


def _check_time(signed: _Signed, kind: Family, now: dt.datetime) -> None:
    signed_at = _parse_timestamp(signed.timestamp)
    assert signed_at is not None  # checked while reading the request
    stamp = now.strftime(TIMESTAMP)
    if signed.presigned and signed.expires is not None:
        ends = signed_at + dt.timedelta(seconds=signed.expires)
        if now > ends:
            if kind == "s3":
                raise SignatureError("AccessDenied", "Request has expired", 403, {
                    "X-Amz-Expires": str(signed.expires), "Expires": ends.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "ServerTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")})
            raise _error("expired", kind, f"Signature expired: {signed.timestamp} + {signed.expires} seconds is "
                         f"now earlier than {stamp}.")
        if signed_at - now > MAX_SKEW:
            if kind == "s3":
                raise SignatureError("AccessDenied", "Request is not yet valid", 403, {
                    "X-Amz-Date": signed.timestamp, "ServerTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")})
            raise _not_yet(kind, signed.timestamp, now)
        return
    if now - signed_at > MAX_SKEW:
        if kind == "s3":
            raise _skewed(signed, now)
        raise _error("expired", kind, f"Signature expired: {signed.timestamp} is now earlier than "
                     f"{(now - MAX_SKEW).strftime(TIMESTAMP)} ({stamp} - 15 min.)")
    if signed_at - now > MAX_SKEW:
        if kind == "s3":
            raise _skewed(signed, now)
        raise _not_yet(kind, signed.timestamp, now)


def _skewed(signed: _Signed, now: dt.datetime) -> SignatureError:
    return SignatureError("RequestTimeTooSkewed", "The difference between the request time and the current time is "
                          "too large.", 403, {"RequestTime": signed.timestamp, "ServerTime": now.strftime(TIMESTAMP),
                                              "MaxAllowedSkewMilliseconds": str(int(MAX_SKEW.total_seconds() * 1000))})


def _not_yet(kind: Family, timestamp: str, now: dt.datetime) -> SignatureError:
    return _error("expired", kind, f"Signature not yet current: {timestamp} is still later than "
                  f"{(now + MAX_SKEW).strftime(TIMESTAMP)} ({now.strftime(TIMESTAMP)} + 15 min.)")


def _parse_timestamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text, TIMESTAMP).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def _utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


# ---------------------------------------------------------------------------------------------------
# Errors.


def _error(kind_of_failure: str, kind: Family, message: str, details: dict[str, str] | None = None) -> SignatureError:
    code, status = _ERRORS[kind_of_failure][kind]
    return SignatureError(code, message, status, details)


def _missing(kind: Family) -> SignatureError:
    return missing_signature(kind, " (hetero-emu serve was started with --credentials: sign requests with that key "
                             "pair.)")


def missing_signature(family: str, why: str) -> SignatureError:
    """The service's error for a request that carries no signature (`family`: "s3", "json" or "query"),
    with `why` after the service's own words."""
    kind = _family(family, None)
    return _error("missing", kind, {
        "s3": "Access Denied",
        "json": "Missing Authentication Token",
        "query": "Request is missing Authentication Token",
    }[kind] + why)


def _malformed(kind: Family, presigned: bool, problem: str) -> SignatureError:
    if kind == "s3":
        if presigned:
            return SignatureError("AuthorizationQueryParametersError", problem, 400)
        return SignatureError("AuthorizationHeaderMalformed", f"The authorization header is malformed; {problem}", 400)
    return _error("malformed", kind, problem)


def _mismatch(kind: Family, canonical: str, to_sign: str, signed: _Signed) -> SignatureError:
    details = {"AWSAccessKeyId": signed.access_key, "StringToSign": to_sign, "SignatureProvided": signed.signature,
               "CanonicalRequest": canonical}
    if kind == "s3":
        return SignatureError("SignatureDoesNotMatch", _MISMATCH_S3, 403, details)
    # The query and JSON services say what they signed in the message itself (as STS does).
    return _error("mismatch", kind, f"{_MISMATCH}\n\nThe Canonical String for this request should have been\n"
                  f"'{canonical}'\n\nThe String-to-Sign should have been\n'{to_sign}'\n", details)

"""The HTTP side of the AWS endpoint (`hetero-emu serve`): one request and one response as plain data,
and the protocol codecs (json_rpc, query, rest_xml, rpc_cbor) that turn them into an operation's
parameters and an answer back into bytes, each following the botocore service model."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO


@dataclass
class HttpRequest:
    """One request as the server received it."""

    method: str  # "GET", "PUT", ...
    path: str  # raw path, percent-encoded as received, without the query: "/bucket/a%20b"
    query: list[tuple[str, str]]  # decoded query pairs in order (a flag like "?uploads" is ("uploads", ""))
    headers: dict[str, str]  # lower-cased names
    body: bytes | BinaryIO = b""  # small bodies as bytes; large ones (S3 uploads) as a readable binary file
    host: str = ""  # the Host header's host part, for S3 virtual-host addressing
    # The body's SHA-256 (hex), computed while the server read it, so a SigV4 check of
    # x-amz-content-sha256 need not read a large body twice.
    payload_sha256: str = ""


@dataclass
class HttpResponse:
    """One answer: an iterable body is streamed (S3 GetObject)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Iterable[bytes] = b""


class WireError(Exception):
    """A request the protocol cannot read: answered as the service's error (code, message, HTTP status)."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def body_bytes(request: HttpRequest) -> bytes:
    """The whole body as bytes (the JSON, query and CBOR protocols read small bodies whole; the
    server already refused any over its limit)."""
    body = request.body
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    body.seek(0)
    return body.read()

"""SigV4's chunked framing of a request body (`aws-chunked`), which the Java and JavaScript SDKs (and
boto3 for a stream of unknown length) send to S3:
https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html. Both HTTP front ends of the
endpoint (`hetero-emu serve`, a job's own endpoint) take the data out before the endpoint reads it."""

from __future__ import annotations

import io
import tempfile
from typing import Any

SPOOL_IN_MEMORY = 8 * 1024**2  # bytes of data kept in memory before the spool goes to disk


def aws_chunked(headers: dict[str, str]) -> bool:
    """A body in SigV4's chunked framing (what the Java and JavaScript SDKs send to S3 over HTTP):
    https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html"""
    return ("aws-chunked" in headers.get("content-encoding", "")
            or headers.get("x-amz-content-sha256", "").startswith("STREAMING-"))


def unchunk(body: Any) -> Any:
    """The data of an aws-chunked body (`SIZE-HEX[;chunk-signature=...]\\r\\nDATA\\r\\n` ... `0...`,
    then optional trailers), in a new spooled file; ValueError when the framing is broken."""
    source = io.BytesIO(body) if isinstance(body, bytes) else body
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - the request's body now
    while True:
        line = source.readline(4096)
        if not line.endswith(b"\r\n"):
            out.close()
            raise ValueError("a chunk header is not a line")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            out.close()
            raise ValueError(f"a chunk size is not hexadecimal: {line[:40]!r}") from None
        if size == 0:
            break  # what follows are trailers (checksums), which the data does not include
        data = source.read(size)
        if len(data) != size or source.read(2) != b"\r\n":
            out.close()
            raise ValueError("a chunk is shorter than its size")
        out.write(data)
    out.seek(0)
    return out

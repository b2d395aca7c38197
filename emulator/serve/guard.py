"""Who `hetero-emu serve` answers: the names it serves as, and who may change something.

Two attacks reach a server on 127.0.0.1 through the user's own browser (issue 30):

* **DNS rebinding.** A page on `evil.example` has its name re-resolved to 127.0.0.1; the browser then
  takes the server for `evil.example` and lets that page read every answer. The browser still sends
  `Host: evil.example`, so the server answers only the names it serves as (`HostNames`); any other Host
  gets 421 Misdirected Request (RFC 9110 section 15.5.20), the status for "this server is not the one
  that name is for". https://en.wikipedia.org/wiki/DNS_rebinding
* **Cross-site requests.** Any page may make the browser send a "simple" request (GET, HEAD or POST
  with a form or text/plain body, no custom header) to any address, without asking the server first;
  only the answer is hidden from it. A request with an `Authorization` header, or with any `X-Amz-*`
  header, is not simple: the browser first sends a CORS preflight (OPTIONS), which this server never
  grants, so the request itself is never sent.
  https://developer.mozilla.org/en-US/docs/Web/HTTP/Guides/CORS#simple_requests
  So an AWS call that may change something must be signed, even on the loopback interface without
  `--credentials` (where the signature's secret is not checked): every AWS SDK and the AWS CLI sign
  every request (botocore/auth.py `SigV4Auth.add_auth`), so no real client notices. Unsigned S3 GETs
  and HEADs stay open: S3's anonymous reads, which change nothing. A presigned URL (the signature in the
  query) can be written into a cross-site form's address, so it counts only when no browser says the
  request comes from another site (`Origin`, `Sec-Fetch-Site`: every current browser sends them on a
  cross-site POST, https://developer.mozilla.org/en-US/docs/Web/HTTP/Reference/Headers/Sec-Fetch-Site).

The live page's stop button has its own token (emulator/serve/page.py `_Page.stop`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping

from emulator.aws import sigv4
from emulator.aws.wire import HttpRequest
from emulator.jobspec.s3 import BUCKET_PATTERN

# Names under `localhost` are the loopback interface and are never looked up in DNS (RFC 6761 section
# 6.3; browsers resolve them so themselves), so no other site can have one: `bucket.localhost` is S3's
# virtual-host addressing of this server, and the one the endpoint reads (rest_xml.DEFAULT_HOSTS).
LOCALHOST = "localhost"
# A DNS name as `--host-name` takes it: labels of letters, digits and hyphens.
DNS_NAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                      r"[A-Za-z0-9])?)*\.?")
WILDCARDS = ("0.0.0.0", "::", "")
# The values of Sec-Fetch-Site a browser sends for a request of this site's own, or one the user typed.
OWN_SITE = ("same-origin", "none")


def is_wildcard(host: str) -> bool:
    return host in WILDCARDS


def is_loopback(host: str) -> bool:
    if host == LOCALHOST:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class HostNames:
    """The Host header values a server bound to `bound` answers, with the names given (`--host-name`).

    Answered: `localhost` and any name under it; the names given; when the server listens beyond the
    loopback interface, this machine's host name (short and fully qualified); a bucket under any of these
    names (S3's virtual-host addressing); and IP addresses: a loopback one, or, beyond the loopback
    interface, any one. An IP address in Host cannot be a rebinding, since the browser connected to that
    very address and the page's origin is this server; beyond the loopback interface the address a client
    used may be one this machine does not know (a NAT's, a container engine's published port), so no
    list of interfaces is kept."""

    def __init__(self, bound: str, given: Iterable[str] = ()) -> None:
        self.beyond_loopback = not is_loopback(bound)
        names = {LOCALHOST, *given}
        if not is_wildcard(bound) and not _ip(bound):
            names.add(bound)
        if self.beyond_loopback:
            names.update({socket.gethostname(), socket.getfqdn()})
        self.names = frozenset(n.lower().rstrip(".") for n in names if n)

    def allows(self, host_header: str | None) -> bool:
        """Whether a request with this Host header (port and all; None: none sent) is for this server."""
        name = _name(host_header or "")
        if not name:
            return False
        address = _ip(name)
        if address is not None:
            return address.is_loopback or self.beyond_loopback
        return self.bucket_of(name) is not None or name in self.names or name.endswith("." + LOCALHOST)

    def bucket_of(self, name: str) -> str | None:
        """The bucket a `BUCKET.NAME` Host names under one of the names given or this machine's, else None."""
        for own in self.names:
            if own != LOCALHOST and name.endswith("." + own):
                bucket = name[:-len(own) - 1]
                return bucket if BUCKET_PATTERN.fullmatch(bucket) else None
        return None

    def as_endpoint_reads(self, host: str) -> str:
        """The Host (without port) in the form the endpoint reads virtual-host addressing in: a bucket
        under one of this server's names as the same bucket under `localhost`."""
        bucket = self.bucket_of(host.lower().rstrip("."))
        return f"{bucket}.{LOCALHOST}" if bucket is not None else host


def valid_host_name(text: str) -> bool:
    """Whether `--host-name` was given a DNS name or an IP address."""
    return bool(DNS_NAME.fullmatch(text)) or _ip(text) is not None


def signed(headers: Mapping[str, str], query: Iterable[tuple[str, str]]) -> bool:
    """Whether an AWS request carries a signature a cross-site page cannot make a browser send: an
    Authorization header of AWS's (SigV4, or SigV2's `AWS KEY:SIG`), or a presigned query (SigV4's
    `X-Amz-Signature`, SigV2's `Signature`) on a request no browser marks as another site's."""
    authorization = headers.get("authorization", "")
    if authorization.startswith(("AWS4-", "AWS ")):
        return True
    names = {name for name, _ in query}
    return ("X-Amz-Signature" in names or {"AWSAccessKeyId", "Signature"} <= names) and not from_elsewhere(headers)


def from_elsewhere(headers: Mapping[str, str]) -> bool:
    """Whether a browser says the request comes from another site than this server's."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in OWN_SITE:
        return True
    origin = headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or origin.split("://", 1)[-1].lower() != headers.get("host", "").lower()


def needs_signature(head: HttpRequest, service: str) -> bool:
    """Whether an AWS request must be signed: anything but S3's GET and HEAD (reads) may change something."""
    return not (service == "s3" and head.method in ("GET", "HEAD"))


def unsigned_refusal(family: str) -> sigv4.SignatureError:
    """The service's own error for a request that must be signed and is not (`family`: its protocol's, as
    sigv4 names them: "s3", "json", "query")."""
    return sigv4.missing_signature(family, " (hetero-emu serve answers a request that may change something only "
                                   "when it is signed with SigV4, as every AWS SDK and the AWS CLI sign, so that "
                                   "no web page can send it through a browser; docs/serve.md)")


def family_of(protocol: str) -> str:
    """sigv4's family of error codes for a wire protocol (the endpoint's names: rest-xml, query, json, cbor)."""
    return {"rest-xml": "s3", "query": "query"}.get(protocol, "json")


def reachable_name(bound: str) -> str:
    """The name or address another machine reaches a server listening on `bound` by, for the banner: the
    bound address itself unless it is a wildcard; else this machine's host name when it resolves to an
    address beyond the loopback interface, else the address this machine sends from (a UDP socket's
    `connect` picks it from the routing table and sends nothing), else the host name anyway."""
    if not is_wildcard(bound):
        return bound
    name = socket.getfqdn() or socket.gethostname()
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}
    except OSError:
        found = set()
    if any(not ipaddress.ip_address(str(a).split("%", 1)[0]).is_loopback for a in found):
        return name
    family, probe = (socket.AF_INET6, "2001:db8::1") if bound == "::" else (socket.AF_INET, "192.0.2.1")
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect((probe, 9))  # TEST-NET / documentation addresses: nothing is sent anywhere
            address = str(udp.getsockname()[0])
    except OSError:
        return name
    return address if not ipaddress.ip_address(address).is_loopback else name


def _name(host_header: str) -> str:
    """The host of a Host header, lower-case, without its port or brackets."""
    text = host_header.strip().lower()
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None

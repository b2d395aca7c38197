"""The gateway through which a job's hosts reach AWS: the emulator's AWS, never Amazon's.

It runs in one small container beside each job's hosts, on the job's network, started as
`python3 job_gateway.py --socket /hetero-emu/aws.sock --cert cert.pem --key key.pem`. It does two
things, with Python's standard library only, so any image with a python3 can run it:

- **DNS** (UDP port 53): a name under `amazonaws.com` resolves to this container's address, so
  `s3.us-west-2.amazonaws.com`, `my-bucket.s3.us-west-2.amazonaws.com` and `sts.amazonaws.com` all
  lead here, whatever SDK or version a host's code uses (old botocore knows no AWS_ENDPOINT_URL).
  Any other name is asked of Docker's own resolver (127.0.0.11), as the hosts would have: their DNS
  server is this container, and Docker's embedded resolver still answers container names itself and
  forwards the rest here (https://docs.docker.com/engine/network/#dns-services).
- **HTTPS** (443) and **HTTP** (80): each connection is relayed, bytes as they are, to the job's AWS
  endpoint, which the job's driver serves on a Unix socket (emulator/aws/job_endpoint.py). TLS ends
  here, with a certificate for AWS's names signed by the job's own authority, which the hosts trust
  through AWS_CA_BUNDLE (botocore's variable for the CA bundle, read by every version).

It also answers for the job's role, as the service's container credentials endpoint does
(`credentials`, served on its own with `--credentials-only`): see emulator/aws/job_endpoint.py.

This file is mounted into the gateway container on its own and run there: it must import nothing
but the standard library, and keep to Python 3.7 (an old image's python3).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time

# What only the role's credentials need (json, secrets, string) is imported where they are
# made: secrets (hmac, _hashlib) and json were ~20% of the gateway's imports, and every host's first
# process waits for the gateway to answer (emulator/data/startup/sitecustomize.py).

UPSTREAM_DNS = ("127.0.0.11", 53)  # Docker's embedded resolver, in every container on a user network
UPSTREAM_SECONDS = 3.0  # how long the upstream resolver may take before a host gets SERVFAIL
AWS_DOMAINS = ("amazonaws.com",)
DNS_TTL = 60
RELAY_CHUNK = 256 * 1024
# DNS: record types, classes and response codes (RFC 1035, section 3.2 and 4.1.1).
TYPE_A, CLASS_IN = 1, 1
NOERROR, FORMERR, SERVFAIL = 0, 1, 2


def question(packet: bytes) -> tuple[str, int, int, int] | None:
    """(name, type, class, end offset) of a query's first question, or None when it cannot be read."""
    if len(packet) < 12 or struct.unpack("!H", packet[4:6])[0] < 1:
        return None
    labels = []
    at = 12
    while True:
        if at >= len(packet):
            return None
        size = packet[at]
        if size == 0:
            at += 1
            break
        if size > 63 or at + 1 + size > len(packet):  # a pointer or a label past the end: not a question
            return None
        labels.append(packet[at + 1:at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    if at + 4 > len(packet):
        return None
    qtype, qclass = struct.unpack("!HH", packet[at:at + 4])
    return ".".join(labels).lower(), qtype, qclass, at + 4


def is_aws(name: str, domains: tuple[str, ...] = AWS_DOMAINS) -> bool:
    name = name.rstrip(".")
    return any(name == d or name.endswith("." + d) for d in domains)


def answer(packet: bytes, address: str, domains: tuple[str, ...] = AWS_DOMAINS) -> bytes | None:
    """The reply to a query for an AWS name (an A record of `address`; no record of another type), or
    None when the query is for another name (the caller asks upstream)."""
    asked = question(packet)
    if asked is None:
        return _reply(packet[:12].ljust(12, b"\0"), b"", FORMERR, 0) if len(packet) >= 2 else None
    name, qtype, qclass, end = asked
    if not is_aws(name, domains):
        return None
    records = b""
    count = 0
    if qtype == TYPE_A and qclass == CLASS_IN:
        # The name as a pointer to the question's (offset 12), then type, class, TTL and the address.
        records = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, DNS_TTL, 4) + socket.inet_aton(address)
        count = 1
    return _reply(packet[:12], packet[12:end], NOERROR, count) + records


def _reply(header: bytes, question_bytes: bytes, rcode: int, answers: int) -> bytes:
    ident, flags = struct.unpack("!HH", header[:4])
    # QR (a response), the query's opcode and RD kept, AA (this server is the authority), RA, rcode.
    flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode
    return struct.pack("!HHHHHH", ident, flags, 1 if question_bytes else 0, answers, 0, 0) + question_bytes


def failure(packet: bytes) -> bytes:
    """SERVFAIL for a query whose upstream did not answer."""
    asked = question(packet)
    return _reply(packet[:12], packet[12:asked[3]] if asked else b"", SERVFAIL, 0)


class DnsHandler(socketserver.BaseRequestHandler):
    server: DnsServer

    def handle(self) -> None:
        packet, sock = self.request
        reply = answer(packet, self.server.address, self.server.domains)
        if reply is None:
            reply = self.upstream(packet)
        sock.sendto(reply, self.client_address)

    def upstream(self, packet: bytes) -> bytes:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ask:
            ask.settimeout(UPSTREAM_SECONDS)
            try:
                ask.sendto(packet, self.server.upstream)
                reply, _ = ask.recvfrom(65535)
                return reply
            except OSError:
                return failure(packet)


class DnsServer(socketserver.ThreadingUDPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], address: str, upstream: tuple[str, int] = UPSTREAM_DNS,
                 domains: tuple[str, ...] = AWS_DOMAINS) -> None:
        self.address = address
        self.upstream = upstream
        self.domains = domains
        super().__init__(listen, DnsHandler)


class RelayHandler(socketserver.BaseRequestHandler):
    """One client connection relayed to the endpoint's Unix socket, both ways, until either side ends."""

    server: RelayServer

    def handle(self) -> None:
        client = self.request
        if self.server.tls is not None:
            try:
                client = self.server.tls.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                return  # a client that does not trust the certificate, or speaks no TLS
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            backend.connect(self.server.backend)
        except OSError:
            backend.close()
            client.close()
            return
        back = threading.Thread(target=_pump, args=(backend, client), daemon=True)
        back.start()
        _pump(client, backend)
        back.join()
        backend.close()
        client.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from `source` to `sink` until `source` ends; then `sink` is told no more will come."""
    try:
        while True:
            data = source.recv(RELAY_CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class RelayServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], backend: str, tls: ssl.SSLContext | None = None) -> None:
        self.backend = backend
        self.tls = tls
        super().__init__(listen, RelayHandler)


CREDENTIALS_SECONDS = 3600  # an hour, as a role's session lasts by default


def credentials(seconds: int = CREDENTIALS_SECONDS, now: datetime.datetime | None = None) -> dict[str, str]:
    """New temporary credentials in the form the container credentials provider answers (botocore's
    `ContainerProvider` reads AccessKeyId, SecretAccessKey, Token and Expiration, ISO 8601): an SDK
    refreshes them before they expire, as it refreshes a role's on the service."""
    import secrets
    import string

    now = now or datetime.datetime.now(datetime.timezone.utc)
    alphabet = string.ascii_uppercase + string.digits
    return {"AccessKeyId": "ASIA" + "".join(secrets.choice(alphabet) for _ in range(16)),
            "SecretAccessKey": secrets.token_urlsafe(30)[:40],
            "Token": secrets.token_urlsafe(96),
            "Expiration": (now + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")}


def credentials_handler() -> type[socketserver.BaseRequestHandler]:
    """The handler of `--credentials-only`: a GET of any path answers new credentials (the path is the
    job's AWS_CONTAINER_CREDENTIALS_RELATIVE_URI). Made here, not at import: http.server (email,
    http.client) is ~20 ms of the gateway's start, which every host of a job waits for, and only this
    handler needs it."""
    import http.server

    class CredentialsHandler(http.server.BaseHTTPRequestHandler):
        server: CredentialsServer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            import json

            body = json.dumps(credentials(self.server.seconds)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return CredentialsHandler


class CredentialsServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], seconds: int = CREDENTIALS_SECONDS) -> None:
        self.seconds = seconds
        super().__init__(listen, credentials_handler())


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def own_address() -> str:
    """This container's address on the job's network (the one its name resolves to there)."""
    return socket.gethostbyname(socket.gethostname())


def endpoint_unreachable(path: str, seconds: float = 5.0) -> str:
    """Why the job's endpoint does not answer a connection on its socket within `seconds` ("" when it
    does): the driver serves it before any container of the job is made."""
    deadline = time.monotonic() + seconds
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
                return ""
            except OSError as err:
                if time.monotonic() > deadline:
                    return err.strerror or str(err)
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", help="the job endpoint's Unix socket")
    parser.add_argument("--cert", help="the TLS certificate (PEM) for AWS's names")
    parser.add_argument("--key", help="its private key (PEM)")
    parser.add_argument("--address", help="the address AWS names resolve to (default: this container's)")
    parser.add_argument("--listen", default="0.0.0.0", help="where to listen")
    parser.add_argument("--dns-port", type=int, default=53)
    parser.add_argument("--http-port", type=int, default=80)
    parser.add_argument("--https-port", type=int, default=443)
    parser.add_argument("--upstream", default="{}:{}".format(*UPSTREAM_DNS), help="where other names are asked")
    parser.add_argument("--credentials-only", metavar="PORT", type=int,
                        help="answer only for the role's credentials, on --listen:PORT")
    parser.add_argument("--credentials-seconds", type=int, default=CREDENTIALS_SECONDS)
    parser.add_argument("--credential-process", action="store_true",
                        help="print new credentials as a credential_process does, and end")
    args = parser.parse_args(argv)
    if args.credential_process:
        # https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-sourcing-external.html: Version 1,
        # the session token as SessionToken; with an Expiration the SDK runs the process again before it.
        made = credentials(args.credentials_seconds)
        import json

        print(json.dumps({"Version": 1, "AccessKeyId": made["AccessKeyId"], "SecretAccessKey": made["SecretAccessKey"],
                          "SessionToken": made["Token"], "Expiration": made["Expiration"]}))
        return 0
    servers: list[socketserver.BaseServer]
    if args.credentials_only is not None:
        servers = [CredentialsServer((args.listen, args.credentials_only), args.credentials_seconds)]
    else:
        if not (args.socket and args.cert and args.key):
            parser.error("--socket, --cert and --key are needed, unless --credentials-only")
        host, _, port = args.upstream.rpartition(":")
        servers = [
            DnsServer((args.listen, args.dns_port), args.address or own_address(), (host, int(port))),
            RelayServer((args.listen, args.http_port), args.socket),
            RelayServer((args.listen, args.https_port), args.socket, tls_context(args.cert, args.key)),
        ]
    if args.socket and (unreachable := endpoint_unreachable(args.socket)):
        # On a swarm the gateway may run on a node of another machine, where the driver's socket in the
        # shared job folder is a file no one listens on: the driver then runs the job without AWS.
        print(f"cannot reach the job's endpoint at {args.socket}: {unreachable}", flush=True)
        return 1
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    # The one line the driver waits for before it starts the hosts.
    print(READY, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    return 0


READY = "hetero-emu aws gateway ready"


if __name__ == "__main__":
    sys.exit(main())

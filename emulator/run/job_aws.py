"""AWS inside a job: what a job's hosts reach when their code calls AWS.

On the service a training job's code calls AWS with its role's temporary credentials and the job's
region: boto3 in a script, the TensorFlow toolkit asking S3 where the SDK's default `model_dir`
bucket is (sagemaker_tensorflow_container/s3_utils.py), the AWS CLI. Here every host of a job that
is not kept from the network (`enable_network_isolation`) reaches the emulator's AWS instead, with
whatever SDK and version its image has:

- a **gateway** container of the job's own image on the job's network (`gateway.py`, which is
  emulator/run/job_gateway.py: the standard library only) is each host's DNS server: AWS's names
  resolve to it, every other name is asked of Docker's resolver as before;
- it relays each connection (HTTPS with a certificate for AWS's names made for the job, and HTTP) to
  the job's endpoint, which the job's driver serves on a Unix socket (emulator/aws/job_endpoint.py):
  `hetero-emu serve`'s endpoint on the job's S3 root and region, S3 locations only;
- the driver starts the gateway beside the hosts, not before them (it was most of what the emulator
  added to a job's start); each host's Python start-up hook (emulator/data/startup/sitecustomize.py)
  holds its first process until the gateway answers, so no name fails to resolve in between;
- each host trusts the job's certificate authority (`AWS_CA_BUNDLE`, read by every botocore; and
  beside the public ones, through `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE` and `CURL_CA_BUNDLE`), and
  finds the role's credentials through `AWS_CONFIG_FILE`: a `credential_process` that prints new
  temporary keys, which an SDK refreshes before they expire.

The service hands its containers the role's credentials through the container credentials endpoint
(`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, at 169.254.170.2). That address would have to be taken on
this machine for every job, and on an ECS instance or a CodeBuild host (where CI runs) it already
answers with the machine's own AWS credentials; a `credential_process` (botocore 1.11 and later, the
AWS CLI, every other SDK) gives the same refreshing keys without touching the machine's network.

An isolated job gets none of it, as the service keeps an isolated job from AWS: its hosts resolve no
AWS name. The plan part is pure (`with_aws`, `without_aws`); `stage` writes the files.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

from emulator.planning import hooks
from emulator.planning.container import ContainerSpec, Mount
from emulator.planning.plan import LABEL_PREFIX, HostPlan, JobAws, Plan, container_name

FOLDER = "aws"  # under the job folder
HOSTS_FOLDER = "hosts"  # what every host mounts: the CA's certificate, the config, the credential process
GATEWAY_FOLDER = "gateway"  # what only the gateway mounts: its certificate, its key, its program
HOSTS_TARGET = "/etc/hetero-emu/aws"
GATEWAY_TARGET = "/hetero-emu/gateway"
SOCKET_TARGET = "/hetero-emu/run"
GATEWAY_HOST = "aws-gateway"  # its name on the job's network
LABEL_ROLE = f"{LABEL_PREFIX}.role"
CA_FILE, CONFIG_FILE, PROGRAM = "ca.pem", "config", "gateway.py"
BUNDLE_FILE = "ca-bundle.pem"  # the public authorities this machine trusts, and the job's
# Where the public authorities are: Debian's bundle (with what its administrator added), else certifi's.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
# The variables by which OpenSSL (Python's ssl, urllib), requests and curl take a bundle of their own.
TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
CERT_FILE, KEY_FILE = "cert.pem", "key.pem"
SOCKET_NAME = "aws.sock"
SOCKET_FOLDER = "run"  # the socket's folder in the job's aws/ folder, on an engine that wants it there
GATEWAY_LOG = "gateway.log"  # what the gateway printed, in the job's aws/ folder
READY_SECONDS = 30.0  # how long the gateway may take to say it is ready, before the hosts are made
# How long a host's start-up hook holds its first process for the gateway started beside it, and the
# driver waits for the gateway's word (sitecustomize.py GATEWAY_SECONDS, which names it too).
HOLD_SECONDS = 10.0
GATEWAY_VARIABLE = "HETERO_EMU_AWS_GATEWAY"  # the gateway's name, for the hook (sitecustomize.py)
FAILED_FILE = "gateway-failed"  # in the hosts' folder: the driver found the gateway did not start


def socket_dir(job_dir: str) -> str:
    """The folder of the endpoint's Unix socket: short (Linux bounds a socket's path at 107 bytes, and a
    job folder may be deep), one per job folder."""
    digest = hashlib.sha256(job_dir.encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"hetero-emu-aws-{digest}")


def with_aws(plan: Plan, socket_in_job_folder: bool = False) -> Plan:
    """The plan with AWS inside: the gateway, and every host pointed at it. An isolated job's plan is
    returned as it is. `socket_in_job_folder`: the endpoint's socket is in the job folder (a swarm's
    gateway may run on any node, and every node sees the job folder), else in this machine's
    temporary folder (`socket_dir`)."""
    if plan.network_isolation or plan.aws is not None:
        return plan
    files = Path(plan.job_dir) / FOLDER
    sockets = str(files / SOCKET_FOLDER) if socket_in_job_folder else socket_dir(plan.job_dir)
    gateway = ContainerSpec(
        image=plan.image,
        entrypoint=("python3", f"{GATEWAY_TARGET}/{PROGRAM}"),
        command=("--socket", f"{SOCKET_TARGET}/{SOCKET_NAME}", "--cert", f"{GATEWAY_TARGET}/{CERT_FILE}",
                 "--key", f"{GATEWAY_TARGET}/{KEY_FILE}"),
        name=container_name(plan.job_name, GATEWAY_HOST),
        hostname=GATEWAY_HOST,
        aliases=(GATEWAY_HOST,),
        extra_hosts=(),
        init=True,
        labels={**plan.labels, LABEL_ROLE: GATEWAY_HOST},
        environment={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
        mounts=(Mount(str(files / GATEWAY_FOLDER), GATEWAY_TARGET, read_only=True),
                Mount(sockets, SOCKET_TARGET, read_only=False)),
        shm_bytes=64 * 1024**2,
        ulimits=(),
    )
    host = HostPlan(name=GATEWAY_HOST, group="", instance_type="", host_dir=str(files), channels=(), shards={},
                    files={}, pipes={}, container=gateway)
    hook_dir = str(Path(plan.job_dir) / hooks.FOLDER)
    hosts = tuple(replace(h, container=_pointed(h.container, files, hook_dir)) for h in plan.hosts)
    return replace(plan, hosts=hosts, aws=JobAws(host, str(files), sockets), hook_dir=plan.hook_dir or hook_dir)


def _pointed(container: ContainerSpec, files: Path, hook_dir: str) -> ContainerSpec:
    """A host's container with the job's AWS: its DNS, the CA and the credentials; a variable the
    job's own environment sets keeps the job's value. The start-up hook (emulator/planning/hooks.py),
    which holds the host's first Python process until the gateway answers, is mounted if the host did
    not have it already."""
    # Not botocore alone: a script that downloads a public dataset over HTTPS from an S3 name (torchvision's
    # MNIST mirror, https://ossci-datasets.s3.amazonaws.com) reaches the job's S3 too, and trusts it
    # through the bundle of the public authorities and the job's that the standard variables name.
    environment = {"AWS_CA_BUNDLE": f"{HOSTS_TARGET}/{CA_FILE}", "AWS_CONFIG_FILE": f"{HOSTS_TARGET}/{CONFIG_FILE}",
                   **{name: f"{HOSTS_TARGET}/{BUNDLE_FILE}" for name in TRUST_VARIABLES},
                   **container.environment, GATEWAY_VARIABLE: GATEWAY_HOST}
    mounts = [*container.mounts, Mount(str(files / HOSTS_FOLDER), HOSTS_TARGET, read_only=True)]
    if not any(m.target == hooks.TARGET for m in container.mounts):
        mounts.append(Mount(hook_dir, hooks.TARGET, read_only=True))
    # The gateway in /etc/hosts too: the hook finds its address there while it is not yet started, when
    # Docker's resolver would ask the gateway itself for its own name (and wait 10 s for no answer).
    return replace(container, environment=hooks.on_pythonpath(environment), dns=(GATEWAY_HOST,), mounts=tuple(mounts),
                   extra_hosts=(*container.extra_hosts, GATEWAY_HOST))


def without_aws(plan: Plan) -> Plan:
    """The plan as it was before `with_aws`: for a job whose gateway could not start. The start-up hook
    goes too where `with_aws` mounted it (right after the hosts' AWS folder)."""
    if plan.aws is None:
        return plan
    target = Mount(str(Path(plan.aws.files_dir) / HOSTS_FOLDER), HOSTS_TARGET, read_only=True)

    def bare(container: ContainerSpec) -> ContainerSpec:
        environment = {k: v for k, v in container.environment.items()
                       if not (k in ("AWS_CA_BUNDLE", "AWS_CONFIG_FILE", *TRUST_VARIABLES)
                               and v.startswith(HOSTS_TARGET)) and k != GATEWAY_VARIABLE}
        mounts = list(container.mounts)
        at = mounts.index(target) if target in mounts else len(mounts)
        if mounts[at + 1:at + 2] and mounts[at + 1].target == hooks.TARGET:
            del mounts[at + 1]
            given = environment.pop("PYTHONPATH", "").split(":")[1:]
            environment.update({"PYTHONPATH": ":".join(given)} if given else {})
        return replace(container, environment=environment, dns=(), mounts=tuple(m for m in mounts if m != target),
                       extra_hosts=tuple(h for h in container.extra_hosts if h != GATEWAY_HOST))

    hosts = tuple(replace(h, container=bare(h.container)) for h in plan.hosts)
    hooked = plan.hook_dir is not None and any(m.source.startswith(plan.hook_dir) for h in hosts
                                               for m in h.container.mounts)
    return replace(plan, hosts=hosts, aws=None, hook_dir=plan.hook_dir if hooked else None)


def config_text() -> str:
    """The AWS config file every host reads (AWS_CONFIG_FILE): the role's credentials from the
    credential process (https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-sourcing-external.html)."""
    return f"[default]\ncredential_process = python3 {HOSTS_TARGET}/{PROGRAM} --credential-process\n"


def stage(plan: Plan) -> None:
    """Write the job's AWS files: the CA's certificate, the config and the program for every host; the
    gateway's certificate and key (for AWS's names in every region: the job's, us-east-1, where the
    global endpoints are, and any other a script may call) for the gateway alone."""
    if plan.aws is None:
        return
    files = Path(plan.aws.files_dir)
    # Imported here: cryptography costs ~35 ms, paid only by a job that reaches AWS (and preloaded by
    # the runner while the engine answers).
    from emulator.run import job_gateway
    from emulator.run.job_ca import Authority

    authority = Authority.make([plan.spec.region, "us-east-1", *aws_regions()])
    program = Path(job_gateway.__file__)
    for folder in (files / HOSTS_FOLDER, files / GATEWAY_FOLDER):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(program, folder / PROGRAM)
    (files / HOSTS_FOLDER / CA_FILE).write_bytes(authority.ca_pem)
    (files / HOSTS_FOLDER / BUNDLE_FILE).write_bytes(public_authorities().rstrip(b"\n") + b"\n" + authority.ca_pem)
    (files / HOSTS_FOLDER / CONFIG_FILE).write_text(config_text())
    (files / GATEWAY_FOLDER / CERT_FILE).write_bytes(authority.cert_pem)
    key = files / GATEWAY_FOLDER / KEY_FILE
    key.touch(mode=0o600)
    key.write_bytes(authority.key_pem)


def tell_hosts_failed(plan: Plan) -> None:
    """Say in the hosts' folder that the gateway did not start: each host's start-up hook then stops
    holding its first process for it (sitecustomize.py GATEWAY_FAILED)."""
    if plan.aws is not None:
        with contextlib.suppress(OSError):
            (Path(plan.aws.files_dir) / HOSTS_FOLDER / FAILED_FILE).touch()


def public_authorities() -> bytes:
    """The public certificate authorities this machine trusts (PEM): its system bundle, else certifi's
    (a dependency of requests, which docker-py needs)."""
    for path in SYSTEM_BUNDLES:
        with contextlib.suppress(OSError):
            return Path(path).read_bytes()
    import certifi

    return Path(certifi.where()).read_bytes()


def aws_regions() -> list[str]:
    """AWS's commercial regions as the botocore here knows them: a job's code may call any region's
    endpoints (a bucket in another region), as it may on the service. Read from its partitions.json
    (7 KB), the aws partition's regions that match its region pattern (which leaves out `aws-global`),
    not its 1.2 MB endpoints.json, whose parsing cost every job's start 30-70 ms; nor is botocore
    imported for it (~25 ms), since the job's start needs nothing else of it."""
    spec = importlib.util.find_spec("botocore")
    if spec is None or spec.origin is None:
        raise ImportError("botocore, one of hetero-emu's dependencies, is not installed")
    data = json.loads((Path(spec.origin).parent / "data" / "partitions.json").read_text())
    aws = next(p for p in data["partitions"] if p["id"] == "aws")
    pattern = re.compile(aws["regionRegex"])
    return sorted(region for region in aws["regions"] if pattern.match(region))


def stale_socket_dirs(base: Path | None = None) -> list[Path]:
    """The endpoints' socket folders (`socket_dir`) of jobs whose driver is gone (killed before its
    `endpoint` block could remove the folder): this user's own folders, not links, whose socket no
    one listens on."""
    found = []
    for folder in sorted((base or Path(tempfile.gettempdir())).glob("hetero-emu-aws-*")):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(folder / SOCKET_NAME))
            except OSError:
                found.append(folder)  # no socket, or nothing behind it
    return found


def unstage(plan: Plan) -> None:
    """After the run: the files the gateway and the hosts were given go (the gateway's key among
    them); what the gateway printed stays, beside the hosts' logs."""
    for folder in (HOSTS_FOLDER, GATEWAY_FOLDER):
        shutil.rmtree(Path(plan.job_dir) / FOLDER / folder, ignore_errors=True)


# What serves a job's endpoint: (the job's S3 root, its region, the folder of its socket) -> a context
# in which the endpoint its hosts reach answers on that socket (emulator/aws/services.py
# `serve_job_endpoint`, which `api.run` hands the runner: the run never reaches up to the services).
EndpointServer = Callable[[Path, str, Path], AbstractContextManager[object]]


@contextlib.contextmanager
def endpoint(plan: Plan, serve: EndpointServer | None) -> Iterator[None]:
    """The job's AWS endpoint served on its socket while the block runs (nothing for a job without)."""
    if plan.aws is None:
        yield
        return
    # A plan gets AWS only when its run was handed an endpoint (emulator/run/runner.py `run_job`).
    assert serve is not None, "a plan with AWS from a run without an endpoint"
    from emulator.jobspec.s3 import default_root

    with serve(plan.spec.s3_root or default_root(), plan.spec.region, Path(plan.aws.socket_dir)):
        yield


class GatewayOutput:
    """The gateway's output stream (a `LineSink`): kept in its log file, and `ready` set once it says
    it is (emulator/run/job_gateway.py READY)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        from emulator.run.job_gateway import READY

        self.marker = READY.encode()
        self.ready = threading.Event()
        self.seen = b""

    def __call__(self, name: str, chunk: bytes, stream: int = 1) -> None:
        self.seen = (self.seen + chunk)[-4096:]
        with contextlib.suppress(OSError), self.path.open("ab") as log:
            log.write(chunk)
        if self.marker in self.seen:
            self.ready.set()

    def failed(self, message: str) -> None:
        self.seen += b"\n" + message.encode(errors="replace")

    def last_words(self) -> str:
        lines = [line for line in self.seen.decode(errors="replace").splitlines() if line.strip()]
        return lines[-1][:300] if lines else "it printed nothing"

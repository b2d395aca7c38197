"""`hetero-emu serve` assembled: the AWS services the in-process session answers, behind one HTTP
endpoint with its guard and limits, and the live page of each job (docs/serve.md). The CLI's `serve`
command is a few lines over `serve` here."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import UsageError
from emulator.state import state_folder


@dataclass(frozen=True)
class Serving:
    """What `serve` is about to serve, told to `ready` once the port is bound."""

    url: str
    region: str
    s3_root: Path
    token: str | None  # the page's token when the server is reachable beyond this machine
    sdk_config: Path  # SAGEMAKER_USER_CONFIG_OVERRIDE for the SageMaker SDK (`sdk_config_for_serve`)
    also: tuple[str, ...] = ()  # the same server under the names given with `host_names`


def serve(*, host: str = "127.0.0.1", port: int = 4590, region: str | None = None, s3_root: Path | str | None = None,
          credentials: str | None = None, stop_jobs_on_exit: bool = False, images: Mapping[str, str] | None = None,
          engine_name: str = DEFAULT_ENGINE, ready: Callable[[Serving], None] = lambda serving: None,
          host_names: Sequence[str] = (), max_connections: int | None = None,
          allow_host_paths: Sequence[Path | str] = ()) -> None:
    """Serve every AWS operation the in-process session answers over HTTP (`AWS_ENDPOINT_URL`), and the
    live page of each job, until Ctrl-C or SIGTERM (docs/serve.md). Jobs started through it run in
    their own drivers and outlive the server, as on the service, unless `stop_jobs_on_exit`.

    Beyond the loopback interface, `credentials` ("KEY:SECRET", else $HETERO_EMU_CREDENTIALS) are
    required: every request's SigV4 signature is then checked with them, and the page asks for a token.
    Only requests for this server's own names are answered (localhost, its addresses, `host_names`), and
    AWS calls that may change something must be signed even without credentials (emulator/serve/guard.py);
    at most `max_connections` are open at once (emulator/serve/limits.py)."""
    import ipaddress
    import secrets as random_secrets

    try:
        from emulator.aws.endpoint import Endpoint
        from emulator.aws.sigv4 import Credentials
        from emulator.jobspec.request import HostPaths
        from emulator.sagemaker.local import local_aws, services
        from emulator.serve import guard, limits, page, server
    except ImportError as err:
        raise UsageError(f"`serve` needs the serve extra ({err.name} is not installed)",
                         hint="pip install 'hetero-emu[serve]' (or from a wheel: 'WHEEL[serve]'; from a clone: "
                         "pip install -e '.[serve]')") from None
    credentials = credentials or os.environ.get("HETERO_EMU_CREDENTIALS") or None
    try:
        local_only = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local_only = False
    if not local_only and credentials is None:
        raise UsageError(f"serving on {host} makes the endpoint reachable from other machines: give it credentials",
                         hint="--credentials KEY:SECRET (or $HETERO_EMU_CREDENTIALS); clients then sign with them")
    try:
        checked = Credentials.parse(credentials) if credentials is not None else None
    except ValueError as err:
        raise UsageError(f"--credentials: {err}", hint="KEY:SECRET, e.g. --credentials emu:$(openssl rand -hex 16)") \
            from None
    # A request names S3 locations only, or local paths under `allow_host_paths` (docs/serve.md).
    for root in allow_host_paths:
        if not Path(root).expanduser().is_dir():
            raise UsageError(f"--allow-host-path {root}: not a folder", hint="name a folder that exists")
    aws = local_aws(s3_root=s3_root, images=images, region=region, engine=engine_name, origin="serve(s3_root=...)",
                    host_paths=HostPaths.only(Path(root).expanduser() for root in allow_host_paths))
    endpoint = Endpoint(services(aws.training, aws.s3_root, aws.region), aws.region, credentials=checked)
    bad_names = [name for name in host_names if not guard.valid_host_name(name)]
    if bad_names:
        raise UsageError(f"--host-name {bad_names[0]!r}: not a host name or an IP address",
                         hint="--host-name NAME, the name clients put in the URL (e.g. --host-name emu.lan)")
    token = None if checked is None else random_secrets.token_urlsafe(16)
    bounds = limits.Limits(max_connections=limits.connection_limit(max_connections, limits.raise_open_files()))
    names = guard.HostNames(host, host_names)
    app = server.App(endpoint, page.routes(page.LiveJobs(aws.training, aws.training.tuning), token=token), names=names,
                     tally=limits.Tally(bounds))
    sock = server.bind(host, port)
    try:
        bound_port = sock.getsockname()[1]
        shown = [f"http://[{n}]:{bound_port}" if ":" in n else f"http://{n}:{bound_port}"
                 for n in (guard.reachable_name(host), *host_names)]
        config = sdk_config_for_serve(aws.region)
        ready(Serving(shown[0], aws.region, aws.s3_root, token, config, tuple(shown[1:])))
        server.run(app, sock, bounds)
    finally:
        sock.close()
        if stop_jobs_on_exit:
            # The tuning jobs first, so that their loops start no trial while the jobs stop; each loop
            # stops its own running trials.
            for name in list(aws.training.tuning.loops):
                with contextlib.suppress(Exception):
                    aws.training.tuning.stop({"HyperParameterTuningJobName": name})
            for name in list(aws.training.drivers):
                with contextlib.suppress(Exception):
                    aws.training.stop({"TrainingJobName": name})


def sdk_config_for_serve(region: str) -> Path:
    """A SageMaker SDK config file (the SDK reads it from $SAGEMAKER_USER_CONFIG_OVERRIDE) that names the
    default bucket, as an account's would, and turns the SDK's telemetry off.

    Why: with a plain `sagemaker.Session()`, `default_bucket()` asks STS for the account to name the
    bucket, through a client the SDK makes with an explicit `endpoint_url` of STS's regional AWS host
    (sagemaker/session.py `generate_default_sagemaker_bucket_name`, `utils.sts_regional_endpoint`),
    which AWS_ENDPOINT_URL cannot override. Naming the bucket in the SDK's own config is the one way
    that needs no code change: the SDK then never asks STS. The name is the one it would have built."""
    from emulator.aws.sts import ACCOUNT

    path = state_folder.state_dir() / "serve" / "sagemaker-config.yaml"
    text = ("# Written by `hetero-emu serve` for the SageMaker Python SDK (SAGEMAKER_USER_CONFIG_OVERRIDE).\n"
            "SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n"
            f"      Session:\n        DefaultS3Bucket: sagemaker-{region}-{ACCOUNT}\n")
    state_folder.write_atomically(path, text)
    return path

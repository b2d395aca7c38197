"""Plan -> a docker compose project: a compose template filled with the plan's values; `render`
writes it as compose.yaml. Filling is pure; `load_template` reads and checks the template.

The template (`compose-templates/compose.yaml`, shipped as `emulator/compose_templates/`, or the
user's own with `render --compose-template FILE`) is YAML in compose's own layout. Its `x-host` entry
under `services` becomes one service per host; a value tagged `!host NAME` is that host's (`host_values`),
one tagged `!plan NAME` the job's (`plan_values`). The default template's comments say the rest.

The project reproduces the plan's containers (names, hostnames, aliases, labels, mounts, env,
command) for people who prefer `docker compose up`, but not the service's lifecycle: compose cannot
fail the job on one host's non-zero exit without also stopping hosts that exit 0 early, which is why
`hetero-emu run` drives the engine itself.

Secrets (see `emulator.planning.secrets`) are not written into the file: a variable whose name marks it as a
secret, or whose value contains a secret's value, is listed by name only (`NAME: null`). Compose
then takes its value from the environment of the shell that runs `docker-compose up`, as `docker
run -e NAME` does; `compose_yaml` says so in a comment at the top of the file.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from emulator.errors import UsageError
from emulator.jobspec.wording import did_you_mean, reason
from emulator.planning.container import GPU_CAPABILITIES, GPU_DRIVER, ContainerSpec, Mount
from emulator.planning.plan import LABEL_DRIVER, Plan, host_addresses
from emulator.planning.secrets import masked_names

COMPOSE_DRIVER = "docker-compose"
# Rendering needs no engine, so it cannot ask Docker for a free subnet: the job network gets a /24
# derived from the job name inside 10.200.0.0/13 (2048 subnets), a range Docker's default pools do
# not use. Fixed addresses are what keep an exited host resolvable (see plan.host_addresses).
SUBNET_POOL = ipaddress.ip_network("10.200.0.0/13")


def job_subnet(job_name: str) -> tuple[str, str]:
    """(subnet, gateway) for a job's rendered network; the same name always gives the same subnet."""
    count = 2 ** (24 - SUBNET_POOL.prefixlen)
    index = int(hashlib.sha256(job_name.encode()).hexdigest(), 16) % count
    subnet = ipaddress.ip_network((int(SUBNET_POOL.network_address) + (index << 8), 24))
    return str(subnet), str(subnet.network_address + 1)


def _volume(mount: Mount, project_dir: str) -> str:
    source = mount.source
    # Paths inside the job folder are written relative to it, so a rendered folder can be moved.
    if source == project_dir or source.startswith(project_dir + os.sep):
        source = "./" + os.path.relpath(source, project_dir) if source != project_dir else "."
    return f"{source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"


# --------------------------------------------------------------------------------------------------
# The template: YAML whose `!host NAME` and `!plan NAME` values the plan fills


#: The service entry under `services` that becomes one service per host.
HOST_BLOCK = "x-host"
#: The `!host` names the template must use: without them a service would not run the host's code.
REQUIRED_HOST = ("image", "command", "volumes")
HOST_NAMES = ("image", "container_name", "hostname", "init", "labels", "environment", "volumes", "aliases",
              "ipv4_address", "extra_hosts", "command", "shm_size", "ulimits", "entrypoint", "memory", "devices",
              "ports", "gpus", "dns")
PLAN_NAMES = ("job_name", "network", "internal", "driver_opts", "labels", "subnet", "gateway")
SCOPES = {"host": HOST_NAMES, "plan": PLAN_NAMES}
TEMPLATE_FILE = "compose.yaml"
TEMPLATE_HINT = "see the default template's comments (hetero-emu's compose-templates/compose.yaml)"


@dataclass(frozen=True)
class Placeholder:
    """A `!host NAME` or `!plan NAME` value of the template."""

    scope: str
    name: str


class _TemplateLoader(yaml.SafeLoader):
    """The safe loader, with the two placeholder tags."""


def _construct_placeholder(loader: yaml.SafeLoader, node: yaml.Node) -> Placeholder:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(None, None, f"{node.tag} takes a name, not a list or mapping",
                                                node.start_mark)
    return Placeholder(node.tag[1:], str(loader.construct_scalar(node)))


for _scope in SCOPES:
    _TemplateLoader.add_constructor(f"!{_scope}", _construct_placeholder)


@dataclass(frozen=True)
class ComposeTemplate:
    """A checked template: the file it was read from and its document, placeholders as `Placeholder`s."""

    source: str  # the file, as named in errors
    document: Mapping[str, Any]

    @property
    def host_block(self) -> Mapping[str, Any]:
        block: Mapping[str, Any] = self.document["services"][HOST_BLOCK]
        return block


def default_template_path() -> Path:
    """The template `render` uses unless given one: `emulator/compose_templates/compose.yaml` in an
    installed package, else `compose-templates/compose.yaml` of the checkout (pyproject: package-dir)."""
    package = Path(__file__).resolve().parents[1]  # emulator/, beside its compose_templates/
    candidates = (package / "compose_templates" / TEMPLATE_FILE, package.parent / "compose-templates" / TEMPLATE_FILE)
    return next((c for c in candidates if c.is_file()), candidates[0])


def load_template(path: Path | str | None = None) -> ComposeTemplate:
    """Read and check a compose template (the default one when `path` is None); UsageError naming the
    file and what is wrong: unreadable, not YAML, no host block, an unknown or misplaced placeholder, a
    required one missing."""
    if path is None:
        return _default_template()
    return _read_template(Path(path))


@functools.lru_cache(maxsize=1)
def _default_template() -> ComposeTemplate:
    return _read_template(default_template_path())


def _read_template(path: Path) -> ComposeTemplate:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"compose template {source}: cannot be read: {reason(err)}",
                         hint="give a YAML file (--compose-template FILE)") from None
    try:
        document = yaml.load(text, Loader=_TemplateLoader)  # a SafeLoader with two more tags: plain data only
    except yaml.MarkedYAMLError as err:
        # The spec loader's wording: where, then PyYAML's own problem (its text names no file of ours).
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise UsageError(f"compose template {source}: not valid YAML: {where}{err.problem or err}",
                         hint=TEMPLATE_HINT) from None
    except yaml.YAMLError as err:
        raise UsageError(f"compose template {source}: not valid YAML: {err}", hint=TEMPLATE_HINT) from None
    problem = _template_problem(document)
    if problem is not None:
        raise UsageError(f"compose template {source}: {problem}", hint=TEMPLATE_HINT)
    return ComposeTemplate(source, document)


def _template_problem(document: Any) -> str | None:
    """What makes a loaded template unusable, or None."""
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict) or not isinstance(services.get(HOST_BLOCK), dict):
        return f"no `{HOST_BLOCK}` service under `services`, the entry every host's service is made from"
    found: list[tuple[str, Placeholder]] = []
    _placeholders(document, "", found)
    for where, placeholder in found:
        names = SCOPES[placeholder.scope]
        if placeholder.name not in names:
            near = did_you_mean(placeholder.name, names)
            return (f"{where}: unknown placeholder !{placeholder.scope} {placeholder.name}"
                    + (f" ({near})" if near else f" (names: {', '.join(names)})"))
        if placeholder.scope == "host" and not where.startswith(f"services.{HOST_BLOCK}."):
            return f"{where}: !host {placeholder.name} outside `services.{HOST_BLOCK}`, where no host is meant"
    used = {p.name for _, p in found if p.scope == "host"}
    missing = [name for name in REQUIRED_HOST if name not in used]
    if missing:
        return (f"`services.{HOST_BLOCK}` lacks the required placeholder(s) "
                f"{', '.join(f'!host {name}' for name in missing)}")
    return None


def _placeholders(node: Any, where: str, found: list[tuple[str, Placeholder]]) -> None:
    if isinstance(node, Placeholder):
        found.append((where or "(the whole file)", node))
    elif isinstance(node, dict):
        for key, value in node.items():
            _placeholders(value, f"{where}.{key}" if where else str(key), found)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _placeholders(value, f"{where}[{i}]", found)


# A placeholder whose value the plan does not have (None): its key, or list item, is left out.
_ABSENT = object()


def _fill(node: Any, values: Mapping[str, Mapping[str, Any]]) -> Any:
    """The template node with every placeholder replaced by its value, `$` doubled (`_escape`)."""
    if isinstance(node, Placeholder):
        value = values[node.scope][node.name]
        return _ABSENT if value is None else _escape(value)
    if isinstance(node, dict):
        filled = ((key, _fill(value, values)) for key, value in node.items())
        kept = {key: value for key, value in filled if value is not _ABSENT}
        # A mapping whose every key was left out goes too (`deploy:` of a host with no GPU).
        return _ABSENT if node and not kept else kept
    if isinstance(node, list):
        return [value for value in (_fill(item, values) for item in node) if value is not _ABSENT]
    return node


# --------------------------------------------------------------------------------------------------
# The plan's values


def compose_project(plan: Plan, template: ComposeTemplate | None = None) -> dict[str, Any]:
    """The compose document for a plan whose job folder is the compose project's folder: `template`
    (default: `load_template()`) with its host block written once per host."""
    template = template or load_template()
    subnet, gateway = job_subnet(plan.job_name)
    addresses = host_addresses(subnet, gateway, [h.name for h in plan.hosts])
    job = plan_values(plan, subnet, gateway)
    document: dict[str, Any] = {}
    for key, value in template.document.items():
        if key != "services":
            if (filled := _fill(value, {"plan": job})) is not _ABSENT:
                document[key] = filled
            continue
        services: dict[str, Any] = {}
        for name, entry in value.items():
            if name != HOST_BLOCK:
                services[name] = _fill(entry, {"plan": job})
                continue
            for host in plan.hosts:
                services[host.name] = _fill(entry, {"plan": job,
                                                    "host": host_values(host.container, addresses, plan.job_dir)})
        document[key] = services
    return document


def plan_values(plan: Plan, subnet: str, gateway: str) -> dict[str, Any]:
    """The `!plan` placeholders' values."""
    return {
        "job_name": plan.job_name,
        "network": plan.network,
        "internal": plan.network_isolation,
        # As `run` does: an isolated bridge gets no host address (see DockerBackend.create_network).
        "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "true"} if plan.network_isolation else None,
        "labels": dict(sorted({**plan.labels, LABEL_DRIVER: COMPOSE_DRIVER}.items())),
        "subnet": subnet,
        "gateway": gateway,
    }


def service(container: ContainerSpec, addresses: Mapping[str, str], project_dir: str) -> dict[str, Any]:
    """One host's compose service, as the default template's host block makes it from `host_values`."""
    filled: dict[str, Any] = _fill(load_template().host_block, {"host": host_values(container, addresses,
                                                                                     project_dir)})
    return filled


def host_values(container: ContainerSpec, addresses: Mapping[str, str], project_dir: str) -> dict[str, Any]:
    """The `!host` placeholders' values: every field of the host's `ContainerSpec`, translated once (the
    Docker backend's `container_options` is the other translation; tests/unit/test_container.py checks
    both). None: the host has no such value, and the template's key is left out."""
    return {
        "image": container.image,
        "container_name": container.name,
        "hostname": container.hostname,
        "init": container.init,
        # No driver process owns a compose project: `clean` and the leftover warning must not
        # take it for a job left behind (liveness: "cannot be told").
        "labels": dict(sorted({**container.labels, LABEL_DRIVER: COMPOSE_DRIVER}.items())),
        "environment": _environment(container.environment),
        "volumes": [_volume(m, project_dir) for m in container.mounts],
        "aliases": list(container.aliases),
        "ipv4_address": addresses[container.hostname],
        "extra_hosts": [f"{name}:{addresses[name]}" for name in container.extra_hosts],
        "dns": [addresses[name] for name in container.dns] or None,
        "command": list(container.command),
        "shm_size": container.shm_bytes,
        "ulimits": {u.name: {"soft": u.soft, "hard": u.hard} for u in container.ulimits},
        "entrypoint": list(container.entrypoint) if container.entrypoint is not None else None,
        # As `run` does: the instance's memory, swap included (compose 2.4 takes bytes).
        "memory": container.memory_bytes,
        "devices": [d.spec() for d in container.devices] or None,
        "ports": [p.spec() for p in container.ports] or None,
        # The same device ids `run` asks Docker for (compose's GPU form: docker-compose 1.28+, Compose v2).
        "gpus": [{"driver": GPU_DRIVER, "device_ids": list(container.gpus), "capabilities": list(GPU_CAPABILITIES)}]
        if container.gpus else None,
    }


def _environment(environment: Mapping[str, str]) -> dict[str, str | None]:
    """The service's environment: secrets by name only (None: compose reads them from the shell)."""
    bare = set(masked_names(environment))
    return {name: None if name in bare else value for name, value in sorted(environment.items())}


def secret_variables(plan: Plan) -> list[str]:
    """The variables the compose project lists by name only, sorted."""
    return sorted({name for host in plan.hosts for name in masked_names(host.container.environment)})


def compose_yaml(plan: Plan, template: ComposeTemplate | None = None) -> str:
    """compose.yaml's text: `compose_project` as YAML, after a comment naming the variables that must
    be exported before `docker-compose up` (the values are never written)."""
    text = yaml.safe_dump(compose_project(plan, template), sort_keys=False)
    header = []
    names = secret_variables(plan)
    if names:
        header += [
            "# Secrets are not written here: these variables are listed without a value, and",
            "# docker-compose takes each from the environment of the shell that runs it.",
            "# Export them first, e.g.:",
            *(f"#   export {name}=..." for name in names),
        ]
    piped = sorted({name for host in plan.hosts for name in host.pipes})
    if piped:
        # The FIFOs are made and fed by `hetero-emu run` (emulator.run.pipes), which compose does not run.
        header += [
            f"# Pipe input mode channels ({', '.join(piped)}) are streamed by `hetero-emu run` only: under",
            "# docker-compose their FIFOs /opt/ml/input/data/<channel>_<epoch> never appear.",
        ]
    return "\n".join([*header, text]) if header else text


def _escape(value: Any) -> Any:
    """Compose interpolates `$VAR` in every string value; `$$` is a literal `$`. The plan's strings
    (a shell entrypoint, an environment value) are meant literally, as `docker run` takes them."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: _escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape(v) for v in value]
    return value

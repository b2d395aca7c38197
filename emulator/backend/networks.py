"""A job's network on the Docker engine: the subnet it is given, and a network the engine will not
remove (moby#42119), told at once and remembered for `ps` and `clean`.

Subnets. Left to pick, the engine gives every bridge network a whole /16 of its default address pools
(172.17.0.0/16 to 172.31.0.0/16, then 192.168.0.0/16 in /20s: moby libnetwork/ipamutils/utils.go
`localScopeDefaultNetworks`), about 30 networks in all; a few leftovers beside many jobs exhaust them
("could not find an available, non-overlapping IPv4 address pool"). A job network needs one address
per host and the gateway, so it gets the smallest block that holds them (a /24 for up to 253 hosts)
carved out of `JOB_SUBNETS`, 172.16.0.0/16: the one /16 of the private 172.16.0.0/12 that the
engine's default pools leave out. A block another network of the engine holds, or that a route of
this machine covers (a LAN or VPN in that range), is skipped; one a job beside took at the same
moment is refused by the engine ("Pool overlaps") and the next is tried. HETERO_EMU_JOB_SUBNETS names
another range.

Stuck networks. Docker 20.10 keeps a count of each network's endpoints beside the endpoints
themselves, and two endpoints deleted at once can lose one decrement (libnetwork endpoint_cnt.go
`atomicIncDecEpCnt`: a retry after ErrKeyModified reloads the count over a decrement made in memory
and not stored yet). The count then never reaches zero: the engine refuses to remove the network
("has active endpoints") though no container is attached, and only an engine restart recounts it.
`remove_network` tells that refusal from a passing one (an endpoint being deleted right now) within
seconds, instead of retrying for the watcher's ten minutes, and marks the network in the engine itself
(`StuckNetworks`: an empty volume labelled with the network's id), so that `ps` shows it with the fix,
`clean` reports it instead of failing, and a later run does not count it as a leftover, whichever
state folder each of them has (a test session's own, CI's) and whichever user runs them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem

JOB_SUBNETS = "172.16.0.0/16"
# A job network's block is never smaller than this, so a job's hosts keep the addresses they would
# have in any other block of the same size.
LARGEST_PREFIX = 24
# How a refusal is confirmed as stuck: the removal is tried again after each pause (3.5 s in all).
# An endpoint being deleted right now (its container's removal under way) is gone well within that.
STUCK_PAUSES = (0.5, 1.0, 2.0)
RESTART_FIX = "sudo systemctl restart docker"
STUCK_STATUS = (f"stuck: the engine counts endpoints it no longer has (moby#42119); "
                f"only an engine restart frees it: {RESTART_FIX}")


def subnet_prefix(hosts: int) -> int:
    """The longest prefix whose block holds `hosts` addresses, the gateway, and the network and
    broadcast addresses; at most LARGEST_PREFIX."""
    needed = hosts + 3
    prefix = 32
    while prefix > 0 and (1 << (32 - prefix)) < needed:
        prefix -= 1
    return min(prefix, LARGEST_PREFIX)


def job_subnet_range() -> ipaddress.IPv4Network:
    """The range job networks are carved from: HETERO_EMU_JOB_SUBNETS, else JOB_SUBNETS."""
    given = os.environ.get("HETERO_EMU_JOB_SUBNETS") or JOB_SUBNETS
    try:
        return ipaddress.IPv4Network(given, strict=False)
    except ValueError:
        raise EnvironmentProblem(f"HETERO_EMU_JOB_SUBNETS={given!r} is not an IPv4 range",
                                 hint=f"give one in CIDR form, e.g. {JOB_SUBNETS}") from None


def candidate_subnets(hosts: int, taken: Iterable[str], after: str | None,
                      pool: ipaddress.IPv4Network) -> list[str]:
    """Every block of `pool` sized for `hosts` (subnet_prefix) that overlaps nothing in `taken`, in
    order, starting with the one after `after` (the block the last job got): consecutive jobs then
    take fresh blocks instead of all racing for the first one. Pure."""
    prefix = max(subnet_prefix(hosts), pool.prefixlen)
    held = []
    for subnet in taken:
        try:
            held.append(ipaddress.ip_network(subnet, strict=False))
        except ValueError:
            continue
    free = [str(block) for block in pool.subnets(new_prefix=prefix)
            if not any(block.version == h.version and block.overlaps(h) for h in held)]
    if after in free:
        start = free.index(after) + 1
        free = free[start:] + free[:start]
    return free


def local_routes(route_table: Path = Path("/proc/net/route")) -> list[str]:
    """The IPv4 destinations this machine routes to, but the default route (a LAN or a VPN a job
    network must not shadow); [] where there is no such table."""
    try:
        lines = route_table.read_text().splitlines()[1:]
    except OSError:
        return []
    routes = []
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            # Little-endian hex, as the kernel writes them.
            destination = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
            network = ipaddress.IPv4Network(f"{destination}/{mask}", strict=False)
        except ValueError:
            continue
        if network.prefixlen:
            routes.append(str(network))
    return routes


def engine_subnets(networks: Sequence[dict[str, Any]]) -> list[str]:
    """The subnets the engine's networks hold (`docker network ls`' answer: every network's IPAM)."""
    return [str(config["Subnet"]) for network in networks
            for config in ((network.get("IPAM") or {}).get("Config") or []) if config.get("Subnet")]


class NetworkStuck(EnvironmentProblem):
    """Networks the engine refuses to remove with no endpoint left (moby#42119): they stay until the
    engine restarts. Reported, never retried: a retry cannot succeed."""

    def __init__(self, networks: Sequence[str]) -> None:
        super().__init__(
            f"the engine will not remove network{'s' if len(networks) > 1 else ''} {', '.join(networks)}: it "
            "counts endpoints it no longer has (moby#42119), so it stays until the engine restarts",
            hint=f"restart the engine ({RESTART_FIX}), then `hetero-emu clean`; until then it holds only its "
            "name and its subnet, and `hetero-emu ps` lists it as stuck")
        self.networks = list(networks)


class StuckNetworks:
    """The networks of an engine found stuck, marked in the engine itself: one empty volume per network
    (`hetero-emu-stuck-network-<id>`), labelled with the network's id. Not the state folder: the engine
    is shared by every state folder and user, and the mark must reach all of them (CI's `clean` runs
    with one state folder, the test session after it with another). A volume costs no address, no
    bridge and no process; after an engine restart `clean` removes the network and its mark together.
    Best effort: an engine that refuses a volume only loses the mark. `api` is docker-py's APIClient."""

    LABEL = "hetero-emu.stuck-network"

    def __init__(self, api: Any) -> None:
        self._api = api

    def _marks(self) -> list[dict[str, Any]]:
        try:
            return list((self._api.volumes(filters={"label": self.LABEL}) or {}).get("Volumes") or [])
        except Exception:  # noqa: BLE001 - a mark that cannot be read is no mark
            return []

    def ids(self) -> set[str]:
        return {str((v.get("Labels") or {}).get(self.LABEL)) for v in self._marks()}

    def record(self, ident: str, name: str) -> None:
        since = datetime.now(timezone.utc).isoformat(timespec="seconds")
        # Creating a volume of a name that exists gives that volume back: two recorders agree.
        with contextlib.suppress(Exception):
            self._api.create_volume(name=f"hetero-emu-stuck-network-{ident[:12]}",
                                    labels={self.LABEL: ident, "hetero-emu.network-name": name,
                                            "hetero-emu.stuck-since": since})

    def keep_only(self, present: Iterable[str]) -> None:
        """Remove the marks of networks not in `present` (removed after an engine restart)."""
        present = set(present)
        for volume in self._marks():
            if (volume.get("Labels") or {}).get(self.LABEL) not in present:
                with contextlib.suppress(Exception):
                    self._api.remove_volume(volume["Name"])


def is_active_endpoints_refusal(error: Exception) -> bool:
    """The engine's refusal to remove a network it counts endpoints on (libnetwork network.go
    `delete`: "network %s id %s has active endpoints")."""
    return "has active endpoints" in str(error)


def remove_network(api: Any, ident: str, stuck: StuckNetworks, not_found: type[Exception],
                   sleep: Callable[[float], None] = time.sleep) -> bool:
    """Remove a network (by id or name) whose containers are gone: True when removed, False when it
    was not there. A refusal for active endpoints while the network's inspect lists no container is
    tried again after each of STUCK_PAUSES (at once for one `stuck` already marks: `clean` tries those
    again in case the engine restarted); still refused, the network is stuck: marked in `stuck`
    and raised as NetworkStuck. Any other engine error is raised as it is. `api` is docker-py's
    APIClient; `not_found` its NotFound (passed in, so the watcher imports docker-py only when it
    must)."""
    name = ident
    for pause in (*STUCK_PAUSES, None):
        try:
            api.remove_network(ident)
            return True
        except not_found:
            return False
        except Exception as err:
            if not is_active_endpoints_refusal(err):
                raise
            try:
                found = api.inspect_network(ident)
            except not_found:
                return False
            name = str(found.get("Name") or ident)
            if found.get("Containers"):
                raise  # a container is attached: a refusal that a later try may not get
            known = str(found.get("Id") or ident) in stuck.ids()
            if pause is None or known:  # found stuck before: no engine restart since, no pauses
                stuck.record(str(found.get("Id") or ident), name)
                raise NetworkStuck([name]) from None
            sleep(pause)
    raise AssertionError("unreachable")

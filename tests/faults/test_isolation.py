"""What a training container cannot do: no privileges, no added capabilities, no Docker socket, no host
network; with enable_network_isolation, no route out (not even to the Docker host) while the hosts
still reach each other."""

from __future__ import annotations

import fcntl
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import PRELUDE, Driver, cli, unique, write_spec

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

GIB = 1024**3


def tagged(output: str, tag: str) -> dict[str, Any]:
    """{host: payload} of the `TAG host {json}` lines the hosts printed."""
    found = {}
    for line in output.splitlines():
        _, bar, text = line.partition("| ")
        if bar and text.startswith(tag + " "):
            _, host, payload = text.split(" ", 2)
            found[host] = json.loads(payload)
    return found


SELF_CHECK = PRELUDE + """
status = Path("/proc/self/status").read_text()
caps = {k: v.strip() for k, v in (l.split(":", 1) for l in status.splitlines() if l.startswith("Cap"))}
mounts = Path("/proc/self/mountinfo").read_text()
report = {
    "cap_eff": caps["CapEff"], "cap_bnd": caps["CapBnd"],
    "docker_sock": [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)],
    "sock_mounts": [l for l in mounts.splitlines() if "docker.sock" in l],
    "interfaces": sorted(os.listdir("/sys/class/net")),
}
print("SELF", HOST, json.dumps(report, sort_keys=True), flush=True)
time.sleep(600)
"""


def test_containers_are_unprivileged_with_no_added_capabilities_socket_or_host_network(
    tmp_path: Path, docker_client: Any, training_image: str
) -> None:
    job, out = unique("iso-priv"), tmp_path / "out"
    spec = write_spec(tmp_path, SELF_CHECK)
    # What a plain `docker run` of the same image gets: the engine's default capability set.
    baseline = docker_client.containers.run(training_image, ["grep", "CapEff", "/proc/self/status"], remove=True)
    default_caps = baseline.decode().split(":", 1)[1].strip()
    with Driver(spec, job, out) as driver:
        driver.wait_for("SELF ", 2)
        configs = {h: docker_client.api.inspect_container(f"{job}-{h}") for h in ("algo-1", "algo-2")}
        driver.proc.send_signal(2)
        assert driver.wait() == 130
    reports = tagged(driver.output, "SELF")
    assert set(reports) == {"algo-1", "algo-2"}
    for host, config in configs.items():
        hc = config["HostConfig"]
        assert hc["Privileged"] is False
        assert not hc["CapAdd"]
        assert not hc.get("Devices")
        assert hc["NetworkMode"] == f"hetero-emu-{job}"  # its job's own network, never "host"
        assert hc["PidMode"] == "" and hc["IpcMode"] != "host" and hc["UsernsMode"] == ""
        assert list(config["NetworkSettings"]["Networks"]) == [f"hetero-emu-{job}"]
        assert not any("docker.sock" in (m.get("Source") or "") for m in config["Mounts"])
        # The instance type's memory is the limit (ml.c5.xlarge: 8 GiB), with no swap beyond it.
        assert hc["Memory"] == hc["MemorySwap"] == 8 * GIB
        # "No CPU or GPU is reserved": no CPU quota, shares or pinning, no GPU device request.
        assert not (hc.get("NanoCpus") or hc.get("CpuQuota") or hc.get("CpuShares") or hc.get("CpusetCpus"))
        assert not hc.get("DeviceRequests")
        report = reports[host]
        assert report["cap_eff"] == default_caps, report
        assert report["docker_sock"] == [] and report["sock_mounts"] == []
        assert report["interfaces"] == ["eth0", "lo"]


# --------------------------------------------------------------------------------------------------
# enable_network_isolation


@pytest.fixture
def host_service() -> Iterator[int]:
    """A TCP service on every address of the Docker host: what an isolated job must not reach."""
    server = socket.create_server(("0.0.0.0", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.sendall(b"host")
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join(2)
    server.close()


PROBE = PRELUDE + """
def try_connect(address, port):
    try:
        with socket.create_connection((address, port), timeout=3) as s:
            return "reached"
    except OSError as err:
        return type(err).__name__ + ": " + str(err)

routes = [l.split() for l in Path("/proc/net/route").read_text().splitlines()[1:]]
gateway = next((socket.inet_ntoa(bytes.fromhex(r[2])[::-1]) for r in routes if r[1] == "00000000"), None)
peer = [h for h in RC["hosts"] if h != HOST][0]
server = socket.create_server(("", 7000))
threading_ok = __import__("threading").Thread(target=lambda: [server.accept() for _ in range(5)], daemon=True)
threading_ok.start()
time.sleep(1)
report = {
    "peer": try_connect(peer, 7000),
    "job_gateway": try_connect(gateway, PORT) if gateway else "no default route",
    "docker_bridge": try_connect(BRIDGE, PORT),
    "host_lan": try_connect(LAN, PORT),  # the machine's address on its own network: the way out
}
print("PROBE", HOST, json.dumps(report, sort_keys=True), flush=True)
time.sleep(2)  # let the peer finish its probe of us
"""


def interface_address(name: str) -> str:
    """The IPv4 address of one of the Docker host's interfaces (SIOCGIFADDR, see netdevice(7))."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
    return socket.inet_ntoa(packed[20:24])


def lan_address() -> str:
    """The address of the Docker host's default-route interface (read from its /proc/net/route)."""
    for line in Path("/proc/net/route").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return interface_address(fields[0])
    raise AssertionError("the Docker host has no default route")


def probe(tmp_path: Path, docker_client: Any, port: int, isolated: bool) -> dict[str, dict[str, str]]:
    bridge = interface_address(docker_client.api.inspect_network("bridge")["Options"]
                               .get("com.docker.network.bridge.name", "docker0"))
    script = PROBE.replace("PORT", str(port)).replace("BRIDGE", repr(bridge)).replace("LAN", repr(lan_address()))
    folder = tmp_path / ("isolated" if isolated else "open")
    spec = write_spec(folder, script, enable_network_isolation=isolated)
    result = cli("run", str(spec), "--output-path", str(folder / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    reports = tagged(result.stdout, "PROBE")
    assert set(reports) == {"algo-1", "algo-2"}, result.stderr[-3000:]
    return reports


def test_network_isolation_leaves_no_route_out_while_hosts_reach_each_other(
    tmp_path: Path, docker_client: Any, host_service: int
) -> None:
    isolated = probe(tmp_path, docker_client, host_service, isolated=True)
    for host, report in isolated.items():
        assert report["peer"] == "reached", (host, report)
        assert report["job_gateway"] != "reached", (host, report)
        assert report["docker_bridge"] != "reached", (host, report)  # the Docker host's own addresses
        assert report["host_lan"] != "reached", (host, report)


def test_without_isolation_the_same_probe_reaches_the_docker_host(
    tmp_path: Path, docker_client: Any, host_service: int
) -> None:
    # The control: the probe can tell "reached" from "not reached", so the isolated result means something.
    open_ = probe(tmp_path, docker_client, host_service, isolated=False)
    for host, report in open_.items():
        assert report["peer"] == "reached", (host, report)
        assert report["job_gateway"] == "reached", (host, report)
        assert report["docker_bridge"] == "reached", (host, report)
        assert report["host_lan"] == "reached", (host, report)

"""What AWS's training image of a framework version carries for scripts (scipy, pandas, opencv, the SageMaker
SDK, smdebug, ...: emulator/data/frameworks.json `aws_packages`, scripts/aws_image_packages.py), for real: in
a built framework image, the image's own pip lists every package at the version the table records, its
Python imports each one's modules, and the venv's own pins (the framework, numpy, protobuf) are unmoved."""

from __future__ import annotations

import json
from collections.abc import Callable

import docker
import pytest

from emulator.training_images.frameworks import choose

pytestmark = [pytest.mark.docker]

# Run by the image's own Python: pip's view of the venv, and each distribution's top-level modules imported.
PROBE = r'''
import importlib, importlib.metadata as md, json, subprocess, sys
names = sys.argv[1:]
listed = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(subprocess.check_output(
    [sys.executable, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"]))}
failed = {}
for name in names:
    dist = md.distribution(name)
    tops = (dist.read_text("top_level.txt") or "").split()
    if not tops:  # wheels of some build backends have no top_level.txt: their files' first folder
        tops = sorted({str(f).split("/")[0].removesuffix(".py") for f in dist.files or [] if str(f).endswith(".py")})
    for module in [t for t in tops if t and not t.startswith("_") and t.isidentifier()][:3]:
        try:
            importlib.import_module(module)
        except Exception as err:  # any failure to import is what the test reports
            failed[name + ":" + module] = "%s: %s" % (type(err).__name__, err)
print("PROBE_JSON " + json.dumps({"listed": listed, "failed": failed}), flush=True)
'''

CASES = [
    pytest.param("tensorflow", "2.9.2", "py39", id="tensorflow-2.9-py39"),
    pytest.param("pytorch", "1.11.0", "py38", id="pytorch-1.11-py38"),
]


@pytest.mark.parametrize(("framework", "version", "py_version"), CASES)
def test_the_image_has_what_aws_image_carries_at_the_recorded_versions(
        docker_client: docker.DockerClient, framework_image: Callable[[str, str, str], str], framework: str,
        version: str, py_version: str) -> None:
    target = choose(framework, version, py_version)
    assert target.aws_packages, f"the table records no AWS image packages for {framework} {version}"
    image = framework_image(framework, version, py_version)
    wanted = dict(pin.split("==") for pin in target.aws_packages)
    venv = dict(pin.split("==") for pin in target.requirements)
    out = docker_client.containers.run(image, ["python", "-c", PROBE, *wanted], remove=True, entrypoint=[],
                                       environment={"TF_CPP_MIN_LOG_LEVEL": "3"}).decode()
    probe = json.loads(out.split("PROBE_JSON ", 1)[1])
    listed = probe["listed"]
    # Every package AWS's image installs (and the table keeps) is there, at the version pip chose for it.
    assert {n: listed.get(n) for n in wanted} == wanted
    # ... and installing them moved none of the venv's pins (framework, toolkits, numpy, protobuf).
    assert {n: listed.get(n) for n in venv} == venv
    assert probe["failed"] == {}

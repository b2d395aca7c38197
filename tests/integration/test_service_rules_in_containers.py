"""Requests the service accepts and the emulator once refused (issue 31, point 4), run on the real engine
through SDK v2 as a notebook writes them, only the session swapped for `EmulatorSession`:

- `enable_network_isolation=True` with `entry_point` + `source_dir`: the SDK ships the code as a `code`
  channel and sets `sagemaker_submit_directory` to `/opt/ml/input/data/code/sourcedir.tar.gz`
  (sagemaker/estimator.py `CONTAINER_CODE_CHANNEL_SOURCEDIR_PATH`); the script runs from /opt/ml/code,
  imports its helper module, sees the `code` channel and has no route out of the job's network.
- an `output_path` inside the input channel's prefix: every host reads the files the channel held before
  the job (not the job's own folder growing in it), the model lands at `<output>/<job>/output/`, and the
  user's files are as they were.

The unit side of both is tests/unit/test_service_rules.py.
"""

from __future__ import annotations

import json
import socket
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sagemaker.estimator import Estimator
from sagemaker.inputs import TrainingInput
from sagemaker.pytorch import PyTorch
from testkit import unique

from emulator.defaults import DEFAULT_IMAGE
from emulator.sagemaker import EmulatorSession

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
BUCKET = "notebook-bucket"
TYPE = "ml.c5.xlarge"

# Each host writes what it sees into /opt/ml/model/<host>.json: the model.tar.gz the job uploads is
# the record, read after the job as a user would read it.
ISOLATED_SCRIPT = '''
import errno, json, os, socket, sys
import helper  # source_dir's other module: importable only if the whole sourcedir.tar.gz was unpacked

host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
hosts = json.load(open("/opt/ml/input/config/resourceconfig.json"))["hosts"]


def connect(address, port):
    try:
        with socket.create_connection((address, port), timeout=2):
            return "reached"
    except OSError as err:
        return errno.errorcode.get(err.errno, str(err.errno)) if err.errno else type(err).__name__


code = "/opt/ml/input/data/code"
seen = {
    "cwd": os.getcwd(),
    "argv0": os.path.abspath(sys.argv[0]),
    "helper": helper.GREETING,
    "helper_file": helper.__file__,
    "code_listing": sorted(os.listdir("/opt/ml/code")),
    "channels": sorted(os.listdir("/opt/ml/input/data")),
    "code_channel": sorted(os.listdir(code)) if os.path.isdir(code) else None,
    "train_channel": sorted(os.listdir("/opt/ml/input/data/train")),
    "peers": {h: socket.gethostbyname(h) for h in hosts},  # the job's own hosts stay reachable by name
    "outside": connect(os.environ["OUTSIDE_ADDRESS"], int(os.environ["OUTSIDE_PORT"])),
}
print("SEEN " + json.dumps(seen, sort_keys=True), flush=True)
with open(f"/opt/ml/model/{host}.json", "w") as f:
    json.dump(seen, f)
'''

HELPER = 'GREETING = "hello from helper.py"\n'

# What the channel holds on every host, and the model file that says so.
LISTING_SCRIPT = '''
import json, os
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
root = "/opt/ml/input/data/train"
files = {}
for folder, _, names in os.walk(root):
    for name in names:
        path = os.path.join(folder, name)
        files[os.path.relpath(path, root)] = open(path).read()
print("LISTED " + json.dumps(files, sort_keys=True), flush=True)
with open(f"/opt/ml/model/{host}.json", "w") as f:
    json.dump(files, f)
'''


def model_files(archive: Path) -> dict[str, Any]:
    """{member: its JSON} of a model.tar.gz the hosts wrote."""
    with tarfile.open(archive) as tar:
        return {m.name: json.load(tar.extractfile(m)) for m in tar.getmembers() if m.isfile()}  # type: ignore[arg-type]


def outside_address() -> str:
    """An address of the Docker host on its own network (its default route's interface): what a host
    of the job would use to leave it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): no packet is sent for a UDP connect
        return str(s.getsockname()[0])


@pytest.fixture
def outside_service() -> Iterator[int]:
    """A TCP service on every address of the Docker host, which an isolated job must not reach."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    server.close()


@pytest.fixture
def session(tmp_path: Path) -> EmulatorSession:
    (tmp_path / "s3" / BUCKET).mkdir(parents=True)
    return EmulatorSession(s3_root=tmp_path / "s3", default_bucket=BUCKET)


# --------------------------------------------------------------------------------------------------
# SDK v2's code channel under network isolation


@pytest.fixture
def pytorch_1_11(framework_image: Callable[[str, str, str], str]) -> str:
    """The image that stands in for ECR's pytorch-training:1.11.0 py38, as in test_aws_examples (built
    by scripts/test.sh; built here if it is not): the smaller of the PyTorch images."""
    return framework_image("pytorch", "1.11.0", "py38")


@pytest.mark.usefixtures("pytorch_1_11")
def test_an_isolated_pytorch_estimator_with_a_source_dir_runs_its_code_from_the_code_channel(
        tmp_path: Path, session: EmulatorSession, outside_service: int) -> None:
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text(ISOLATED_SCRIPT)
    (code / "helper.py").write_text(HELPER)
    (tmp_path / "s3" / BUCKET / "data" / "train").mkdir(parents=True)
    (tmp_path / "s3" / BUCKET / "data" / "train" / "rows.csv").write_text("1,2\n")
    address = outside_address()
    # The control: this machine's service answers on that address, so "unreachable" below is the job's.
    with socket.create_connection((address, outside_service), timeout=3):
        pass

    name = unique("isolated-code")
    estimator = PyTorch(
        entry_point="train.py", source_dir=str(code), framework_version="1.11.0", py_version="py38",
        role=ROLE, sagemaker_session=session, instance_count=2, instance_type=TYPE,
        enable_network_isolation=True, max_run=300,
        environment={"OUTSIDE_ADDRESS": address, "OUTSIDE_PORT": str(outside_service)},
    )
    estimator.fit({"train": f"s3://{BUCKET}/data/train"}, job_name=name, logs=False)

    described = session.describe_training_job(name)
    assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
    assert described["EnableNetworkIsolation"] is True
    # What the SDK sent: the code as a channel of its own, the submit directory that channel's file.
    code_uri = f"s3://{BUCKET}/{name}/source/sourcedir.tar.gz"
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in described["InputDataConfig"]}
    assert channels == {"train": f"s3://{BUCKET}/data/train", "code": code_uri}
    assert json.loads(described["HyperParameters"]["sagemaker_submit_directory"]) == \
        "/opt/ml/input/data/code/sourcedir.tar.gz"

    assert estimator.model_data == f"s3://{BUCKET}/{name}/output/model.tar.gz"
    seen = model_files(tmp_path / "s3" / BUCKET / name / "output" / "model.tar.gz")
    assert sorted(seen) == ["algo-1.json", "algo-2.json"]
    for host, info in seen.items():
        assert info["cwd"] == "/opt/ml/code", host  # the toolkit runs the entry point from the code
        assert info["argv0"] == "/opt/ml/code/train.py", host
        assert (info["helper"], info["helper_file"]) == ("hello from helper.py", "/opt/ml/code/helper.py"), host
        assert {"train.py", "helper.py"} <= set(info["code_listing"]), host
        assert info["channels"] == ["code", "train"], host
        assert info["code_channel"] == ["sourcedir.tar.gz"], host
        assert info["train_channel"] == ["rows.csv"], host
        assert set(info["peers"]) == {"algo-1", "algo-2"}, host
        # No way out of the job's network: the Docker host's service, which answered the test itself
        # above, is not reached (the connection times out or is refused a route).
        assert info["outside"] != "reached", (host, info["outside"])


# --------------------------------------------------------------------------------------------------
# An output path inside the channel's prefix


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int, int]]:
    """Every file under `folder`: its bytes, inode, mtime and link count."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_nlink)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("channel", "output"), [
    ("prefix", "prefix/output"),  # the notebook's <prefix>/output, the channel the whole prefix
    ("prefix/data", "prefix/data"),  # the channel's own prefix as the output path
], ids=["output-inside-the-channel", "output-is-the-channel"])
def test_an_output_path_inside_the_channels_prefix_leaves_the_channel_as_it_was_before_the_job(
        tmp_path: Path, session: EmulatorSession, channel: str, output: str) -> None:
    code = tmp_path / "src"
    code.mkdir()
    (code / "train.py").write_text(LISTING_SCRIPT)
    data = tmp_path / "s3" / BUCKET / "prefix" / "data"
    data.mkdir(parents=True)
    (data / "a.csv").write_text("1\n")
    (data / "more").mkdir()
    (data / "more" / "b.csv").write_text("2\n")
    channel_dir = tmp_path / "s3" / BUCKET / channel
    before = snapshot(channel_dir)
    expected = {name: content.decode() for name, (content, *_) in before.items()}

    name = unique("output-in-channel")
    estimator = Estimator(
        image_uri=DEFAULT_IMAGE, entry_point="train.py", source_dir=str(code), role=ROLE, sagemaker_session=session,
        instance_count=2, instance_type=TYPE, output_path=f"s3://{BUCKET}/{output}", max_run=300,
    )
    estimator.fit({"train": TrainingInput(f"s3://{BUCKET}/{channel}")}, job_name=name, logs=False)

    assert session.describe_training_job(name)["TrainingJobStatus"] == "Completed"
    assert estimator.model_data == f"s3://{BUCKET}/{output}/{name}/output/model.tar.gz"
    artifact = tmp_path / "s3" / BUCKET / output / name / "output" / "model.tar.gz"
    assert artifact.is_file()
    # Both hosts read exactly the files that were there before the job, none of the job's own folder.
    assert model_files(artifact) == {"algo-1.json": expected, "algo-2.json": expected}
    # The user's files: the same bytes, the same inodes and times, no link of the job's left to them.
    after = snapshot(channel_dir)
    assert {k: v for k, v in after.items() if k in before} == before
    job_folder = (tmp_path / "s3" / BUCKET / output / name).relative_to(channel_dir)
    assert all(Path(k).is_relative_to(job_folder) for k in set(after) - set(before)), sorted(after)
    assert not any(".staging" in k for k in after), sorted(after)

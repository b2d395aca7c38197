"""S3 on a local root (emulator.jobspec.s3): which root (--s3-root, $HETERO_EMU_S3_ROOT, local_s3_root, the
default), how s3://bucket/key maps under it, what is refused, and sourcedir.tar.gz as the code."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator import api
from emulator.errors import SpecError
from emulator.jobspec import JobSpec, hyperparameters, s3
from emulator.planning.plan import make_plan

Raw = dict[str, Any]


def write_archive(path: Path, files: dict[str, str], *, links: dict[str, str] | None = None) -> Path:
    """A sourcedir.tar.gz as the SDK packs it (sagemaker/utils.py create_tar_file: members named
    relative to source_dir, gzip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def load_file(project: Path, raw: Raw, **options: Any) -> JobSpec:
    path = project / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return api.load(path, **options)


def problems(project: Path, raw: Raw, **options: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_file(project, raw, **options)
    return [str(p) for p in info.value.problems]


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    """Four roots, each with bucket bkt/train/<origin>.csv, so a loaded spec tells which root it used."""
    out = {}
    for origin in ("option", "env", "spec", "default"):
        base = tmp_path / "data-home" / "hetero-emu" / "s3" if origin == "default" else tmp_path / origin
        (base / "bkt" / "train").mkdir(parents=True)
        (base / "bkt" / "train" / f"{origin}.csv").write_text("x\n")
        out[origin] = base
    return out


# --------------------------------------------------------------------------------------------------
# Which root


@pytest.mark.parametrize(
    ("option", "env", "spec", "expected"),
    [
        (True, True, True, "option"),
        (False, True, True, "env"),
        (False, False, True, "spec"),
        (False, False, False, "default"),
        (True, False, False, "option"),
        (False, True, False, "env"),
    ],
)
def test_the_root_comes_from_option_then_environment_then_spec_then_default(
    option: bool, env: bool, spec: bool, expected: str, roots: dict[str, Path], project: Path,
    valid_raw: Raw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    if env:
        monkeypatch.setenv(s3.ENV_S3_ROOT, str(roots["env"]))
    if spec:
        valid_raw["local_s3_root"] = str(roots["spec"])
    valid_raw["inputs"]["training"]["s3_data"] = "s3://bkt/train"
    loaded = load_file(project, valid_raw, s3_root=roots["option"] if option else None)
    assert loaded.inputs["training"].source == roots[expected].resolve() / "bkt" / "train"
    assert loaded.inputs["training"].files == (f"{expected}.csv",)


def test_the_default_root_is_under_the_users_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_DATA_HOME")
    assert s3.default_root() == Path.home() / ".local" / "share" / "hetero-emu" / "s3"
    assert s3.choose_root(None).origin == "the default root"


def test_a_spec_root_relative_to_the_spec_file(project: Path, valid_raw: Raw) -> None:
    valid_raw["local_s3_root"] = "s3"
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/prefix/train"
    spec = load_file(project, valid_raw)
    assert spec.inputs["training"].source == (project / "s3" / "my-bucket" / "prefix" / "train").resolve()


@pytest.mark.parametrize("origin", ["--s3-root", "HETERO_EMU_S3_ROOT"])
def test_a_named_root_that_does_not_exist_names_where_it_came_from(
    origin: str, project: Path, valid_raw: Raw, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = project / "no-such-root"
    options: dict[str, Any] = {}
    if origin == "--s3-root":
        options["s3_root"] = missing
    else:
        monkeypatch.setenv(s3.ENV_S3_ROOT, str(missing))
    found = problems(project, valid_raw, **options)
    assert found == [f"{origin}: S3 root not found: {missing} (a folder whose subfolders are buckets)"]


# --------------------------------------------------------------------------------------------------
# URIs


@pytest.mark.parametrize(
    ("uri", "relative"),
    [
        ("s3://my-bucket/prefix/train", "my-bucket/prefix/train"),
        ("s3://my-bucket/prefix/train/", "my-bucket/prefix/train"),
        ("s3://my.bucket-1/a//b", "my.bucket-1/a/b"),
        ("s3://my-bucket", "my-bucket"),
    ],
)
def test_an_s3_uri_maps_to_bucket_and_key_under_the_root(uri: str, relative: str, tmp_path: Path) -> None:
    root = s3.Root(tmp_path, "--s3-root", True)
    assert s3.local_path(root, uri) == tmp_path.resolve() / relative


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("s3://b/../../etc", "is not a well-formed S3 URI"),  # bucket "b": too short
        ("s3://my-bucket/../../etc", "leaves its bucket"),
        ("s3://my-bucket/a/./b", "leaves its bucket"),
        ("s3://My_Bucket/key", "is not a bucket name"),
        ("s3:/my-bucket/key", "is not a well-formed S3 URI"),
        ("s3://", "is not a bucket name"),
        ("s3://..my/key", "is not a bucket name"),
    ],
)
def test_malformed_or_escaping_uris_are_refused(uri: str, fragment: str, tmp_path: Path) -> None:
    with pytest.raises(s3.BadS3Uri) as info:
        s3.local_path(s3.Root(tmp_path, "--s3-root", True), uri)
    assert fragment in str(info.value)
    assert "s3://bucket/key" in info.value.hint


def test_a_bucket_linked_out_of_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "root" / "my-bucket").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(s3.BadS3Uri, match="leads outside the S3 root"):
        s3.local_path(s3.Root(tmp_path / "root", "--s3-root", True), "s3://my-bucket/key")


def test_every_bad_uri_is_one_problem_naming_its_field(project: Path, valid_raw: Raw) -> None:
    valid_raw["local_s3_root"] = "s3"
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/nowhere"
    valid_raw["output_path"] = "s3://my-bucket/../../out"
    valid_raw["checkpoint_s3_uri"] = "s3://X/ckpt"
    found = problems(project, valid_raw)
    root = (project / "s3").resolve()
    assert found == [
        f"inputs.training.s3_data: channel data not found: no prefix s3://my-bucket/nowhere under the S3 root "
        f"{root} (local_s3_root) (looked for {root}/my-bucket/nowhere) (put the objects at {root}/my-bucket/nowhere, "
        "or choose the root with --s3-root, HETERO_EMU_S3_ROOT or local_s3_root)",
        f"output_path: 's3://my-bucket/../../out' leaves its bucket: a key with '.' or '..' parts has no place "
        f"under the S3 root ({s3.URI_HINT})",
        f"checkpoint_s3_uri: 's3://X/ckpt' is not a well-formed S3 URI: 'X' is not a bucket name ({s3.URI_HINT})",
    ]


def test_an_s3_output_path_puts_the_job_at_the_services_key(project: Path, valid_raw: Raw) -> None:
    """<prefix>/<job>/output/model.tar.gz: the job folder is <root>/bucket/prefix/<job>."""
    valid_raw["local_s3_root"] = "s3"
    valid_raw["output_path"] = "s3://my-bucket/jobs"
    spec = load_file(project, valid_raw)
    assert spec.output_path == (project / "s3" / "my-bucket" / "jobs").resolve()
    plan = make_plan(spec, "hetero-test", "spec", 0)
    assert Path(plan.job_dir) == spec.output_path / "hetero-test"



def test_job_json_names_the_s3_uris_as_describe_training_job_does(
        project: Path, valid_raw: Raw, monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_backend import FakeBackend, exits

    from emulator.reports.console import RecordingReporter
    from emulator.run import runner

    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    valid_raw["local_s3_root"] = "s3"
    valid_raw["output_path"] = "s3://my-bucket/jobs/"
    valid_raw["checkpoint_s3_uri"] = "s3://my-bucket/ckpt"
    spec = load_file(project, valid_raw)
    hosts = {f"algo-{i}": exits(0) for i in range(1, spec.host_count + 1)}
    result = runner.run_job(spec, backend=FakeBackend(hosts), reporter=RecordingReporter())
    doc = json.loads((result.job_dir / "job.json").read_text())
    job = result.job_name
    assert doc["OutputDataConfig"]["S3OutputPath"] == "s3://my-bucket/jobs"
    assert doc["ModelArtifacts"] == {"S3ModelArtifacts": f"s3://my-bucket/jobs/{job}/output/model.tar.gz"}
    # ... and the object is there, under the root at that key.
    assert (project / "s3" / "my-bucket" / "jobs" / job / "output" / "model.tar.gz").resolve().is_file()
    assert doc["CheckpointConfig"]["S3Uri"] == "s3://my-bucket/ckpt"


# --------------------------------------------------------------------------------------------------
# sourcedir.tar.gz


def test_an_s3_sourcedir_archive_is_the_code(project: Path, valid_raw: Raw, tmp_path: Path) -> None:
    write_archive(project / "s3" / "my-bucket" / "src" / "sourcedir.tar.gz",
                  {"train.py": "print('from the archive')\n", "lib/util.py": "X = 1\n"}, links={"link.py": "train.py"})
    valid_raw.update(local_s3_root="s3", source_dir="s3://my-bucket/src/sourcedir.tar.gz")
    spec = load_file(project, valid_raw)
    assert spec.source_archive
    assert spec.source_dir == (project / "s3" / "my-bucket" / "src" / "sourcedir.tar.gz").resolve()
    # The toolkit finds the code already in /opt/ml/code and does not download it
    # (sagemaker_training/files.py download_and_extract skips a non-empty folder).
    assert hyperparameters.encoded(spec, "job")["sagemaker_submit_directory"] == '"/opt/ml/code"'
    out = tmp_path / "render"
    api.render(spec, out)
    for host in ("algo-1", "algo-2", "algo-3"):
        code = out / "hosts" / host / "code"
        assert (code / "train.py").read_text() == "print('from the archive')\n"
        assert (code / "lib" / "util.py").read_text() == "X = 1\n"
        assert (code / "link.py").is_symlink()


def test_a_request_submit_directory_in_s3_is_unpacked(project: Path, tmp_path: Path) -> None:
    write_archive(project / "s3" / "my-bucket" / "job" / "source" / "sourcedir.tar.gz", {"train.py": "pass\n"})
    doc = {
        "TrainingJobName": "from-request",
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"',
                            "sagemaker_submit_directory": '"s3://my-bucket/job/source/sourcedir.tar.gz"'},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
        "OutputDataConfig": {"S3OutputPath": "s3://my-bucket/out"},
    }
    path = project / "request.json"
    path.write_text(json.dumps(doc))
    spec = api.load(path, s3_root=project / "s3")
    assert spec.source_archive and spec.entry_point == "train.py"
    assert spec.output_path == (project / "s3" / "my-bucket" / "out").resolve()


def sdk_request(project: Path, job: str, **channels: str) -> Path:
    """A request laid out as SDK v2 sends it by default: output to the bucket itself, the code in
    <bucket>/<job>/source/sourcedir.tar.gz."""
    write_archive(project / "s3" / "my-bucket" / job / "source" / "sourcedir.tar.gz", {"train.py": "pass\n"})
    doc = {
        "TrainingJobName": job,
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"',
                            "sagemaker_submit_directory": f'"s3://my-bucket/{job}/source/sourcedir.tar.gz"'},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
        "OutputDataConfig": {"S3OutputPath": "s3://my-bucket/"},
        "InputDataConfig": [{"ChannelName": name, "DataSource": {"S3DataSource": {
            "S3Uri": uri, "S3DataType": "S3Prefix"}}} for name, uri in channels.items()],
    }
    path = project / "request.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_sdks_layout_under_an_s3_output_prefix_is_accepted(project: Path) -> None:
    """The default output path is the bucket, where upload_data also puts the data, and the code lies
    in the job's own prefix: only <bucket>/<job>/ is the job's, and its source/ is the SDK's."""
    (project / "s3" / "my-bucket" / "data" / "train").mkdir(parents=True)
    (project / "s3" / "my-bucket" / "data" / "train" / "a.csv").write_text("1\n")
    spec = api.load(sdk_request(project, "sdk-job", train="s3://my-bucket/data/train"), s3_root=project / "s3")
    assert spec.source_archive


def test_data_inside_the_jobs_own_prefix_is_refused(project: Path) -> None:
    (project / "s3" / "my-bucket" / "sdk-job" / "mine").mkdir(parents=True)
    (project / "s3" / "my-bucket" / "sdk-job" / "mine" / "a.csv").write_text("1\n")
    with pytest.raises(SpecError) as info:
        api.load(sdk_request(project, "sdk-job", train="s3://my-bucket/sdk-job/mine"), s3_root=project / "s3")
    assert [p.path for p in info.value.problems] == ["OutputDataConfig.S3OutputPath"]
    assert "(s3://my-bucket/sdk-job/mine) lies inside the job's own folder s3://my-bucket/sdk-job/" in str(
        info.value.problems[0])


def test_a_run_shares_its_prefix_with_the_sdks_upload_and_a_failed_staging_leaves_it(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.errors import JobFolderTaken
    from emulator.run import staging

    spec = api.load(sdk_request(project, "sdk-job"), s3_root=project / "s3")
    job_dir = project / "s3" / "my-bucket" / "sdk-job"
    assert not staging.folder_taken(job_dir, s3_output=True)
    assert staging.folder_taken(job_dir, s3_output=False)  # a local output folder is never shared

    def broken(plan: object, folder: Path, *progress: object) -> None:
        (folder / "hosts").mkdir()
        raise OSError("disk full")

    monkeypatch.setattr(staging, "_lay_out", broken)
    with pytest.raises(Exception, match="disk full"):
        staging.stage(make_plan(spec, "sdk-job", "spec", 0))
    assert sorted(p.name for p in job_dir.iterdir()) == ["source"]  # the run's own entries went, the code stayed
    monkeypatch.undo()
    staging.stage(make_plan(spec, "sdk-job", "spec", 0))
    assert {"source", "logs", "hosts", "output"} <= {p.name for p in job_dir.iterdir()}
    assert staging.folder_taken(job_dir, s3_output=True)  # now an earlier job's
    with pytest.raises(JobFolderTaken):
        staging.stage(make_plan(spec, "sdk-job", "spec", 0))


@pytest.mark.parametrize(
    ("files", "links", "entry", "fragment"),
    [
        ({"other.py": ""}, {}, "train.py", "it has no 'train.py'"),
        ({"train.py": "", "../evil.py": ""}, {}, "train.py", "would not stay a plain file"),
        ({"train.py": ""}, {"out": "/etc/passwd"}, "train.py", "would not stay a plain file"),
    ],
)
def test_an_archive_the_toolkit_could_not_use_is_refused(
    files: dict[str, str], links: dict[str, str], entry: str, fragment: str, project: Path, valid_raw: Raw
) -> None:
    write_archive(project / "s3" / "my-bucket" / "sourcedir.tar.gz", files, links=links)
    valid_raw.update(local_s3_root="s3", source_dir="s3://my-bucket/sourcedir.tar.gz", entry_point=entry)
    found = problems(project, valid_raw)
    assert len(found) == 1 and found[0].startswith("source_dir: s3://my-bucket/sourcedir.tar.gz: "), found
    assert fragment in found[0]


def test_a_missing_archive_is_a_missing_prefix(project: Path, valid_raw: Raw) -> None:
    valid_raw.update(local_s3_root="s3", source_dir="s3://my-bucket/nope/sourcedir.tar.gz")
    assert any("no prefix s3://my-bucket/nope/sourcedir.tar.gz under the S3 root" in p
               for p in problems(project, valid_raw))


def test_unpack_keeps_members_inside(tmp_path: Path) -> None:
    archive = write_archive(tmp_path / "sourcedir.tar.gz", {"a/b.py": "b\n"})
    staging_target = tmp_path / "code"
    s3.unpack(archive, staging_target)
    assert sorted(p.relative_to(staging_target).as_posix() for p in staging_target.rglob("*")) == ["a", "a/b.py"]




# --------------------------------------------------------------------------------------------------
# S3Prefix: every key that starts with the prefix


def prefix_bucket(project: Path) -> Path:
    """my-bucket/data holding part-0.csv, part-1/x.csv, part-10.csv and other.csv."""
    data = project / "s3" / "my-bucket" / "data"
    for key in ("part-0.csv", "part-1/x.csv", "part-10.csv", "other.csv"):
        (data / key).parent.mkdir(parents=True, exist_ok=True)
        (data / key).write_text(key)
    return data


def test_an_s3prefix_that_is_no_folder_is_every_key_starting_with_it(project: Path, valid_raw: Raw,
                                                                     tmp_path: Path) -> None:
    """The audit's finding: `s3://b/data/part-` was refused, though the service downloads every key
    that starts with it (placed by its name under data/) and the emulator's own S3 lists them."""
    from emulator.run import staging

    data = prefix_bucket(project)
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/data/part-"
    valid_raw["output_path"] = str(tmp_path / "out")
    spec = load_file(project, valid_raw, s3_root=project / "s3")
    channel = spec.inputs["training"]
    assert (channel.source, channel.files, channel.key_prefix) == (data, ("part-0.csv", "part-1/x.csv",
                                                                        "part-10.csv"), True)
    plan = make_plan(spec, "prefix-job", "spec", 0)
    staging.stage(plan)
    host = next(h for h in plan.hosts if "training" in h.channels)
    mount = next(m for m in host.container.mounts if m.target == "/opt/ml/input/data/training")
    seen = sorted(p.relative_to(mount.source).as_posix() for p in Path(mount.source).rglob("*") if p.is_file())
    assert seen == ["part-0.csv", "part-1/x.csv", "part-10.csv"] and mount.read_only
    assert (data / "other.csv").read_text() == "other.csv"  # the user's data is untouched
    assert spec.inputs["training"].s3_data == "s3://my-bucket/data/part-"  # named as given


@pytest.mark.parametrize(("uri", "files"), [
    ("s3://my-bucket/data/part-", ("part-0.csv", "part-1/x.csv", "part-10.csv")),
    ("s3://my-bucket/data/part-1", None),  # a folder: its contents, as the common `s3://b/train` means
    ("s3://my-bucket/data/part-10.csv", None),  # one file no other key starts with: that file
    ("s3://my-bucket/data", None),  # a folder: its contents, as before
])
def test_a_prefix_takes_exactly_the_keys_that_start_with_it(project: Path, valid_raw: Raw, uri: str,
                                                            files: tuple[str, ...] | None) -> None:
    prefix_bucket(project)
    valid_raw["inputs"]["training"]["s3_data"] = uri
    channel = load_file(project, valid_raw, s3_root=project / "s3").inputs["training"]
    if files is None:
        assert not channel.key_prefix
    else:
        assert channel.key_prefix and channel.files == files


def test_a_prefix_no_key_starts_with_is_not_found(project: Path, valid_raw: Raw) -> None:
    prefix_bucket(project)
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/data/nothing-"
    [problem] = problems(project, valid_raw, s3_root=project / "s3")
    assert "channel data not found: no prefix s3://my-bucket/data/nothing-" in problem


def test_an_output_beside_a_prefixs_keys_and_checkpoints_among_them_are_accepted(project: Path,
                                                                                  valid_raw: Raw) -> None:
    prefix_bucket(project)
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/data/part-"
    valid_raw["output_path"] = "s3://my-bucket/data/results"
    spec = load_file(project, valid_raw, s3_root=project / "s3")  # data/results is not a key the prefix reads
    files = spec.inputs["training"].files
    valid_raw["checkpoint_s3_uri"] = "s3://my-bucket/data/part-1/ckpt"
    spec = load_file(project, valid_raw, s3_root=project / "s3")  # staged from the keys listed before the job
    assert spec.inputs["training"].key_prefix and spec.inputs["training"].files == files

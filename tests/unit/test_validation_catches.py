"""Validation catches what would fail later (issue 7, part 7), each a clear exit 2 before anything is
staged: job names past 63 characters, entry points the toolkit refuses, an output folder that cannot
be created, and `render -o` inside what the job reads.

The CLI runs as `python -m emulator.cli` in a subprocess (main() maps errors to exit codes), also
as another user (setpriv) and inside a mount namespace with a read-only mount (unshare), because the
tests run as root, for whom permission bits do not stop a write.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from entry_points import ENTRY_POINTS
from testkit import CliResult, invoke

from emulator import Job
from emulator.errors import Problem, SpecError
from emulator.jobspec import JOB_NAME_PATTERN, MAX_JOB_NAME, JobSpec, entry_point_problem
from emulator.planning.plan import job_name_from

HEAD = """\
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
"""


def in_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """`sh -c SCRIPT` as root of a private user and mount namespace (unshare): the script mounts, then
    execs the CLI, which must be a process of its own to live in that namespace."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=60)


def assert_refused(result: CliResult | subprocess.CompletedProcess[str], *fragments: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output and "internal error" not in output, output
    for fragment in fragments:
        assert fragment in output, f"{fragment!r} not in:\n{output}"


# --------------------------------------------------------------------------------------------------
# Job names


HYPHENS_231 = "a" + "-" * 229 + "b"  # matches the API pattern: `-*` lets any number of hyphens through


@pytest.mark.parametrize("name", [HYPHENS_231, "a" * 64, "a-" * 31 + "bc", "a" + "-" * 62 + "b"])
def test_job_name_longer_than_63_is_refused(name: str, expect_problem: Callable[..., Problem]) -> None:
    assert len(name) > MAX_JOB_NAME
    expect_problem(HEAD + f"job_name: {name}\n", "job_name", f"is {len(name)} characters long",
                   hint="base_job_name")


@pytest.mark.parametrize("name", ["a" * 63, "a" + "-" * 61 + "b", "A1", "x"])
def test_job_name_of_at_most_63_is_accepted(name: str, load: Callable[[str], JobSpec]) -> None:
    assert load(HEAD + f"job_name: {name}\n").job_name == name


def test_job_name_on_the_command_line_is_checked_the_same(project: Path,
                                                          write_spec: Callable[[str], Path]) -> None:
    spec = write_spec(HEAD + "job_name: short\n")
    rendered = str(project / "rendered")
    assert_refused(invoke("render", str(spec), "-o", rendered, "--job-name", HYPHENS_231), "job_name:",
                   "231 characters long")
    assert_refused(invoke("run", str(spec), "--job-name", HYPHENS_231), "job_name:", "231 characters long")
    assert not (project / "rendered").exists()
    assert not (project / "output").exists(), "nothing may be staged"


def test_job_name_in_the_python_api_is_checked_the_same(project: Path) -> None:
    with pytest.raises(SpecError) as info:
        Job(job_name=HYPHENS_231, entry_point="train.py", source_dir="code", instance_type="ml.c5.xlarge",
            base_dir=project).spec()
    assert [p.path for p in info.value.problems] == ["job_name"]


@pytest.mark.parametrize("length", [1, 2, 38, 39, 40, 63, 64, 231, 5000])
def test_generated_name_stays_a_valid_63_character_name(length: int, load: Callable[[str], JobSpec]) -> None:
    """The SDK's name_from_base cuts the base to 63 - 24 characters; whatever the base (hyphens
    included, even where the cut falls), the name it makes passes the API's pattern and length."""
    rng = random.Random(length)
    for _ in range(20):
        middle = "".join(rng.choice("ab-") for _ in range(max(0, length - 2)))
        base = ("x" + middle + "y")[:length] if length > 1 else "x"
        spec = load(HEAD + f"base_job_name: {base}\n")
        name = job_name_from(spec, datetime(2024, 1, 2, 3, 4, 5, 678000))
        assert len(name) <= MAX_JOB_NAME and JOB_NAME_PATTERN.fullmatch(name), name
        assert load(HEAD + f"job_name: {name}\n").job_name == name


@pytest.mark.parametrize("base", ["-a", "a-", "a_b", "a.b", ""])
def test_base_job_name_needs_the_job_name_characters(base: str, problems: Callable[[str], list[Problem]]) -> None:
    found = problems(HEAD + f"base_job_name: '{base}'\n")
    assert [p.path for p in found] == ["base_job_name"]


# --------------------------------------------------------------------------------------------------
# Entry points


@pytest.mark.parametrize(("name", "reason"), ENTRY_POINTS, ids=[repr(n) for n, _ in ENTRY_POINTS])
def test_entry_point_rule_matches_the_toolkits(name: str, reason: str | None) -> None:
    problem = entry_point_problem(name)
    assert problem is None if reason is None else (problem is not None and reason in problem), problem


def test_final_newline_is_refused_although_the_toolkit_lets_it_through() -> None:
    """The toolkit's regex ends in `$`, which matches before a final newline (documented difference)."""
    assert entry_point_problem("train.py\n") == "the character(s) '\\n'"


@pytest.mark.parametrize("name", ["./run.sh", "trän.py", "sub/./run.sh", "-x.py"])
def test_refused_entry_point_that_exists_in_source_dir_is_a_spec_error(
    name: str, project: Path, expect_problem: Callable[..., Problem]
) -> None:
    (project / "code" / name).parent.mkdir(parents=True, exist_ok=True)
    (project / "code" / name).write_text("echo hi\n")
    expect_problem(HEAD.replace("train.py", f"'{name}'"), "entry_point", "cannot be run by the training toolkit",
                   hint="only letters, digits")


def test_without_source_dir_only_the_scripts_own_name_counts(project: Path, load: Callable[[str], JobSpec],
                                                             expect_problem: Callable[..., Problem]) -> None:
    """Without source_dir the SDK uploads the file alone and sagemaker_program is its base name."""
    (project / "run.sh").write_text("echo hi\n")
    assert load("entry_point: ./run.sh\ninstance_type: ml.c5.xlarge\n").entry_point == "run.sh"
    (project / "trän.py").write_text("")
    expect_problem("entry_point: ./trän.py\ninstance_type: ml.c5.xlarge\n", "entry_point", "'ä'")


def test_a_container_entry_point_of_its_own_does_not_use_the_toolkits_rule(
    project: Path, load: Callable[[str], JobSpec], expect_problem: Callable[..., Problem]
) -> None:
    (project / "code" / "trän.py").write_text("")
    spec = HEAD.replace("train.py", "trän.py")
    assert load(spec + "container_entry_point: [python3, /opt/ml/code/trän.py]\n").entry_point == "trän.py"
    expect_problem(spec + "container_entry_point: [/usr/local/bin/train]\n", "entry_point", "'ä'")


def test_refused_entry_point_exits_2_before_anything_is_staged(project: Path,
                                                               write_spec: Callable[[str], Path]) -> None:
    (project / "code" / "run.sh").write_text("echo hi\n")
    spec = write_spec(HEAD.replace("train.py", "./run.sh"))
    assert_refused(invoke("run", str(spec)), "entry_point: './run.sh' cannot be run by the training toolkit")
    assert not (project / "output").exists()


# --------------------------------------------------------------------------------------------------
# An output folder that cannot be created


def test_output_path_under_a_file_is_refused(project: Path, expect_problem: Callable[..., Problem]) -> None:
    (project / "blocker").write_text("")
    expect_problem(HEAD + "output_path: blocker/out\n", "output_path", "blocker is a file, not a folder")


@pytest.fixture
def shared_project() -> Iterator[Path]:
    """A project another user can read (pytest's tmp_path is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="hetero-emu-ro-"))
    try:
        (root / "code").mkdir()
        (root / "code" / "train.py").write_text("print('hi')\n")
        (root / "job.yaml").write_text("job_name: read-only\n" + HEAD)
        os.chmod(root, 0o755)
        yield root
    finally:
        os.chmod(root, 0o755)
        shutil.rmtree(root)


def _can(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def cli_as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    """`hetero-emu ARGS` as the user `nobody`, in a forked copy of this process: a new interpreter could
    not even import the package when the checkout lies in a folder other users cannot read (CI clones
    into one). The child drops to nobody, runs the CLI's main with its stderr into a pipe, and exits with
    the CLI's exit code."""
    import grp
    import pwd
    import traceback

    from typer.testing import CliRunner

    from emulator import cli as cli_module

    # The same command once as root here: what the CLI imports on first use (typer's parsers, the
    # standard library) is then loaded, as the child could not read it.
    CliRunner().invoke(cli_module.app, list(args))
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.dup2(write, 2)
            os.setgroups([])
            os.setgid(nogroup)
            os.setuid(nobody)
            os.chdir("/")
            sys.argv = ["hetero-emu", *args]
            sys.stderr = os.fdopen(2, "w", closefd=False)
            cli_module.main()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(["hetero-emu", *args], os.waitstatus_to_exitcode(status), "", err)


def test_project_folder_not_writable_by_the_user_is_refused(shared_project: Path) -> None:
    """As the user `nobody`, a project folder of mode 0555 owned by root: the default output_path
    (next to the spec) cannot be created. Before, validate passed and the run failed."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the CLI as another user")
    os.chmod(shared_project, 0o555)
    result = cli_as_nobody("validate", str(shared_project / "job.yaml"))
    assert_refused(result, f"output_path: {shared_project}/output cannot be created: {shared_project} is not "
                   "writable by this user", "--output-path")
    # The control: the same folder, writable by nobody, validates.
    os.chmod(shared_project, 0o777)
    result = cli_as_nobody("validate", str(shared_project / "job.yaml"))
    assert result.returncode == 0, result.stderr


def test_project_folder_on_a_read_only_mount_is_refused_even_for_root(shared_project: Path) -> None:
    """A read-only bind mount of the project (in a private mount namespace, unshare): the kernel
    refuses the write with EROFS whoever asks, and so does validation."""
    if not _can(["unshare", "--user", "--map-root-user", "--mount", "true"]):
        pytest.skip("unprivileged user and mount namespaces are not available")
    script = (f"mount --bind -o ro {shared_project} {shared_project} && "
              f"exec {sys.executable} -m emulator.cli validate {shared_project}/job.yaml")
    result = in_mount_namespace(script)
    assert_refused(result, f"output_path: {shared_project}/output cannot be created: {shared_project} is on a "
                   "read-only filesystem")


def test_checkpoint_folder_on_a_read_only_mount_is_refused(shared_project: Path) -> None:
    if not _can(["unshare", "--user", "--map-root-user", "--mount", "true"]):
        pytest.skip("unprivileged user and mount namespaces are not available")
    (shared_project / "ckpt").mkdir()
    with (shared_project / "job.yaml").open("a") as spec:
        spec.write(f"checkpoint_s3_uri: ckpt\noutput_path: {tempfile.gettempdir()}\n")
    script = (f"mount --bind -o ro {shared_project}/ckpt {shared_project}/ckpt && "
              f"exec {sys.executable} -m emulator.cli validate {shared_project}/job.yaml")
    result = in_mount_namespace(script)
    assert_refused(result, f"checkpoint_s3_uri: {shared_project}/ckpt is on a read-only filesystem")
    assert "--output-path" not in result.stderr


# --------------------------------------------------------------------------------------------------
# render -o inside what the job reads


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(("target", "field"), [
    ("code/rendered", "source_dir"),
    ("code", "source_dir"),
    ("data/train/deep/er", "inputs.training"),
    ("ckpt/r", "checkpoint_s3_uri"),
])
def test_render_into_what_the_job_reads_is_refused_naming_o(
    target: str, field: str, project: Path, write_spec: Callable[[str], Path]
) -> None:
    (project / "ckpt").mkdir()
    spec = write_spec(HEAD + "job_name: r\ninputs: {training: data/train}\ncheckpoint_s3_uri: ckpt\n")
    before = _tree(project)
    result = invoke("render", str(spec), "-o", str(project / target))
    assert_refused(result, f"-o {project / target} is inside {field}", "choose a folder outside")
    assert _tree(project) == before, "nothing may be written"


def test_render_into_a_folder_that_cannot_be_made_is_refused(project: Path,
                                                             write_spec: Callable[[str], Path]) -> None:
    (project / "blocker").write_text("")
    result = invoke("render", str(write_spec(HEAD + "job_name: r\n")), "-o", str(project / "blocker" / "out"))
    assert_refused(result, "-o:", "blocker is a file, not a folder")

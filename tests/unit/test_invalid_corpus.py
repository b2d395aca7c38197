"""The corpus of bad input in tests/data/invalid/: every case must fail cleanly with its message.

Each `<case>.yaml` starts with comment lines that say what the real command line must answer (see
tests/data/invalid/README.md): `# expect:` fragments that must all appear in the output, optionally
`# command:` (validate or render), `# args:` and `# exit:` (default 2). The CLI runs in-process through
`emulator.cli.main`, the function the `hetero-emu` entry point calls, so the exit code is the one a
user gets; a traceback or an "internal error" is always a failure.

The second half covers what a corpus of committed files cannot hold: sockets, FIFOs and symlink loops
made in a temporary folder, and spec files that are not regular files.
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import invoke

from emulator.errors import SpecError
from emulator.jobspec import MAX_SPEC_BYTES, JobSpec, load_spec_file, validate

CORPUS = Path(__file__).resolve().parent.parent / "data" / "invalid"
CASES = sorted(CORPUS.glob("*.yaml"))
MIN_CASES = 40
DIRECTIVES = ("expect", "args", "command", "exit")


@dataclass
class Case:
    path: Path
    expect: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    command: str = "validate"
    exit: int = 2


def parse_case(path: Path) -> Case:
    """Read the leading `# key: value` lines (ASCII, before the first line that is not a comment)."""
    case = Case(path)
    for raw_line in path.read_bytes().split(b"\n"):
        if not raw_line.startswith(b"#"):
            break
        line = raw_line.decode("ascii").rstrip("\r")
        key, sep, value = line[1:].strip().partition(":")
        if not sep or key not in DIRECTIVES:
            continue  # a plain comment
        value = value.strip()
        if key == "expect":
            case.expect.append(value)
        elif key == "args":
            case.args = shlex.split(value)
        elif key == "command":
            case.command = value
        else:
            case.exit = int(value)
    return case


@dataclass
class Outcome:
    code: int
    output: str


def run_cli(argv: list[str]) -> Outcome:
    """`hetero-emu ARGV` in this process: main() maps every error to its exit code and message."""
    result = invoke(*argv)
    return Outcome(result.returncode, result.stdout + result.stderr)


def expand(args: list[str], case: Case, out: Path) -> list[str]:
    return [a.replace("{out}", str(out)).replace("{here}", str(case.path.parent)) for a in args]


# --------------------------------------------------------------------------------------------------
# The corpus


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= MIN_CASES, f"only {len(CASES)} cases in {CORPUS}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_case_says_what_it_expects(path: Path) -> None:
    case = parse_case(path)
    assert case.expect, f"{path.name} has no '# expect:' line"
    assert all(case.expect), f"{path.name} has an empty '# expect:' line"
    assert case.command in ("validate", "render"), f"{path.name}: unknown command {case.command!r}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_invalid_case_fails_cleanly_with_its_message(
    path: Path, tmp_path: Path
) -> None:
    case = parse_case(path)
    outcome = run_cli([case.command, str(path), *expand(case.args, case, tmp_path / "out")])
    assert "Traceback" not in outcome.output, outcome.output
    assert "internal error" not in outcome.output, outcome.output
    assert outcome.code == case.exit, f"exit {outcome.code}, expected {case.exit}:\n{outcome.output}"
    missing = [e for e in case.expect if e not in outcome.output]
    assert not missing, f"missing {missing} in:\n{outcome.output}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "render wrote output"


def test_the_fixtures_alone_make_a_valid_spec(tmp_path: Path) -> None:
    """The baseline every case breaks: without the breakage, the same paths and groups validate."""
    spec = CORPUS / "_fixtures" / "valid.yaml"
    outcome = run_cli(["validate", str(spec)])
    assert outcome.code == 0, outcome.output
    assert "2 group(s), 3 host(s), 2 channel(s)" in outcome.output


def test_a_case_without_expect_is_caught(tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text("# a comment, but no expectation\njob_name: x\n")
    assert parse_case(bare).expect == []
    typo = tmp_path / "typo.yaml"
    typo.write_text("# expcet: something\njob_name: x\n")
    assert parse_case(typo).expect == []


# --------------------------------------------------------------------------------------------------
# What a committed corpus cannot hold: special files made here


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "data").mkdir()
    (root / "data" / "a.csv").write_text("1\n")
    return root


def raw_spec(**extra: Any) -> dict[str, Any]:
    return {
        "job_name": "special-files",
        "entry_point": "train.py",
        "source_dir": "code",
        "instance_type": "ml.c5.xlarge",
        "instance_count": 2,
        "inputs": {"training": "data"},
        **extra,
    }


def problems_of(raw: dict[str, Any], base: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        validate(raw, base_dir=base)
    return [str(p) for p in info.value.problems]


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """Bind a real unix socket at a path (kept short: sun_path holds about 107 bytes)."""
    opened: list[socket.socket] = []

    def make(path: Path) -> Path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        opened.append(sock)
        sock.bind(str(path))
        return path

    yield make
    for sock in opened:
        sock.close()


@pytest.mark.parametrize(
    ("where", "field_path", "kind"),
    [
        ("data", "inputs.training.s3_data", "socket"),
        ("code", "source_dir", "socket"),
        ("ckpt", "checkpoint_s3_uri", "socket"),
        ("data", "inputs.training.s3_data", "FIFO"),
        ("code", "source_dir", "FIFO"),
        ("ckpt", "checkpoint_s3_uri", "FIFO"),
    ],
)
def test_socket_or_fifo_inside_what_the_job_reads_is_refused(
    project: Path, unix_socket: Callable[[Path], Path], where: str, field_path: str, kind: str
) -> None:
    folder = project / where
    folder.mkdir(exist_ok=True)
    target = folder / "engine.sock"
    if kind == "socket":
        unix_socket(target)
    else:
        os.mkfifo(target)
    found = problems_of(raw_spec(checkpoint_s3_uri="ckpt"), project)
    mine = [p for p in found if p.startswith(f"{field_path}:")]
    assert mine, found
    assert str(target) in mine[0] and f"is a {kind}" in mine[0], mine[0]
    assert "regular files" in mine[0], "the message must say why"


def test_channel_that_is_a_socket_is_refused(project: Path, unix_socket: Callable[[Path], Path]) -> None:
    sock = unix_socket(project / "d.sock")
    found = problems_of(raw_spec(inputs={"training": {"s3_data": "d.sock"}}), project)
    assert any(p.startswith("inputs.training.s3_data:") and f"{sock} is a socket" in p for p in found), found


def test_channel_folder_holding_the_socket_deep_down_is_refused(
    project: Path, unix_socket: Callable[[Path], Path]
) -> None:
    deep = project / "data" / "run" / "docker"
    deep.mkdir(parents=True)
    unix_socket(deep / "s")
    os.mkfifo(project / "data" / "pipe")
    found = problems_of(raw_spec(), project)
    (problem,) = [p for p in found if p.startswith("inputs.training.s3_data:")]
    assert "(and 1 more)" in problem


def test_symlink_to_a_socket_is_refused(project: Path, unix_socket: Callable[[Path], Path], tmp_path: Path) -> None:
    """Sharding hard-links through symlinks and checkpoints are copied through them: a link to a
    socket is as bad as the socket."""
    sock = unix_socket(tmp_path / "outside.sock")
    (project / "data" / "link").symlink_to(sock)
    found = problems_of(raw_spec(), project)
    assert any("is a socket" in p for p in found), found


def test_socket_in_a_folder_reached_through_a_link_is_refused(
    project: Path, unix_socket: Callable[[Path], Path], tmp_path: Path
) -> None:
    """Linked folders are entered (as aws s3 sync enters them), so what they hold is checked too."""
    (tmp_path / "run").mkdir()
    sock = unix_socket(tmp_path / "run" / "s")
    (project / "data" / "run").symlink_to(tmp_path / "run")
    found = problems_of(raw_spec(), project)
    assert any(p.startswith("inputs.training.s3_data:") and "is a socket" in p and "run/s" in p for p in found), (
        found, sock)


def test_device_as_a_channel_is_refused(project: Path) -> None:
    found = problems_of(raw_spec(inputs={"training": "/dev/null"}), project)
    assert any("/dev/null is a character device" in p for p in found), found


def test_symlinks_leaving_a_channel_are_followed_as_aws_s3_sync_follows_them(project: Path, tmp_path: Path) -> None:
    """A link to a file outside is a key under the link's name; a link to a folder outside gives
    that folder's files under the link's path; the channel is marked to be staged."""
    (tmp_path / "outside.csv").write_text("o\n")
    (tmp_path / "shelf" / "deep").mkdir(parents=True)
    (tmp_path / "shelf" / "deep" / "x.csv").write_text("x\n")
    data = project / "data"
    (data / "outside.csv").symlink_to(tmp_path / "outside.csv")
    (data / "shelf").symlink_to(tmp_path / "shelf")
    spec = validate(raw_spec(inputs={"training": {"s3_data": "data", "distribution": "ShardedByS3Key"}}),
                    base_dir=project)
    assert spec.inputs["training"].files == ("a.csv", "outside.csv", "shelf/deep/x.csv")
    assert spec.inputs["training"].links_out


@pytest.mark.parametrize("where", ["data", "code"])
@pytest.mark.parametrize("layout", ["dangling", "loop of links", "folder loop"])
def test_links_an_upload_cannot_follow_are_refused_naming_the_link(project: Path, tmp_path: Path,
                                                                   where: str, layout: str) -> None:
    """The SDK's tar (dereference=True) raises on a dangling link and recurses without end through a
    link to a folder above it; aws s3 sync skips such links and exits 2: a clear problem here."""
    link = project / where / "sub" / "bad"
    link.parent.mkdir()
    if layout == "dangling":
        link.symlink_to(tmp_path / "nowhere")
    elif layout == "loop of links":
        link.symlink_to(link.parent / "other")
        (link.parent / "other").symlink_to(link)
    else:
        link.symlink_to("..")
    field = "inputs.training.s3_data" if where == "data" else "source_dir"
    found = [p for p in problems_of(raw_spec(), project) if p.startswith(field + ":")]
    assert len(found) == 1, found
    assert str(link) in found[0] and ("loop" in found[0] or "leads nowhere" in found[0]), found[0]
    assert "following symlinks" in found[0], "the hint says why"


def test_symlink_loop_as_a_path_is_a_problem_not_a_crash(project: Path) -> None:
    (project / "loop1").symlink_to(project / "loop2")
    (project / "loop2").symlink_to(project / "loop1")
    found = problems_of(raw_spec(inputs={"training": "loop1/data"}, source_dir="loop1"), project)
    assert any(p.startswith("inputs.training.s3_data:") for p in found), found
    assert any(p.startswith("source_dir:") for p in found), found


@pytest.mark.parametrize("where", ["/", "/proc/self", "link-to-proc"])
def test_the_whole_file_system_or_a_system_folder_is_not_data(project: Path, where: str) -> None:
    """Listing /proc/self would never end (its `root` leads back to "/", each task's again): refused
    at once, also behind a link inside the job's own folders."""
    if where == "link-to-proc":
        (project / "data" / "proc").symlink_to("/proc/self")
        where = "data"
    found = [p for p in problems_of(raw_spec(inputs={"training": where}), project)
             if p.startswith("inputs.training.s3_data:")]
    assert len(found) == 1 and "system folder (/proc, /sys, /dev), not data" in found[0], found


def test_a_link_gone_while_the_folder_is_listed_is_a_problem_not_a_crash(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "data" / "gone").symlink_to(project / "nowhere")
    monkeypatch.setattr(os, "readlink", lambda path: (_ for _ in ()).throw(FileNotFoundError(2, "gone", path)))
    found = [p for p in problems_of(raw_spec(), project) if p.startswith("inputs.training.s3_data:")]
    assert len(found) == 1 and "a symlink that leads nowhere (?)" in found[0], found


# --------------------------------------------------------------------------------------------------
# Spec files that are not ordinary files


def test_spec_file_past_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as stream:
        stream.truncate(MAX_SPEC_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(SpecError) as info:
        load_spec_file(big)
    assert "larger than 1 MiB" in info.value.problems[0].message


def test_endless_spec_stream_is_cut_at_the_cap() -> None:
    with pytest.raises(SpecError) as info:
        load_spec_file("/dev/zero")
    assert "larger than 1 MiB" in info.value.problems[0].message


def test_fifo_spec_file_is_read_like_a_file(tmp_path: Path, project: Path) -> None:
    """`hetero-emu validate <(generate-spec)` hands over a pipe: it is read up to the cap."""
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    text = yaml.safe_dump(raw_spec(source_dir=str(project / "code"), inputs={"training": str(project / "data")},
                                   output_path=str(tmp_path / "out")))

    def write() -> None:
        with open(fifo, "w") as stream:
            stream.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    spec = load_spec_file(fifo)
    writer.join(timeout=10)
    assert isinstance(spec, JobSpec)
    assert spec.host_count == 2


def test_validate_of_a_non_mapping_is_a_spec_error(tmp_path: Path) -> None:
    not_mappings: list[Any] = [[], "job", 3, None]
    for raw in not_mappings:
        with pytest.raises(SpecError) as info:
            validate(raw, base_dir=tmp_path)
        assert "must be a mapping" in info.value.problems[0].message

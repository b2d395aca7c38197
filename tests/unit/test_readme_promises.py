"""Documented promises and their tests: the map tests/README-promises.md is checked against the
tests and the pages (every test it names exists; the code a promise quotes is on a page of its
section), and the promises no other unit test held are kept here, each test naming the sentence it
keeps true."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from markdown_links import Link, broken
from testkit import invoke

from emulator.backend.docker import DockerBackend
from emulator.backend.liveness import driver_alive
from emulator.jobspec import JobSpec
from emulator.planning.compose import COMPOSE_DRIVER
from emulator.planning.plan import make_plan, shard

Raw = dict[str, Any]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`hetero-emu ARGV` through the entry point's main(), in this process: (exit code, stdout + stderr)."""
    result = invoke(*argv)
    return result.returncode, result.stdout + result.stderr


# --------------------------------------------------------------------------------------------------
# "`--debug` (anywhere on the command line) shows tracebacks."


def test_debug_shows_the_traceback_that_is_hidden_otherwise(
    tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-spec.yaml")
    code, plain = run_cli(["validate", missing])
    assert code == 2 and "Traceback" not in plain
    assert "no-such-spec.yaml" in plain
    for args in (["--debug", "validate", missing], ["validate", missing, "--debug"]):
        code, debug = run_cli(args)
        assert code == 2  # the same outcome, with the traceback added
        assert "Traceback (most recent call last)" in debug and "no-such-spec.yaml" in debug


# --------------------------------------------------------------------------------------------------
# "`checkpoint_s3_uri` may not overlap the code", around it here (inside it: test_spec_validation);
# "the job writes only under `<output_path>/<job>/`", so a project folder is an output path.


def test_a_folder_holding_the_code_is_refused_for_checkpoints(valid_raw: Raw, problems: Callable[[Raw], list[Any]]
                                                               ) -> None:
    valid_raw["checkpoint_s3_uri"] = "."  # the project folder: it holds ./code and ./data/*
    found = [(p.path, p.message) for p in problems(valid_raw)]
    assert found == [("checkpoint_s3_uri", ". overlaps source_dir (./code)")]


def test_a_folder_holding_the_code_and_the_data_is_an_output_path(
        valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    """The job writes only its own new folder <output_path>/<job>/, beside the code and the data."""
    valid_raw["output_path"] = "."
    spec = load(valid_raw)
    assert spec.output_path == spec.spec_dir
    assert not any(channel.snapshot for channel in spec.inputs.values())


# --------------------------------------------------------------------------------------------------
# "`ShardedByS3Key`: each host of the channel's groups gets a disjoint share of the files (round-robin
# over sorted keys), together all."


def test_sharding_is_round_robin_over_the_sorted_keys() -> None:
    keys = ("a.csv", "b.csv", "c.csv", "d.csv", "e.csv")  # channels list their keys sorted (spec.paths.scan)
    assert shard(keys, ("algo-1", "algo-2")) == {"algo-1": ("a.csv", "c.csv", "e.csv"), "algo-2": ("b.csv", "d.csv")}


def test_a_channels_keys_are_listed_sorted(load: Callable[[Raw], JobSpec], project: Path, valid_raw: Raw) -> None:
    for name in ("z.csv", "m.csv", "a.csv"):
        (project / "data" / "train" / name).write_text(name)
    files = load(valid_raw).inputs["training"].files
    assert list(files) == sorted(files) and "z.csv" in files


# --------------------------------------------------------------------------------------------------
# "Containers started by `docker-compose up` from a rendered project are labelled `docker-compose`: no
# driver can be checked, so only `clean --job` or `--all` removes them." (`clean` leaves alone what
# cannot be told: test_liveness::test_clean_removes_only_what_a_gone_driver_left.)


def test_a_compose_containers_driver_cannot_be_told() -> None:
    assert driver_alive(COMPOSE_DRIVER) is None


# --------------------------------------------------------------------------------------------------
# Whose files: "`chown -R uid:gid` in a short-lived container of the job's image, with no network ...
# Under rootless Docker nothing is needed (container root is you); under userns-remap the chown
# container runs in the host's user namespace." Engines of each kind are not at hand in CI, so the
# engine's answer (`docker info` SecurityOptions) is stubbed and what the backend asks for is checked.


class StubAPI:
    def __init__(self) -> None:
        self.containers: list[dict[str, Any]] = []
        self.removed: list[str] = []

    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return options

    def create_container(self, image: str, **options: Any) -> dict[str, str]:
        self.containers.append({"image": image, **options})
        return {"Id": f"chown-{len(self.containers)}"}

    def start(self, ident: str) -> None:
        pass

    def wait(self, ident: str, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def remove_container(self, ident: str, force: bool) -> None:
        self.removed.append(ident)


class StubClient:
    def __init__(self, security_options: list[str]) -> None:
        self.api = StubAPI()
        self._security = security_options

    def info(self) -> dict[str, Any]:
        return {"SecurityOptions": self._security}


@pytest.mark.parametrize(("security", "userns_mode"), [
    (["name=seccomp,profile=builtin"], None),
    (["name=seccomp,profile=builtin", "name=userns"], "host"),
])
def test_ownership_is_given_back_by_a_chown_container_without_network(
    security: list[str], userns_mode: str | None, load: Callable[[Raw], JobSpec], valid_raw: Raw, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job")
    client = StubClient(security)
    DockerBackend(client).fix_ownership(plan, 4242, 4343)  # type: ignore[arg-type]
    (made,) = client.api.containers
    assert made["image"] == plan.image
    assert made["entrypoint"] == ["chown", "-R", "4242:4343", "/hosts"] and made["user"] == "0"
    host_config = made["host_config"]
    assert host_config["network_mode"] == "none"
    assert host_config["userns_mode"] == userns_mode
    (mount,) = host_config["mounts"]
    assert (mount["Source"], mount["Target"]) == (str(tmp_path / "job" / "hosts"), "/hosts")
    assert client.api.removed == ["chown-1"]  # short-lived


def test_rootless_docker_needs_no_chown_container(
    load: Callable[[Raw], JobSpec], valid_raw: Raw, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job")
    client = StubClient(["name=seccomp,profile=builtin", "name=rootless"])
    DockerBackend(client).fix_ownership(plan, 4242, 4343)  # type: ignore[arg-type]
    assert client.api.containers == []


# --------------------------------------------------------------------------------------------------
# The watcher "removes exactly those ids, retrying until the engine answers (for up to 10 minutes)".


def test_the_watcher_keeps_trying_for_ten_minutes() -> None:
    from emulator.backend import reaper

    assert reaper.REAP_PATIENCE == 10 * 60


# --------------------------------------------------------------------------------------------------
# The map itself. Each `## section` of tests/README-promises.md names the pages its promises live on
# (`Pages: [..](../docs/x.md#anchor), ...`) and has a table of `| promise | tests |` rows. A row's
# tests are `U/`, `I/`, `F/` or `S/` + a file, optionally `::test_name` (further `::name`s of the same
# file follow after a comma), or `corpus/NAME` (further corpus names after a comma); anything else
# in the cell is a remark (`(all)`, "the 200 MB tests").

TESTS = Path(__file__).resolve().parents[1]
PROMISES = TESTS / "README-promises.md"
SUITES = {"U": "unit", "I": "integration", "F": "faults", "S": "swarm"}
_CELL = re.compile(r"(?<!\\)\|")


def sections(text: str) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """(heading, the `Pages:` line's link targets, the rows (promise, tests)) of every section."""
    found: list[tuple[str, list[str], list[tuple[str, str]]]] = []
    for line in text.splitlines():
        if line.startswith("## "):
            found.append((line[3:].strip(), [], []))
        elif found and line.startswith("Pages:"):
            found[-1][1].extend(re.findall(r"\]\(([^)\s]+)\)", line))
        elif found and line.startswith("| ") and not line.startswith("| promise |"):
            cells = [cell.strip() for cell in _CELL.split(line)[1:-1]]
            found[-1][2].append((cells[0], cells[1]) if len(cells) == 2 else (line, ""))
    return found


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def {re.escape(name.split('[')[0])}\(", path.read_text(), re.M) is not None


def missing_tests(cell: str, tests: Path) -> tuple[int, list[str]]:
    """(how many tests the cell names, the ones that do not exist)."""
    named, missing = 0, []
    for group in cell.split(";"):
        current: Path | None = None
        corpus = False
        for item in (re.sub(r"\s*\(.*?\)\s*$", "", part).strip() for part in group.split(",")):
            suite = re.fullmatch(r"([UIFS])/(\S+?\.py)(?:::(\S+))?", item)
            more = re.fullmatch(r"::(\S+)", item)
            case = re.fullmatch(r"(?:corpus/)?([a-z0-9*-]+)", item)
            if suite:
                current, corpus = tests / SUITES[suite[1]] / suite[2], False
                named += 1
                if not current.is_file() or (suite[3] and not _defines(current, suite[3])):
                    missing.append(item)
            elif more and current is not None:
                named += 1
                if not current.is_file() or not _defines(current, more[1]):
                    missing.append(f"{current.name}::{more[1]}")
            elif case and (item.startswith("corpus/") or corpus):
                corpus = True
                named += 1
                if not any((tests / "data" / "invalid").glob(case[1] + ".*")):
                    missing.append(f"corpus/{case[1]}")
    return named, missing


def quotes_off_the_pages(promise: str, pages: str) -> list[str]:
    """The code a promise quotes (`...`) that none of its pages holds (whitespace and table escapes
    aside)."""
    flat = re.sub(r"\s+", " ", pages.replace("\\|", "|"))
    quoted = (re.sub(r"\s+", " ", quote.replace("\\|", "|")) for quote in re.findall(r"`([^`]+)`", promise))
    return [quote for quote in quoted if quote not in flat]


def _page_text(targets: list[str]) -> str:
    return "\n".join((PROMISES.parent / target.split("#")[0]).read_text() for target in targets)


def test_every_promise_names_tests_and_every_test_it_names_exists() -> None:
    problems = []
    for heading, _, rows in sections(PROMISES.read_text()):
        for promise, cell in rows:
            named, missing = missing_tests(cell, TESTS)
            if named == 0:
                problems.append(f"{heading}: {promise[:60]!r} names no test")
            problems += [f"{heading}: {promise[:60]!r}: no test {name}" for name in missing]
    assert problems == []


def test_every_section_of_promises_names_the_pages_they_live_on() -> None:
    problems = []
    for heading, pages, rows in sections(PROMISES.read_text()):
        if rows and not pages:
            problems.append(f"{heading}: no Pages: line")
        problems += [reason for page in pages if (reason := broken(Link(PROMISES, 0, page))) is not None]
    assert problems == []


def test_the_code_a_promise_quotes_is_on_the_pages_of_its_section() -> None:
    problems = []
    for heading, pages, rows in sections(PROMISES.read_text()):
        if not pages:
            continue
        text = _page_text(pages)
        for promise, _ in rows:
            problems += [f"{heading}: `{quote}`" for quote in quotes_off_the_pages(promise, text)]
    assert problems == []


def test_a_promise_whose_test_is_gone_or_that_names_none_is_found(tmp_path: Path) -> None:
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "test_a.py").write_text("def test_kept() -> None:\n    pass\n")
    (tmp_path / "data" / "invalid").mkdir(parents=True)
    (tmp_path / "data" / "invalid" / "name-bad.yaml").write_text("")
    assert missing_tests("U/test_a.py::test_kept, ::test_renamed; corpus/name-*, gone", tmp_path) == (
        4, ["test_a.py::test_renamed", "corpus/gone"])
    assert missing_tests("U/test_b.py (all)", tmp_path) == (1, ["U/test_b.py"])
    assert missing_tests("every container test's fixture", tmp_path) == (0, [])


def test_a_quote_no_page_holds_is_found() -> None:
    page = "`hetero-emu\nX.Y.Z` and `--memory instance\\|none\\|SIZE`"
    assert quotes_off_the_pages("prints `hetero-emu X.Y.Z`; `--memory instance\\|none\\|SIZE`", page) == []
    assert quotes_off_the_pages("prints `hetero-emu --version`", page) == ["hetero-emu --version"]

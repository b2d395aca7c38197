"""The documentation outside MkDocs' reach: every relative link and #anchor of README.md,
CONTRIBUTING.md and tests/README-promises.md leads to a file and a heading (MkDocs checks the pages
under docs/ itself, in `mkdocs build --strict`), and CONTRIBUTING.md's layout tables name every
module and top-level folder there is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from markdown_links import anchors, broken_links, slug

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "tests" / "README-promises.md"]
PACKAGES = ["emulator", "emulator/planning", "emulator/run", "emulator/training_images", "emulator/reports",
            "emulator/state", "emulator/jobspec", "emulator/backend", "emulator/aws", "emulator/aws/wire",
            "emulator/sagemaker", "emulator/serve", "emulator/jobs",
            "emulator/tuning"]


def test_every_link_outside_the_docs_folder_leads_to_a_file_and_a_heading() -> None:
    assert broken_links(*OUTSIDE_DOCS) == []


def test_the_readme_links_into_every_page_of_the_docs() -> None:
    linked = {link.split("#")[0] for link in re.findall(r"\]\((docs/[^)\s]+)\)", (ROOT / "README.md").read_text())}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set()


def test_a_missing_file_a_missing_anchor_and_an_anchor_into_a_folder_are_each_found(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# A page\n\n## Two words: `code`\n\n```\n## not a heading\n```\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "index.md").write_text(
        "[good](page.md#two-words-code) [self](#here) [site](https://example.com/none.md#x)\n"
        "[gone](missing.md) [no anchor](page.md#not-a-heading) [dir](folder#x) ![picture](page.md)\n"
        "`[in code](missing-too.md)`\n\n## Here\n"
        "```\n[in a block](missing-three.md)\n```\n")
    found = broken_links(tmp_path / "index.md")
    assert [reason.split(": ", 1)[1].split(":")[0] for reason in found] == [
        "missing.md", "page.md#not-a-heading", "folder#x"]


def test_anchors_are_githubs_slugs_and_a_repeated_heading_is_numbered(tmp_path: Path) -> None:
    assert slug("requirements.txt") == "requirementstxt"
    assert slug("MPI hosts: `/root/.ssh`") == "mpi-hosts-rootssh"
    assert slug("Start-up: what the emulator adds to a job") == "start-up-what-the-emulator-adds-to-a-job"
    assert slug("fit() and the job") == "fit-and-the-job"
    (tmp_path / "page.md").write_text("# Notes\n## Notes\n## Notes\n")
    assert anchors(tmp_path / "page.md") == {"notes", "notes-1", "notes-2"}


def _table_names(text: str, caption: str) -> set[str]:
    """The first cells of the table that follows the line `caption` in CONTRIBUTING.md."""
    lines = text.splitlines()
    start = lines.index(caption)
    names = set()
    for line in lines[start + 1:]:
        if line.startswith("| `"):
            names.add(line.split("`")[1])
        elif names and not line.startswith("|"):
            break
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_contributing_has_a_row_for_every_module(package: str) -> None:
    listed = _table_names((ROOT / "CONTRIBUTING.md").read_text(), f"`{package}/`:")
    on_disk = {path.name for path in (ROOT / package).glob("*.py")}
    assert on_disk - listed == set(), f"add a row for each to CONTRIBUTING.md's `{package}/` table"


def test_contributing_has_a_row_for_every_top_level_folder() -> None:
    try:
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: which folders belong to the project is git's answer")
    folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line}
    text = (ROOT / "CONTRIBUTING.md").read_text()
    listed = {cell.rstrip("/") for cell in _table_names(text, "Top-level folders:")}
    subpackages = {name.split("/")[0] for name in listed if "/" in name}
    assert folders - listed - subpackages == set()

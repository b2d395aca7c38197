"""The test suite's own layout: pytest imports test files without __init__.py by their basename
(rootdir-relative "rootdir" import mode), so two test files of one name in tests/unit and
tests/integration stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_files_share_a_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []

"""Entry-point names and whether the training toolkit runs each, shared by the unit test of our rule
(tests/unit/test_validation_catches.py) and the integration test that asks the real toolkit
(tests/integration/test_values_in_containers.py)."""

from __future__ import annotations

# (name, fragment of our reason or None when the toolkit runs it); the same names are asked of the
# real toolkit in tests/integration/test_toolkit_agreement.py.
ENTRY_POINTS: list[tuple[str, str | None]] = [
    ("train.py", None),
    ("run.sh", None),
    ("bin/train.sh", None),
    ("a/b/c.py", None),
    (".hidden.py", None),
    ("_x.py", None),
    ("x+y-z.py", None),
    ("...py", None),
    ("a/..b/c.py", None),
    ("./run.sh", "'.' or '..' path segments"),
    ("a/./b.py", "'.' or '..' path segments"),
    ("a/../b.py", "'.' or '..' path segments"),
    ("trän.py", "'ä'"),
    ("train script.py", "' '"),
    ("train;rm.py", "';'"),
    ("$(x).py", "'$'"),
    ("tab\tx.py", "'\\t'"),
    ("-m.py", "a leading '-'"),
    ("+x.py", "a leading '+'"),
    ("/abs.py", "a leading '/'"),
    ("a//b.py", "an empty path segment"),
    ("dir/", "an empty path segment"),
]

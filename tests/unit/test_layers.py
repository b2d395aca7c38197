"""The package graph is layered (issue 32): no module of `emulator/` imports from a layer above its own,
and no modules import each other at module level.

ORDER below is the one statement of the layers, lowest first (CONTRIBUTING.md, Layers, says why).
A module may import from its own layer and from the layers before it; the packages of one layer
(the front ends at the top, `sagemaker` and `serve`) may import each other, so long as no cycle
forms. Every import counts, at module level or inside a function: a lazy import still says which way
the dependency goes. The cycles looked for are those at module level (everything outside a function,
`if TYPE_CHECKING:` included), which is where a cycle breaks or slows an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "emulator"

# Lowest first. A layer is a package of `emulator/` or one of its root modules (`__init__` is the
# package's own module, `emulator`).
ORDER: tuple[tuple[str, ...], ...] = (
    ("errors", "defaults", "result"),  # the types every layer shares
    ("state",),  # the state folder, the job records, whether the code may wait
    ("jobspec",),  # the spec: its model, the service's rules, the adapters, the request's facts
    ("planning",),  # the pure plan and its /opt/ml files
    ("options",),  # a run's options: they name the plan's types
    ("reports",),  # what the user sees
    ("training_images",),  # which image stands for a framework, the recipes, their launchers
    ("backend",),  # the engines
    ("run",),  # running a plan on an engine
    ("jobs",),  # the jobs layer over runs
    ("tuning",),  # hyperparameter tuning: the ranges, the strategies, the trials' names
    ("aws",),  # the emulated AWS services
    ("sagemaker", "serve"),  # the SDK sessions and the HTTP server over the services
    ("api",),  # the library API
    ("job", "pytest_plugin", "cli", "driver", "__init__", "__main__"),  # the front ends
)

# Upward imports allowed for a while, each with why and when it goes: none. An entry that is no longer
# needed fails `test_every_known_upward_import_still_exists`.
KNOWN: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    module_level: bool


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root` by dotted name; a folder without `__init__.py` (the
    package's data, e.g. the start-up hook the hosts run) holds no modules of it."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if all((root.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(root: Path) -> list[Import]:
    """Every import of a module of the package by another, at module level or in a function."""
    known = modules(root)
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, module_level in _import_nodes(tree):
            for target in _targets(node, package, known):
                if target != name:
                    found.append(Import(name, target, node.lineno, module_level))
    return found


def _import_nodes(tree: ast.Module) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements, each with whether it runs when the module is imported (not in a function)."""
    stack: list[tuple[ast.AST, bool]] = [(tree, True)]
    while stack:
        node, module_level = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, module_level
        inner = module_level and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: dict[str, Path]) -> list[str]:
    """The package's modules a statement imports: `from a import b` imports the module `a.b` when there
    is one, else `a`'s name `b`. The parent packages Python runs first are not counted: the package's
    own `__init__` is lazy for that reason."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, *([base] if base else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name not in out:
            out.append(name)
    return out


def layer(module: str) -> str:
    """`emulator.run.runner` -> `run`, `emulator.cli` -> `cli`, `emulator` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


RANK = {name: rank for rank, names in enumerate(ORDER) for name in names}


def goes_up(imp: Import) -> bool:
    return RANK[layer(imp.imported)] > RANK[layer(imp.importer)]


def upward(found: Iterable[Import], known: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """Each import of a module in a higher layer than the importer's, not in `known`, said once per pair."""
    said: dict[tuple[str, str], str] = {}
    for imp in found:
        if goes_up(imp) and (imp.importer, imp.imported) not in known | said.keys():
            said[imp.importer, imp.imported] = (f"{imp.importer} (layer {layer(imp.importer)}, line {imp.line}) "
                                                f"imports {imp.imported} (layer {layer(imp.imported)}, above it)")
    return sorted(said.values())


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """The groups of modules that import each other at module level (strongly connected components
    of more than one module, Tarjan's algorithm), each sorted."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if imp.module_level:
            graph.setdefault(imp.importer, set()).add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return imports(ROOT)


def test_every_package_and_root_module_has_a_layer() -> None:
    missing = sorted({layer(name) for name in modules(ROOT)} - RANK.keys())
    assert missing == [], f"add each to ORDER in {Path(__file__).name} (and CONTRIBUTING.md's Layers)"


def test_no_module_imports_from_a_layer_above_its_own(graph: list[Import]) -> None:
    found = upward(graph, KNOWN)
    assert not found, "imports that go up the layers (ORDER):\n" + "\n".join(found)


def test_no_modules_import_each_other_at_module_level(graph: list[Import]) -> None:
    found = cycles(graph)
    assert not found, "modules that import each other at module level:\n" + "\n".join(map(", ".join, found))


def test_every_known_upward_import_still_exists(graph: list[Import]) -> None:
    going_up = {(imp.importer, imp.imported) for imp in graph if goes_up(imp)}
    assert sorted(KNOWN - going_up) == [], "remove each from KNOWN: it no longer goes up"


def _write(root: Path, files: Sequence[tuple[str, str]]) -> None:
    for relative, text in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_an_upward_import_and_a_cycle_are_each_found(tmp_path: Path) -> None:
    _write(tmp_path, [
        (f"{PACKAGE}/__init__.py", ""),
        (f"{PACKAGE}/errors.py", ""),
        (f"{PACKAGE}/jobspec/__init__.py", ""),
        # Up, inside a function: the spec asking the runner.
        (f"{PACKAGE}/jobspec/model.py", f"def f():\n    from {PACKAGE}.run import runner\n"),
        (f"{PACKAGE}/jobspec/rules.py", f"from {PACKAGE}.jobspec import wording\nfrom . import model\n"),
        (f"{PACKAGE}/jobspec/wording.py", "import typing\nif typing.TYPE_CHECKING:\n"
                                          f"    from {PACKAGE}.jobspec.rules import Validator\n"),
        (f"{PACKAGE}/run/__init__.py", ""),
        (f"{PACKAGE}/run/runner.py", f"from {PACKAGE}.errors import UsageError\nfrom {PACKAGE}.jobspec import rules\n"),
        (f"{PACKAGE}/data/hook.py", f"import {PACKAGE}.cli\n"),  # not a module of the package
    ])
    found = imports(tmp_path)
    assert upward(found) == [f"{PACKAGE}.jobspec.model (layer jobspec, line 2) imports {PACKAGE}.run.runner "
                             "(layer run, above it)"]
    assert upward(found, frozenset({(f"{PACKAGE}.jobspec.model", f"{PACKAGE}.run.runner")})) == []
    assert cycles(found) == [[f"{PACKAGE}.jobspec.rules", f"{PACKAGE}.jobspec.wording"]]


# What the front ends read of the jobs they go through the jobs layer (emulator/jobs/service.py) or the
# library API for: neither the record store nor the engine registry (CONTRIBUTING.md, Adding a front
# end). The job's driver is not one of them: it is the jobs layer's own process, which ends a record
# its run could not.
FRONT_ENDS = ("emulator.cli", "emulator.job", "emulator.pytest_plugin", "emulator.serve", "emulator.sagemaker")
BEHIND_THE_JOBS_LAYER = ("emulator.state.job_records", "emulator.backend.registry")


def test_no_front_end_reaches_the_job_records_or_the_engine_registry(graph: list[Import]) -> None:
    found = [f"{imp.importer} imports {imp.imported} (line {imp.line})" for imp in graph
             if any(imp.importer == f or imp.importer.startswith(f + ".") for f in FRONT_ENDS)
             and imp.imported in BEHIND_THE_JOBS_LAYER]
    assert not found, "front ends reaching past the jobs layer:\n" + "\n".join(found)

"""The package's import layering: a module of bench/fairbench imports from its own floor or a lower one
only, and no modules of the package import each other in a circle.

Every import counts, at module level or inside a function (a lazy import, kept for start-up speed, still
depends on what it loads), and so does ``importlib.import_module`` of a fairbench module by name: a name
whose start the test cannot read fails, since it would hide an edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import fairbench

PACKAGE = "fairbench"
PACKAGE_DIR = Path(fairbench.__file__).resolve().parent
FLOORS = (
    ("fairbench",),
    ("fairbench.measure",),
    ("fairbench.sim", "fairbench.nccl", "fairbench.answers"),
    ("fairbench.campaign",),
    ("fairbench.hosts",),
    ("fairbench.fleet",),
    ("fairbench.report",),
    ("fairbench.cli", "fairbench.__main__"),
)
"""The floors, lowest first; a module is on the floor of the longest name here that is it or holds it
(``fairbench`` itself: the package's ``__version__``). plugins/ stands above all of them."""
UNREADABLE = "?"
"""The target of a load by a name whose start the scan cannot read."""


@dataclass(frozen=True)
class Import:
    source: str
    line: int
    target: str

    def __str__(self) -> str:
        if self.target == UNREADABLE:
            return f"{self.source} (line {self.line}) loads a module by a name the scan cannot read"
        return f"{self.source} (line {self.line}) imports {self.target}"


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name), -> its file."""
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


MODULES = _modules()


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, relative levels resolved against ``module``."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    anchor = parts[: len(parts) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def _by_name(node: ast.Call, modules: Mapping[str, object]) -> list[str] | None:
    """The package's modules an ``import_module`` call may load: its name's readable start (a string, or
    an f-string's leading text) -> every module named so; [] for another package's; None: unreadable."""
    name = node.args[0] if node.args else None
    if isinstance(name, ast.JoinedStr) and name.values:
        name = name.values[0]
        exact = False
    else:
        exact = True
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    start: str = name.value
    if start.startswith("."):  # relative to a ``package=`` argument the scan does not follow
        return None
    if not (start.startswith(PACKAGE) or PACKAGE.startswith(start)):
        return []
    if exact:
        return [start]
    return [module for module in modules if module.startswith(start)] or None


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return (
            func.attr == "import_module" and isinstance(func.value, ast.Name) and func.value.id == "importlib"
        )
    return isinstance(func, ast.Name) and func.id == "import_module"


def imports(module: str, source: str, modules: Mapping[str, object]) -> list[Import]:
    """Every import of the package's modules in ``source`` (the text of ``module``), wherever it stands,
    in line order and each once. ``from A import B`` imports module A.B when it is one, else A. A load by
    an unreadable name has the target UNREADABLE."""
    return sorted(set(_imports(module, source, modules)), key=lambda each: (each.line, each.target))


def _imports(module: str, source: str, modules: Mapping[str, object]) -> Iterator[Import]:
    is_package = any(name.startswith(f"{module}.") for name in modules)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        elif isinstance(node, ast.Call) and _is_import_module(node.func):
            loaded = _by_name(node, modules)
            targets = [UNREADABLE] if loaded is None else loaded
        else:
            continue
        for target in targets:
            if target in (UNREADABLE, PACKAGE) or target.startswith(f"{PACKAGE}."):
                yield Import(module, node.lineno, target)


def _all_imports() -> list[Import]:
    return [
        each
        for module, path in MODULES.items()
        for each in imports(module, path.read_text(encoding="utf-8"), MODULES)
    ]


def floor(module: str) -> int | None:
    """The index in FLOORS of ``module``'s floor; None when no floor holds it."""
    found: tuple[int, int] | None = None
    for index, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(f"{name}.")) and (found is None or len(name) > found[1]):
                found = (index, len(name))
    return found[0] if found else None


def upward(edges: list[Import]) -> list[Import]:
    """The imports from a higher floor than their module's."""
    found = []
    for each in edges:
        source, target = floor(each.source), floor(each.target)
        if source is not None and target is not None and target > source:
            found.append(each)
    return found


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module in the graph of ``edges``, each sorted."""
    graph: dict[str, set[str]] = {}
    for each in edges:
        if each.target not in (each.source, UNREADABLE):
            graph.setdefault(each.source, set()).add(each.target)

    def reach(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {module: reach(module) for module in graph}
    components = {
        tuple(sorted(other for other in reached[module] if module in reached.get(other, ())))
        for module in graph
    }
    return sorted(list(component) for component in components if len(component) > 1)


# --- the package --------------------------------------------------------------------------------------


def test_every_module_of_the_package_is_on_a_floor() -> None:
    assert [module for module in MODULES if floor(module) is None] == []


def test_no_module_imports_from_a_higher_floor() -> None:
    found = upward(_all_imports())
    assert not found, "imports from a higher floor:\n" + "\n".join(map(str, found))


def test_no_modules_of_the_package_import_each_other_in_a_circle() -> None:
    edges = _all_imports()
    found = [
        f"{', '.join(component)}:\n"
        + "\n".join(
            f"  {each}"
            for each in edges
            if each.source in component and each.target in component and each.source != each.target
        )
        for component in cycles(edges)
    ]
    assert not found, "modules importing each other in a circle:\n" + "\n".join(found)


def test_every_load_by_name_names_its_module_readably() -> None:
    found = [each for each in _all_imports() if each.target == UNREADABLE]
    assert not found, "loads by a name the scan cannot read:\n" + "\n".join(map(str, found))


# --- what the scan sees -------------------------------------------------------------------------------

TOY = {
    name: None
    for name in ("fairbench", "fairbench.cli", "fairbench.cli.main", "fairbench.cli.sweep", "fairbench.sim",
                 "fairbench.sim.args", "fairbench.measure", "fairbench.measure.status")
}  # fmt: skip


def _toy(module: str, source: str) -> list[tuple[int, str]]:
    return [(each.line, each.target) for each in imports(module, source, TOY)]


def test_the_scan_sees_imports_at_module_level_and_inside_functions() -> None:
    source = (
        "import json\n"
        "from fairbench.cli import sweep\n"
        "from fairbench.cli.main import UsageError, main\n"
        "def run():\n"
        "    import fairbench.measure.status\n"
        "    from fairbench import __version__\n"
    )
    assert _toy("fairbench.sim.args", source) == [
        (2, "fairbench.cli.sweep"),
        (3, "fairbench.cli.main"),
        (5, "fairbench.measure.status"),
        (6, "fairbench"),
    ]


def test_the_scan_resolves_relative_imports() -> None:
    source = "from . import args\nfrom ..measure.status import excerpt\nfrom .. import cli\n"
    assert _toy("fairbench.sim.command", source) == [
        (1, "fairbench.sim.args"),
        (2, "fairbench.measure.status"),
        (3, "fairbench.cli"),
    ]
    assert _toy("fairbench.sim", "from . import args\n") == [(1, "fairbench.sim.args")]


def test_the_scan_reads_loads_by_name_and_flags_the_unreadable() -> None:
    source = (
        "import importlib\n"
        "importlib.import_module('fairbench.sim.args')\n"
        "importlib.import_module(f'fairbench.cli.{name}')\n"
        "importlib.import_module('pyarrow')\n"
        "importlib.import_module(name)\n"
        "importlib.import_module('.sweep', package='fairbench.cli')\n"
    )
    assert _toy("fairbench.measure.status", source) == [
        (2, "fairbench.sim.args"),
        (3, "fairbench.cli.main"),
        (3, "fairbench.cli.sweep"),
        (5, UNREADABLE),
        (6, UNREADABLE),
    ]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("fairbench", 0),
        ("fairbench.measure.status", 1),
        ("fairbench.nccl.worker", 2),
        ("fairbench.__main__", 7),
        ("fairbench.cli", 7),
        ("fairbenchx", None),
    ],
)
def test_a_module_is_on_the_floor_of_the_longest_name_holding_it(module: str, expected: int | None) -> None:
    assert floor(module) == expected


def test_an_upward_import_and_a_circle_are_found_and_named() -> None:
    edges = [
        Import("fairbench.measure.status", 3, "fairbench.hosts.journal"),
        Import("fairbench.hosts.journal", 1, "fairbench.measure.status"),
        Import("fairbench.cli.main", 9, "fairbench.cli.sweep"),
        Import("fairbench.cli.sweep", 4, "fairbench.cli.run"),
        Import("fairbench.cli.run", 2, "fairbench.cli.main"),
        Import("fairbench.cli.run", 5, "fairbench.measure.status"),
    ]
    assert [str(each) for each in upward(edges)] == [
        "fairbench.measure.status (line 3) imports fairbench.hosts.journal"
    ]
    assert cycles(edges) == [
        ["fairbench.cli.main", "fairbench.cli.run", "fairbench.cli.sweep"],
        ["fairbench.hosts.journal", "fairbench.measure.status"],
    ]

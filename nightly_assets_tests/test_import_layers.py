"""The product's modules, and the tests' own, import in layers: no circle between files, and the
stage kinds imported only where the definitions are built (issue #28). Read from the source with
`ast`, so every import counts: module level, inside a function (lazy), and under TYPE_CHECKING."""

import ast
from pathlib import Path

import nightly_assets

PACKAGE = "nightly_assets"
TESTS = "nightly_assets_tests"
ROOT = Path(nightly_assets.__file__).parent.parent
STAGE_KINDS = f"{PACKAGE}.stage_kinds"
# Who may import the stage kinds (besides their own modules), and why. The catalog, the runner
# backends and the domain packages (containers, culprits, tpu, rbe, batch, kubernetes, testing,
# warehouse) sit below them: they hold the params models the kinds build with.
STAGE_KIND_IMPORTERS = {
    f"{PACKAGE}.pipelines": "builds each stage's asset with its kind",
    f"{PACKAGE}.catalog.loader": "imports the kinds so they register before a catalog validates",
}


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by dotted name; a package by its own."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Each module of `package` and the modules of it that it imports, wherever the import sits."""
    modules = module_files(root, package)

    def nearest_module(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def inside(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                imported.update(nearest_module(alias.name) for alias in node.names if inside(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up level-1 packages from this module's own
                    anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                if inside(base):
                    for alias in node.names:  # `from pkg import mod` imports the module itself
                        named = f"{base}.{alias.name}"
                        imported.add(named if named in modules else nearest_module(base))
        graph[module] = {m for m in imported if m is not None and m != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowlink[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in index:
                visit(imported)
                lowlink[module] = min(lowlink[module], lowlink[imported])
            elif imported in on_stack:
                lowlink[module] = min(lowlink[module], index[imported])
        if lowlink[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def importers_of(graph: dict[str, set[str]], package: str) -> set[str]:
    """Modules outside `package` that import it or one of its modules."""

    def within(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    return {m for m, imported in graph.items() if not within(m) and any(within(i) for i in imported)}


def _files(modules: list[str], root: Path, package: str) -> str:
    files = module_files(root, package)
    return ", ".join(str(files[m].relative_to(root)) for m in modules)


def test_no_module_imports_itself_through_others():
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 100  # the whole product was read
    found = circles(graph)
    assert found == [], "import circles (each a set of files importing one another): " + "; ".join(
        f"[{_files(circle, ROOT, PACKAGE)}]" for circle in found
    )


def test_no_test_module_imports_itself_through_others():
    """The tests' own helpers (peers, harnesses, catalog writers) import in layers too."""
    graph = import_graph(ROOT, TESTS)
    assert len(graph) > 50  # the whole test package was read
    found = circles(graph)
    assert found == [], "import circles among the tests: " + "; ".join(
        f"[{_files(circle, ROOT, TESTS)}]" for circle in found
    )


def test_only_the_definitions_builders_import_the_stage_kinds():
    importers = importers_of(import_graph(ROOT, PACKAGE), STAGE_KINDS)
    assert importers == set(STAGE_KIND_IMPORTERS), (
        f"modules importing {STAGE_KINDS} besides the allowed {sorted(STAGE_KIND_IMPORTERS)}: "
        f"{sorted(importers - set(STAGE_KIND_IMPORTERS))}; move what they need (a params model) "
        f"below the stage kind, into their own package or nightly_assets/catalog/kinds.py. "
        f"Allowed but no longer importing: {sorted(set(STAGE_KIND_IMPORTERS) - importers)}"
    )


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_planted_circle_of_lazy_and_type_checking_imports_is_found(tmp_path):
    _plant(
        tmp_path,
        {
            "planted/__init__.py": "",
            "planted/low.py": "def later():\n    from planted.high import thing\n    return thing\n",
            "planted/high.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import low\n\nthing = 1\n"
            ),
            "planted/alone.py": "import planted.low\n",
        },
    )
    assert circles(import_graph(tmp_path, "planted")) == [["planted.high", "planted.low"]]


def test_a_planted_import_of_the_kinds_from_below_is_found(tmp_path):
    _plant(
        tmp_path,
        {
            "planted/__init__.py": "",
            "planted/kinds/__init__.py": "",
            "planted/kinds/wheels.py": "from planted.domain import Params\n",
            "planted/domain.py": "class Params: ...\n\ndef later():\n    from .kinds import wheels\n",
            "planted/builder.py": "from planted import kinds\n",
        },
    )
    assert importers_of(import_graph(tmp_path, "planted"), "planted.kinds") == {
        "planted.builder",
        "planted.domain",
    }

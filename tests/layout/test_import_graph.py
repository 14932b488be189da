"""The import graph of the project, read from the source with ``ast``: every ``import`` statement, at module level
or inside a function, is an edge. No cycle among our modules nor among our packages, and the layering holds:

    sim  <-  firmware_interface  <-  hil  <-  gui

(each may import only what is to its left, and itself). docs/architecture.md states the same rule.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: top-level package -> the top-level packages it may import (itself included)
ALLOWED = {
    "sim": {"sim"},
    "firmware_interface": {"sim", "firmware_interface"},
    "hil": {"sim", "firmware_interface", "hil"},
    "gui": {"sim", "firmware_interface", "hil", "gui"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Our modules by dotted name (packages by their ``__init__``)."""
    return {module_name(p): p for top in ALLOWED for p in sorted((ROOT / top).rglob("*.py"))}


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that ``name`` imports anywhere in its source (``from pkg import mod`` names the module ``mod``
    when it is one, else the package)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` of ours: the deepest of our modules it names
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        colour[start] = GREY
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                colour[node] = BLACK
                stack.pop()
            elif colour.get(nxt, BLACK) == GREY:
                path = [n for n, _ in stack]
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == WHITE:
                colour[nxt] = GREY
                stack.append((nxt, iter(sorted(graph[nxt]))))
    return None


def nested(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def package_graph(graph: dict[str, set[str]], modules: dict[str, Path]) -> dict[str, set[str]]:
    """The module graph collapsed onto packages (a module belongs to the package that holds its file). Edges
    between a package and its own subpackages are left out: a package's modules may use its subpackages and be
    used by them (e.g. firmware_interface's codecs below firmware_interface.rigs, its emulators above); the module
    graph still has no cycle through them."""
    def package(name: str) -> str:
        return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
    collapsed: dict[str, set[str]] = {package(m): set() for m in graph}
    for source, targets in graph.items():
        collapsed[package(source)] |= {package(t) for t in targets if not nested(package(t), package(source))}
    return collapsed


def test_the_cycle_finder_names_a_cycle_and_finds_none_in_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_function_level_and_relative_imports_are_edges(tmp_path):
    modules = {"hil": tmp_path / "__init__.py", "hil.a": tmp_path / "a.py", "hil.b": tmp_path / "b.py",
               "sim": tmp_path / "sim.py"}
    modules["hil.a"].write_text("def f():\n    from hil import b\n    from . import b as again\n    import sim.x\n")
    assert imported_modules("hil.a", modules["hil.a"], modules) == {"hil.b", "sim"}


def test_no_import_cycle_among_our_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_packages_not_nested_in_one_another_form_no_cycle():
    cycle = find_cycle(package_graph(import_graph(), project_modules()))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_each_package_imports_only_the_layers_below_it():
    wrong = sorted(f"{source} imports {target}" for source, targets in import_graph().items() for target in targets
                   if target.split(".")[0] not in ALLOWED[source.split(".")[0]])
    assert wrong == [], "layering (sim <- firmware_interface <- hil <- gui) broken: " + "; ".join(wrong)

"""python/puffadv has no import cycle: every import between its modules, including
the ones inside functions (an import deferred to call time is still a dependency),
forms a graph without a cycle, so each layer can be read (and loaded) before the
ones above it. Read from the source files, so it needs no build."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "puffadv"


def import_graph(package: Path = PACKAGE) -> dict:
    """module name -> the package's modules it imports (statically, anywhere in its body)."""
    modules = {p.stem for p in package.glob("*.py")}
    graph = {}
    for path in sorted(package.glob("*.py")):
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module is None:  # from . import a, b
                    edges.update(alias.name for alias in node.names)
                elif node.level == 1:  # from .a import b
                    edges.add(node.module.split(".")[0])
                elif node.module == "puffadv":  # from puffadv import a
                    edges.update(alias.name for alias in node.names)
                elif node.module and node.module.startswith("puffadv."):
                    edges.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                edges.update(alias.name.split(".")[1] for alias in node.names
                             if alias.name.startswith("puffadv."))
        graph[path.stem] = sorted((edges & modules) - {path.stem} - {"__init__"})
    return graph


def find_cycle(graph: dict):
    """One cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in graph.get(module, ()):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[module] = "done"
        stack.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert "_engine" in graph and "jax" in graph  # the graph was read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


if __name__ == "__main__":  # python tests/python/test_import_graph.py: the graph, one module a line
    for name, targets in import_graph().items():
        print(f"{name}: {', '.join(targets)}")
    print("cycle:", find_cycle(import_graph()))

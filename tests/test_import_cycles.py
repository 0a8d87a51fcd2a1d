"""No import cycle anywhere in src/traindoc (issues 27 and 30): the module-level imports between
traindoc's own modules form no cycle, so every module can be read, tested and imported on its
own. Imports inside functions (lazy ones, to start fast or to break a dependency on purpose)
and those under ``if TYPE_CHECKING:`` are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _graph() -> dict[str, set[str]]:
    paths = {}
    for path in (SRC / "traindoc").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in paths else node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle, as a path that comes back to its start; [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_no_import_cycle_in_traindoc() -> None:
    graph = _graph()
    assert len(graph) > 100
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_the_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]

"""Layers point one way: the shared library imports no tier, the tiers import the shared library
(never each other, never the tools), and the tools that assemble tiers sit on top.

    tools         voicewire_tools/ (the CLI, the local stack, the infra CLIs), stacks/, bench/
    tiers         functions/ (the Lambda functions), container/speech_server/ (the container)
    shared        voicewire/ (protocols, chunker, speech link, turn client)

Each layer is its own package, so a tier's artifact can take its package and the shared one and
nothing else (the Lambda bundle, the container image).

Every import counts, including those inside functions (done lazily to start faster).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("voicewire_tools", "stacks")
TIERS = ("functions", "speech_server")


def module_files() -> dict[str, Path]:
    files = {}
    for base, package_root in (
        (ROOT, "voicewire"),
        (ROOT, "voicewire_tools"),
        (ROOT, "functions"),
        (ROOT, "stacks"),
    ):
        for path in (base / package_root).rglob("*.py"):
            files[_module_name(path.relative_to(base))] = path
    for path in (ROOT / "container" / "speech_server").rglob("*.py"):
        files[_module_name(path.relative_to(ROOT / "container"))] = path
    return files


def _module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def layer_of(module: str) -> str:
    if _within(module, TOOLS):
        return "tool"
    if _within(module, TIERS):
        return "tier:" + module.split(".")[0]
    if _within(module, ("voicewire",)):
        return "shared"
    return "outside"


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def allowed(importer: str, imported: str) -> bool:
    source, target = layer_of(importer), layer_of(imported)
    if target == "outside" or source == "tool":
        return True
    if source == "shared":
        return target == "shared"
    return target == "shared" or target == source  # a tier: itself and the shared library


FILES = module_files()


@pytest.mark.parametrize("module", sorted(name for name in FILES if layer_of(name) != "tool"))
def test_imports_point_down_the_layers(module):
    wrong = sorted(
        imported for imported in imported_modules(FILES[module]) if not allowed(module, imported)
    )
    assert wrong == [], f"{module} ({layer_of(module)}) imports {wrong}"


def test_the_layer_rule_itself():
    assert layer_of("voicewire.speech_link.session") == "shared"
    assert layer_of("voicewire_tools.local_stack.stack") == "tool"
    assert layer_of("functions.handlers.worker") == "tier:functions"
    assert not allowed("voicewire.chunker", "functions.turn")
    assert not allowed("functions.turn", "speech_server.app")
    assert not allowed("speech_server.app", "voicewire_tools.local_stack.stack")
    assert allowed("functions.turn", "voicewire.chunker")
    assert allowed("voicewire_tools.local_stack.stack", "functions.wiring")


def import_graph() -> dict[str, set[str]]:
    """Each first-party module -> the first-party modules it names: ``from a.b import c`` names
    ``a.b.c`` when that is a module, else ``a.b``. Lazy and type-checking imports count: a
    reader cannot tell which of two modules that import each other is the lower one."""
    graph = {}
    for module, path in FILES.items():
        named = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    named.add(submodule if submodule in FILES else node.module)
        graph[module] = {name for name in named if name in FILES and name != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative so
    that a deep chain of imports cannot overflow the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_no_module_imports_one_that_imports_it_back():
    assert import_circles(import_graph()) == []


def test_the_circle_finder_finds_circles():
    chain = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_circles(chain) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []

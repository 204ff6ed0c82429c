"""The rooms of the repository and which may import which (docs: README, "Layout of the repository").

Data flows one way: ``symbolic`` imports neither ``codegen`` nor ``hardware``; ``generated`` imports
only NumPy (and, for ``generated/fused``, numba); the compiler at ``codegen``'s root imports none of
the application subpackages; configs < pricing < validation / reference < cli, and nothing imports
a room above it. The pricer never imports the reference check; of the command line, only
``symcost check`` reads it (inside the command, not when the command line is parsed).

No modules import each other in a cycle, imports inside functions and under ``if TYPE_CHECKING:``
included (modules that name each other are one unit, whenever the names are read); no module imports
another module's private names (``from x import _y``) or a private module of another package
(``hardware._nccl`` from outside ``hardware``): a package re-exports what it shares from its
``__init__``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Room of a module (the longest matching prefix wins) → rooms it may import from.
ALLOWED = {
    "symbolic": {"symbolic"},
    "hardware": {"hardware"},
    "generated": {"generated"},
    "codegen.runtime": {"symbolic", "hardware", "generated", "codegen.runtime"},
    "codegen": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime"},
    "codegen.configs": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs"},
    "codegen.pricing": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs",
                        "codegen.pricing"},
    "codegen.search": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs",
                       "codegen.pricing", "codegen.search"},
    "codegen.validation": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs",
                           "codegen.pricing", "codegen.search", "codegen.validation"},
    "codegen.reference": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs",
                          "codegen.pricing", "codegen.reference"},
    "codegen.cli": {"symbolic", "hardware", "generated", "codegen", "codegen.runtime", "codegen.configs",
                    "codegen.pricing", "codegen.search", "codegen.validation", "codegen.cli"},
}

#: The one allowed exception, by (module, imported room): the check command runs the reference check.
EXCEPTIONS = {("codegen.cli.check", "codegen.reference")}


def _room(module: str) -> str:
    return max((room for room in ALLOWED if module == room or module.startswith(room + ".")), key=len)


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("symbolic", "hardware", "generated", "codegen"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement of *tree*, nested ones included: statements nest only in statements, ``except``
    handlers and ``match`` cases, so no expression needs a visit."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.stmt):
            yield node
        todo.extend(child for child in ast.iter_child_nodes(node)
                    if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)))


@functools.cache
def _import_statements(path: Path) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """The import statements of the module at *path*, each with whether it is at the module's top level.

    The tests read them (generated/ holds megabytes of code): each module is parsed once per worker
    (the tests' xdist group), and only its import statements are kept, not its tree.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    return tuple((node, id(node) in top) for node in _statements(tree)
                 if isinstance(node, (ast.Import, ast.ImportFrom)))


def _imports(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node, _ in _import_statements(path):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            name = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            found.add(name)
            found |= {f"{name}.{alias.name}" for alias in node.names}  # a submodule imported by name
    return {name for name in found if name.split(".")[0] in ("symbolic", "hardware", "generated", "codegen")}


MODULES = _modules()


#: The tests that read every module share one xdist worker (``--dist loadgroup``): each module is parsed once.
PARSED = pytest.mark.xdist_group("architecture")


@PARSED
@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_reaches_a_room_above(module):
    room = _room(module)
    for name in _imports(module, MODULES[module]):
        target = _room(name) if any(name == r or name.startswith(r + ".") for r in ALLOWED) else name.split(".")[0]
        if (module, target) in EXCEPTIONS:
            continue
        assert target in ALLOWED[room], f"{module} ({room}) imports {name} ({target})"


@PARSED
def test_the_vocabulary_and_the_run_time_rooms_import_no_sympy_at_module_level():
    for module, path in MODULES.items():
        run_time = _room(module) in ("codegen.runtime", "codegen.configs", "codegen.pricing", "codegen.search",
                                     "codegen.validation", "codegen.cli", "generated")
        if run_time or module == "symbolic.vocabulary":
            top = [node for node, at_top in _import_statements(path) if at_top]
            names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module or "" for n in top if isinstance(n, ast.ImportFrom)}
            assert not any(n == "sympy" or n.startswith("sympy.") for n in names), f"{module} imports SymPy"


# ---------------------------------------------------------------- cycles and private names


def _module_of(name: str) -> str | None:
    """The project module a dotted *name* (a module, or a name in one) lives in: its longest module prefix."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _resolved(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from … import`` statement of *module* reads."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(module: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str, str | None]]:
    """Per import of *module* (anywhere in it): the statement, each project module it loads by name, and the
    name it takes from that module (None: the module itself). ``from package import submodule`` loads the
    submodule, not a name of the package; a package's ``__init__`` that Python runs first on the way to a
    submodule is not counted (it is the importing package's own re-export, not a dependency)."""
    for node, _ in _import_statements(MODULES[module]):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _module_of(alias.name):
                    yield node, _module_of(alias.name), None
            continue
        base = _resolved(module, node)
        for alias in node.names:
            if f"{base}.{alias.name}" in MODULES:
                yield node, f"{base}.{alias.name}", None
            elif base in MODULES:
                yield node, base, alias.name


def _graph() -> dict[str, set[str]]:
    return {module: {target for _, target, _ in _targets(module) if target != module} for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each as a
    cycle through it: ``[a, b, …, a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [_cycle_through(graph, set(component)) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle within *component*, from its first module back to it (breadth first: a shortest one)."""
    start = min(component)
    previous: dict[str, str] = {}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for child in sorted(graph[node] & component):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if child not in previous:
                previous[child] = node
                todo.append(child)
    raise AssertionError(f"no cycle through {sorted(component)}")


def _private_module(target: str, importer: str) -> str | None:
    """The private part of *target*'s path (``hardware._nccl``) that *importer* lies outside of, if any: a
    private module is its package's own, shared through the package's ``__init__``."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            package = ".".join(parts[:i])
            if not (importer == package or importer.startswith(package + ".")):
                return ".".join(parts[:i + 1])
    return None


def _private_imports(module: str) -> list[str]:
    """Every import of *module* that takes another module's private name or another package's private module."""
    found: list[str] = []
    for node, target, name in _targets(module):
        where = f"{module} line {node.lineno}"
        private = _private_module(target, module)
        if private and f"{where}: {private} (a private module of another package)" not in found:
            found.append(f"{where}: {private} (a private module of another package)")
        if name is not None and name.startswith("_") and not name.startswith("__") and target != module:
            found.append(f"{where}: {name} from {target} (another module's private name)")
    return found


@PARSED
def test_the_import_graph_is_read_whole():
    """The graph the two tests below read: modules found, imports inside functions counted, ``from . import x``
    read as the submodule ``x``, a private name found where there is one (the tests could prove nothing
    otherwise)."""
    graph = _graph()
    assert {"codegen.cli", "codegen.cli.check", "hardware", "symbolic.registry"} <= set(graph)
    assert "codegen.reference.cases" in graph["codegen.cli.check"]  # imported inside run()
    assert "symbolic.collectives" in graph["symbolic.cp"]  # from . import collectives
    assert "hardware._load" in graph["hardware"]
    assert _private_module("hardware._nccl", "codegen.cli.hardware") == "hardware._nccl"
    assert _private_module("hardware._nccl", "hardware") is None
    assert _private_module("codegen.cli._output", "codegen.cli.eval") is None
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@PARSED
def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (imports inside functions and for type checkers included):\n" + \
        "\n".join(" -> ".join(cycle) for cycle in cycles)


@PARSED
@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_of_private_names_or_of_another_packages_private_modules(module):
    found = _private_imports(module)
    assert not found, "\n".join(found)


#: The most lines a hand-written module holds: past it a module has more than one job to split by.
MODULE_LINES_MAX = 900


def test_no_hand_written_module_is_over_the_line_limit():
    hand_written = [path for top in ("symbolic", "hardware", "codegen", "tests", "bench")
                    for path in (ROOT / top).rglob("*.py")]
    assert len(hand_written) > 50, "the walk found too few modules to prove anything"
    long = {str(path.relative_to(ROOT)): lines for path in hand_written
            if (lines := path.read_text(encoding="utf-8").count("\n")) > MODULE_LINES_MAX}
    assert not long, f"modules over {MODULE_LINES_MAX} lines (split them by job): {long}"

"""The rooms of the repository and which may import which (docs: README, "Layout of the repository").

Data flows one way: ``symbolic`` imports neither ``codegen`` nor ``hardware``; ``generated`` imports
only NumPy (and, for ``generated/fused``, numba); the compiler at ``codegen``'s root imports none of
the application subpackages; configs < pricing < validation / reference < cli, and nothing imports
a room above it. The pricer never imports the reference check; of the command line, only
``symcost check`` reads it (inside the command, not when the command line is parsed).
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

    Both tests read them (generated/ holds megabytes of code): each module is parsed once per worker
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

"""The generated tree: which files, rendered in memory, compared with and written to disk.

``render_tree`` turns the registry into ``{relative path: text}``:

* one module per dimension (``cp.py``, ``attention.py``, … by
  ``Formula.dimension``), functions in registry order; the dimensions of
  :data:`SPLIT_DIMENSIONS` (a model's stage terms, many variants of which a
  model selects one) get one module per variant instead
  (``stage__colossalai_cp_gqa_softmax.py``: :func:`module_of`), so that a
  pricer's cold start compiles only the variants it prices;
* ``__init__.py``, re-exporting every function (each dimension's module is
  imported on first use) and the ``FORMULAS`` table, which it reads from
  ``formulas.json`` (:data:`TABLE`) on first use: JSON parses in milliseconds,
  where the same table as a Python literal is compiled from source on every
  start that writes no bytecode cache;
* ``_runtime.py``, the calling convention the functions share;

and the same files once more per further backend (``codegen.backends``),
in its sub-package: ``fused/`` for numba. Every backend renders the same
formulas from the same lowering through its own printer and templates.

The compiler owns the whole output directory except ``__pycache__``: a
file there that it would not write is stale. It never takes a directory it
did not make: ``write_tree`` writes only into a missing or empty directory,
or one holding its marker file ``.symcost-generated`` (a line saying so, then
the files it wrote), and removes only files that marker lists; a regular
file, a directory of other files, or a stale file the marker does not list is
refused (:class:`OutputDirectoryError`) before anything is written.
``write_tree`` renders nothing itself; it writes the files into a temporary
directory beside the target and then swaps the two, so a failure at any point
leaves the old tree as it was.
``compare_tree`` is ``symcost compile --check``: unified diffs, missing and
stale files.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

import jinja2

from symbolic.fingerprints import expression_text, fingerprint
from symbolic.formula import Formula

from .backends import BACKENDS, NUMPY, Backend
from .lowering import CodegenError, Lowered, lower
from .render import COMMAND, environment, header
from .runtime import cache

T = TypeVar("T")
U = TypeVar("U")

__all__ = [
    "BLOCK",
    "TABLE",
    "DEFAULT_DIRECTORY",
    "MARKER",
    "MARKER_LINE",
    "OutputDirectoryError",
    "check_output_directory",
    "TreeDiff",
    "render_tree",
    "SPLIT_DIMENSIONS",
    "module_of",
    "UNLISTED",
    "reference_anchor",
    "lower_formulas",
    "forked_map",
    "compare_tree",
    "write_tree",
    "read_tree",
    "compile_in_memory",
]

#: Elements per block of the generated loops (see the runtime template).
BLOCK = 16384

#: The metadata table of the NumPy package (``generated.FORMULAS``), a JSON file beside its modules.
TABLE = "formulas.json"

#: Where the committed tree lives: ``generated/`` beside ``codegen/``.
DEFAULT_DIRECTORY = Path(__file__).resolve().parent.parent / "generated"

_IGNORED_DIRS = frozenset({"__pycache__"})

#: The file by which ``write_tree`` recognises a directory it wrote; its first line is :data:`MARKER_LINE`,
#: then the relative paths it wrote, one a line. ``read_tree`` and ``compare_tree`` leave it out.
MARKER = ".symcost-generated"
MARKER_LINE = ("This directory is written by `symcost compile`, which replaces the files listed below "
               "when it runs again; do not edit them.")


class OutputDirectoryError(ValueError):
    """An output directory the compiler will not write into: it would replace files it did not write."""


def _marker_text(paths: Iterable[str]) -> str:
    return MARKER_LINE + "\n" + "".join(f"{p}\n" for p in sorted(paths))


def _owned(directory: Path) -> set[str] | None:
    """The files *directory*'s marker says the compiler wrote, or ``None`` where there is no valid marker."""
    marker = directory / MARKER
    try:
        lines = marker.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != MARKER_LINE:
        return None
    return set(lines[1:])


def check_output_directory(directory: str | Path) -> None:
    """Refuse a *directory* that ``write_tree`` may not replace (see the module docstring).

    Raises:
        OutputDirectoryError: naming the directory and why.
    """
    if str(directory) == "":
        raise OutputDirectoryError("output directory: the path is empty; name a new or empty directory")
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise OutputDirectoryError(f"{directory}: exists and is not a directory; refusing to replace it "
                                   f"(name a new or empty directory)")
    if not directory.exists():
        return
    if directory.resolve() in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
        raise OutputDirectoryError(f"{directory}: is the working directory or one of its parents; refusing to "
                                   f"replace it (name a new or empty directory)")
    if not any(directory.iterdir()):
        return
    owned = _owned(directory)
    if owned is None:
        raise OutputDirectoryError(f"{directory}: not empty and not written by symcost compile (no {MARKER} "
                                   f"marker); refusing to replace its files (name a new or empty directory)")
    foreign = sorted(set(read_tree(directory)) - owned)
    foreign += sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                      if p.is_dir() and not p.name in _IGNORED_DIRS and not any(p.iterdir()))
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise OutputDirectoryError(f"{directory}: holds {directory / foreign[0]}{more}, which symcost compile did "
                                   f"not write; move it away first, nothing was written")
_RESERVED_MODULES = frozenset({"__init__", "_runtime"})

#: Dimensions whose formulas the NumPy package holds in one module per variant (``Formula.algorithm``):
#: a model prices one variant of each (its stage terms; its memory forms, in BF16 or a low precision), and
#: compiling a module from source (no bytecode cache) costs about 0.1 ms per kilobyte, so a cold pricer should
#: not compile the other variants' hundreds.
SPLIT_DIMENSIONS = frozenset({"stage", "stage_slope", "memory", "memory_slope"})


def module_of(formula: Formula | Lowered) -> str:
    """The module of the NumPy package that holds *formula*'s function: its dimension, or for a dimension
    of :data:`SPLIT_DIMENSIONS`, ``<dimension>__<algorithm>``."""
    if formula.dimension in SPLIT_DIMENSIONS and formula.algorithm.isidentifier():
        return f"{formula.dimension}__{formula.algorithm}"
    return formula.dimension


#: Dimensions generated but not listed in ``docs/formulas.md``: mechanical derivatives (``<name>__d_<x>``) of
#: listed formulas.
UNLISTED = frozenset({"stage_slope", "memory_slope"})


def reference_anchor(formula: Formula | Lowered) -> str:
    """The anchor of ``docs/formulas.md`` that gives *formula*'s closed form and symbols: its own section, or
    for a derivative of an :data:`UNLISTED` dimension, the section of the formula it is the derivative of."""
    return formula.name.split("__d_")[0] if formula.dimension in UNLISTED else formula.name


def _function_targets(f: Lowered) -> str:
    names = ["out", *f.reals, *f.masks, *f.arguments, *f.passed]
    return "out," if len(names) == 1 else ", ".join(names)


def _render_function(env: jinja2.Environment, f: Lowered, backend: Backend = NUMPY) -> str:
    template = backend.template("function")
    try:
        text = env.get_template(template).render(f=f, targets=_function_targets(f),
                                                       reference=reference_anchor(f))
    except (jinja2.TemplateError, TypeError, ValueError) as exc:
        raise CodegenError(f"formula {f.name}: template {template}: {type(exc).__name__}: {exc}") from None
    try:
        compile(text, f"<generated {f.name}>", "exec")
    except SyntaxError as exc:
        raise CodegenError(f"formula {f.name}: generated code does not compile ({exc.msg}, line {exc.lineno}): "
                           f"{(exc.text or '').strip()}") from None
    return text.rstrip("\n")


def _render(env: jinja2.Environment, template: str, what: str, **context: object) -> str:
    try:
        return env.get_template(template).render(**context)
    except (jinja2.TemplateError, TypeError, ValueError) as exc:
        raise CodegenError(f"{what}: template {template}: {type(exc).__name__}: {exc}") from None


def _lower(formula: Formula, backend: Backend) -> Lowered:
    try:
        return lower(formula, backend)
    except CodegenError:
        raise
    except Exception as exc:  # a SymPy failure inside CSE or a rewrite: say which formula
        raise CodegenError(f"formula {formula.name}: cannot lower {type(exc).__name__}: {exc}") from exc


def forked_map(function: Callable[[T], U], items: Sequence[T], *, span: int = 32) -> list[U]:
    """``[function(x) for x in items]``, in forked processes over contiguous spans where that pays.

    Lowering and closed forms are pure and per formula, so with several cores and many items the
    spans run side by side; the result is the same list, in the same order, as the plain loop.
    *function* must be a module-level function (the workers find it by name).
    """
    workers = min(os.cpu_count() or 1, 4)
    spans = [items[i:i + span] for i in range(0, len(items), span)]
    if workers < 2 or len(spans) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [function(x) for x in items]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return [y for chunk in pool.map(functools.partial(_apply, function), spans) for y in chunk]


def _apply(function: Callable[[T], U], span: Sequence[T]) -> list[U]:
    return [function(x) for x in span]


def _lower_for(pair: tuple[Formula, tuple[Backend, ...]]) -> list[Lowered | None]:
    formula, backends = pair
    # A formula's backends together: they share its cached CSE forms.
    return [None if formula.dimension in b.skip else _lower(formula, b) for b in backends]


#: Forms already lowered in this process, by (formula name, expression, backend name): a second
#: rendering (``compile --check`` after a test's, the docs after the code) lowers nothing again.
_LOWERED: dict[tuple[str, object, str], Lowered] = {}


@functools.cache
def _compiler_digest() -> str:
    """A version of everything besides the formula that decides a lowered form: the lowering, printer,
    backend and simplification code, the per-layout symbols (hoisting) and SymPy's version."""
    import sympy

    here = Path(__file__).resolve().parent
    symbolic_dir = here.parent / "symbolic"
    return cache.source_digest(here / "lowering.py", here / "printer.py", here / "backends.py",
                               symbolic_dir / "simplify.py", symbolic_dir / "symbols.py",
                               extra=f"sympy {sympy.__version__}")


def _cache_key(formula: Formula, backend: Backend) -> str:
    text = "\n".join((_compiler_digest(), backend.name, formula.name, expression_text(formula.expr), formula.dimension,
                      formula.algorithm, formula.unit, formula.doc, formula.source, repr(formula.variant)))
    return hashlib.sha256(text.encode()).hexdigest()


def lower_formulas(formulas: list[Formula], backends: list[Backend]) -> dict[str, dict[str, Lowered]]:
    """Every formula lowered for every backend that compiles it: backend name → formula name → form.

    Lowered forms are kept in this process and in the user's cache (``codegen.runtime.cache``, named by a
    hash of the formula and of the compiler's code), so ``compile --check`` after a ``compile``
    lowers only what changed; a fresh checkout lowers everything.
    """
    wanted = [(f, b) for f in formulas for b in backends
              if f.dimension not in b.skip and (f.name, f.expr, b.name) not in _LOWERED]
    for f, b in wanted:
        low = cache.load("lowered", _cache_key(f, b))
        if isinstance(low, Lowered) and low.name == f.name:
            _LOWERED[(f.name, f.expr, b.name)] = low
    todo = [f for f in formulas if any((f.name, f.expr, b.name) not in _LOWERED for b in backends
                                       if f.dimension not in b.skip)]
    for f, row in zip(todo, forked_map(_lower_for, [(f, tuple(backends)) for f in todo])):
        for b, low in zip(backends, row):
            if low is not None:
                _LOWERED[(f.name, f.expr, b.name)] = low
                cache.store("lowered", _cache_key(f, b), low)
    return {b.name: {f.name: _LOWERED[(f.name, f.expr, b.name)] for f in formulas if f.dimension not in b.skip}
            for b in backends}


def render_tree(formulas: Iterable[Formula] | None = None, *,
                env: jinja2.Environment | None = None,
                backends: Iterable[Backend] = BACKENDS) -> dict[str, str]:
    """Every file of the generated tree, ``{relative path: text}``, sorted by path.

    Args:
        formulas: what to compile; the whole registry by default.
        env: a Jinja2 environment (tests pass one with broken templates);
            ``render.environment()`` by default.
        backends: the targets to render (all of ``codegen.backends.BACKENDS``
            by default), each into its own package.

    Raises:
        CodegenError: naming the formula (or file) that cannot be compiled.
    """
    if formulas is None:
        from symbolic import registry

        formulas = registry.FORMULAS.values()
    formulas = list(formulas)
    backends = list(backends)
    env = env or environment()
    packages = {b.package for b in backends if b.package}

    by_module: dict[str, list[Formula]] = {}
    for f in formulas:
        module = f.dimension
        if not module.isidentifier() or module in _RESERVED_MODULES | packages:
            raise CodegenError(f"formula {f.name}: dimension {module!r} cannot name a module of generated/")
        by_module.setdefault(module, []).append(f)
    taken = set(by_module) | {module_of(f) for f in formulas} | packages | {"FORMULAS", "MODULES", "importlib"}
    for f in formulas:
        if f.name in taken:
            raise CodegenError(f"formula {f.name}: its name would shadow a module or FORMULAS in generated/")

    lowered = lower_formulas(formulas, backends)
    files: dict[str, str] = {}
    for backend in backends:
        files.update(_render_backend(env, backend, formulas, by_module, lowered[backend.name]))
    for path, text in files.items():
        if path.endswith(".json"):
            json.loads(text)  # written by json.dumps above: it parses
            continue
        try:
            compile(text, f"generated/{path}", "exec")
        except SyntaxError as exc:
            raise CodegenError(f"generated/{path} does not compile ({exc.msg}, line {exc.lineno})") from None
    return dict(sorted(files.items()))


def _render_backend(env: jinja2.Environment, backend: Backend, formulas: list[Formula],
                    by_module: Mapping[str, list[Formula]], lowered: Mapping[str, Lowered]) -> dict[str, str]:
    """The files of one backend's package: a module per dimension, ``__init__.py``, ``_runtime.py``."""
    formulas = [f for f in formulas if f.dimension not in backend.skip]
    by_module = {module: members for module, members in by_module.items() if module not in backend.skip}
    if backend is NUMPY:  # (the other packages keep one module per dimension)
        by_module = {}
        for f in formulas:
            by_module.setdefault(module_of(f), []).append(f)
    files: dict[str, str] = {}
    module_template, function_template = backend.template("module"), backend.template("function")
    for module in sorted(by_module):
        members = [lowered[f.name] for f in by_module[module]]
        functions = [_render_function(env, low, backend) for low in members]
        body = _render(env, module_template, f"module {backend.path(module + '.py')}", dimension=members[0].dimension,
                       variant=members[0].algorithm if module != members[0].dimension else None,
                       formulas=members, functions=functions)
        files[backend.path(f"{module}.py")] = header([module_template, function_template],
                                                     fingerprint(by_module[module])) + "\n" + body
    init_template = backend.template("init")
    body = _render(env, init_template, backend.path("__init__.py"), modules=sorted(by_module),
                   formulas=[lowered[f.name] for f in formulas], table=TABLE, block=BLOCK)
    files[backend.path("__init__.py")] = header([init_template], fingerprint(formulas)) + "\n" + body
    if backend is NUMPY:  # the other packages read the NumPy package's table
        files[backend.path(TABLE)] = _table_json([lowered[f.name] for f in formulas], fingerprint(formulas))
    runtime_template = backend.template("runtime")
    body = _render(env, runtime_template, backend.path("_runtime.py"), block=BLOCK)
    files[backend.path("_runtime.py")] = header([runtime_template], None) + "\n" + body
    return files


def _table_json(formulas: Sequence[Lowered], digest: str) -> str:
    """``formulas.json``: what wrote it, the formulas' fingerprint, and ``FORMULAS`` (one formula a line,
    in registry order, so that ``compile --check`` shows a changed formula as a one-line diff).

    Tuples are written as JSON lists; ``generated._formulas`` reads them back as tuples.
    """
    rows = []
    for f in formulas:
        meta: dict[str, object] = {"dimension": f.dimension, "module": module_of(f), "algorithm": f.algorithm,
                                   "unit": f.unit, "doc": f.summary, "source": f.source, "arguments": list(f.arguments),
                                   "ops": f.ops, "fingerprint": f.fingerprint}
        if f.variant:
            meta["variant"] = f.variant
        rows.append(f"  {json.dumps(f.name)}: {json.dumps(meta, ensure_ascii=False)}")
    head = {"generated_by": f"`{COMMAND}`: do not edit; change the formulas under symbolic/ and run it again",
            "fingerprint": digest}
    return ("{\n" + "".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n" for k, v in head.items())
            + '"formulas": {\n' + ",\n".join(rows) + "\n}}\n")


def read_tree(directory: str | Path) -> dict[str, str]:
    """The files under *directory* that the compiler owns (all but ``__pycache__``), as text."""
    root = Path(directory)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS)
        for name in sorted(filenames):
            if name == MARKER and Path(dirpath) == root:
                continue
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = path.read_bytes().decode("utf-8", errors="replace")
    return out


@dataclass(frozen=True)
class TreeDiff:
    """How a directory differs from the tree the compiler would write.

    Attributes:
        changed: relative path → unified diff (on disk → compiled).
        missing: files the compiler would write that are not there.
        stale: files there that the compiler would not write.
    """

    changed: Mapping[str, str]
    missing: tuple[str, ...]
    stale: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.stale)

    def report(self, directory: str | Path) -> str:
        """Diffs and lists, ending with the command that fixes them."""
        parts = list(self.changed.values())
        parts += [f"missing: {Path(directory) / p}\n" for p in self.missing]
        parts += [f"stale (the compiler would not write it): {Path(directory) / p}\n" for p in self.stale]
        parts.append(f"{directory} is out of date with the formula registry: run `{COMMAND}` to regenerate it.\n")
        return "".join(parts)


def compare_tree(files: Mapping[str, str], directory: str | Path) -> TreeDiff:
    """Compare the rendered *files* with what *directory* holds."""
    directory = Path(directory)
    on_disk = read_tree(directory)
    changed: dict[str, str] = {}
    for path in sorted(set(files) & set(on_disk)):
        if files[path] != on_disk[path]:
            changed[path] = "".join(difflib.unified_diff(
                on_disk[path].splitlines(keepends=True), files[path].splitlines(keepends=True),
                fromfile=f"{directory.as_posix()}/{path} (on disk)",
                tofile=f"{directory.as_posix()}/{path} (compiled)"))
    return TreeDiff(changed, tuple(sorted(set(files) - set(on_disk))), tuple(sorted(set(on_disk) - set(files))))


def write_tree(files: Mapping[str, str], directory: str | Path) -> TreeDiff:
    """Make *directory* hold exactly *files*; returns what differed before (nothing is written if nothing did).

    *directory* must be missing, empty, or written by an earlier ``write_tree`` (its marker
    lists every file it holds): :func:`check_output_directory`. All files, and the marker,
    go to a temporary directory beside *directory*, which then replaces it; until that swap
    the old tree is untouched, and a failed swap puts it back. ``__pycache__`` is not carried
    over.

    Raises:
        OutputDirectoryError: a directory the compiler did not write, before anything is written.
    """
    if MARKER in files:
        raise CodegenError(f"{MARKER}: the compiler's marker cannot be one of the rendered files")
    check_output_directory(directory)
    directory = Path(directory)
    diff = compare_tree(files, directory)
    if diff.ok and _owned(directory) == set(files):
        return diff
    parent = directory.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.new-", dir=parent))
    backup: Path | None = None
    swapped = False
    try:
        for path, text in files.items():
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode("utf-8"))
        (staging / MARKER).write_text(_marker_text(files), encoding="utf-8")
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the tree is ordinary source
        if directory.exists():
            backup = parent / f".{directory.name}.old-{staging.name.rsplit('-', 1)[-1]}"
            os.rename(directory, backup)
        try:
            os.rename(staging, directory)
            swapped = True
        except BaseException:
            if backup is not None:
                os.rename(backup, directory)  # if even this fails, the old tree stays in the backup
                backup = None
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if swapped and backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    return diff


def compile_in_memory(formulas: Iterable[Formula]) -> dict[str, Callable[..., object]]:
    """Functions for *formulas* rendered exactly as ``symcost compile`` renders them, without writing files.

    For formulas built on demand (a model's stage closed forms for one
    variant): same printer, lowering and templates as the committed tree, and
    the committed ``generated/_runtime.py`` for the calling convention.

    Raises:
        CodegenError: naming the formula that cannot be compiled.
    """
    import generated  # the package whose _runtime the rendered modules import

    files = render_tree(formulas, backends=(NUMPY,))
    functions: dict[str, Callable[..., object]] = {}
    for path, text in files.items():
        module = path.removesuffix(".py")
        if module in _RESERVED_MODULES or not path.endswith(".py"):
            continue
        namespace: dict[str, object] = {"__name__": f"{generated.__name__}._on_demand_{module}",
                                        "__package__": generated.__name__}
        exec(compile(text, f"<on-demand generated/{path}>", "exec"), namespace)  # our own rendered code
        for name in namespace.get("__all__", ()):  # type: ignore[union-attr]
            functions[name] = namespace[name]  # type: ignore[index]
    return functions

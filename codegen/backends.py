"""Backends: what the code generator writes for one target, as data.

In the spirit of SymForce's ``CodegenConfig`` (whose Python config takes a
``use_numba`` flag), a ``Backend`` names everything target-specific and
nothing else: whether its code is numba loops (``use_numba``) or in-place
NumPy calls, the names its code binds, the template folder and the templates
to render, and where its files go under ``generated/``. The lowering
(``codegen.lowering``: CSE, rewrites, the schedule and printer each kind of
backend takes) and the compiler (file set, header, writing, ``--check``) are
shared. This module is data and imports no SymPy: the run time (the fused
pricer) reads it too.

Two backends, both written by ``symcost compile``:

* ``NUMPY`` — ``generated/``: blocked, in-place NumPy statements
  (``numpy.multiply(x, y, out=r0)``), ranked by NumPy calls per block, then
  by operation count. The default, and the only target that needs nothing
  beyond NumPy. The array API has no ``out=``, so for arrays of another
  library (JAX, CuPy, …) each function also holds a plain path (``plain``):
  the CSE form as whole-array expressions on that library's namespace,
  JAX in, JAX out.
* ``NUMBA`` (``use_numba``) — ``generated/fused/``: one ``numba.njit`` loop per
  formula over the broadcast inputs, the CSE temporaries as scalars in the loop
  body, ranked by operation count. Each element is read once and written once,
  so a call costs about one pass over memory. Importing ``generated.fused``
  needs numba; ``generated`` never imports it. Its run-time kernels (the fused
  pricer's loops, whose terms depend on the model file) are templates of this
  backend too (``Templates.kernels``), rendered by :func:`render_kernel`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jinja2

from .render import environment

__all__ = ["Backend", "Templates", "NUMPY", "NUMBA", "BACKENDS", "by_name", "render_kernel"]


@dataclass(frozen=True)
class Templates:
    """The templates one backend renders, by role (names inside the backend's template folder).

    Attributes:
        module, function, init, runtime: the files ``symcost compile`` writes.
        kernels: templates rendered at run time with run-time data (:func:`render_kernel`).
    """

    module: str = "module.py.jinja"
    function: str = "function.py.jinja"
    init: str = "init.py.jinja"
    runtime: str = "runtime.py.jinja"
    kernels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Backend:
    """One code-generation target.

    Attributes:
        name: what callers select it by (``codegen.runtime.kernels.evaluator(..., backend=name)``).
        package: its sub-directory of ``generated/`` (``""``: ``generated/`` itself).
        template_dir: its folder under ``codegen/templates`` (``""``: the folder itself).
        templates: the templates it renders.
        reserved: names its generated code binds, which no argument may take.
        use_numba: its code is one numba loop per formula, the CSE temporaries as scalars (else
            in-place NumPy statements over blocks).
        plain: each function also holds a plain path for arrays of another array-API library.
        requires: modules its output imports besides NumPy.
        skip: dimensions it does not compile (their functions fall back to the NumPy target).
    """

    name: str
    package: str
    template_dir: str
    templates: Templates
    reserved: frozenset[str]
    use_numba: bool = False
    plain: bool = False
    requires: tuple[str, ...] = ()
    skip: frozenset[str] = frozenset()

    def template(self, role: str) -> str:
        """The loader name of the template for *role* (``module``, ``function``, ``init``, ``runtime``)."""
        return self._loader_name(getattr(self.templates, role))

    def path(self, filename: str) -> str:
        """Where *filename* goes, relative to ``generated/``."""
        return f"{self.package}/{filename}" if self.package else filename

    def _loader_name(self, name: str) -> str:
        return f"{self.template_dir}/{name}" if self.template_dir else name


NUMPY = Backend(
    name="numpy",
    package="",
    template_dir="",
    templates=Templates(),
    reserved=frozenset({"numpy", "call", "out", "_runtime", "xp"}),
    plain=True,
)

NUMBA = Backend(
    name="numba",
    package="fused",
    template_dir="numba",
    templates=Templates(kernels=("pricer.py.jinja", "pricer_keys.py.jinja")),
    reserved=frozenset({"numpy", "out", "i", "result", "arrays", "_runtime"}),
    use_numba=True,
    requires=("numba",),
    # Sensitivity evaluates the derivatives once per layout it analyses: a fused loop buys nothing there.
    skip=frozenset({"stage_slope", "memory_slope"}),
)

#: Every backend ``symcost compile`` writes, in the order it renders them.
BACKENDS: tuple[Backend, ...] = (NUMPY, NUMBA)


def by_name(name: str) -> Backend:
    """The backend called *name*.

    Raises:
        ValueError: naming the backends there are.
    """
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise ValueError(f"unknown backend {name!r}; there are {[b.name for b in BACKENDS]}")


@functools.cache
def _environment() -> jinja2.Environment:
    return environment()


def render_kernel(backend: Backend, template: str, **context: object) -> str:
    """The text of one run-time kernel module of *backend*: *template* (one of its ``templates.kernels``)
    rendered with *context* by the compiler's strict environment (``codegen.render.environment``).

    Raises:
        ValueError: naming the template when *backend* declares no such kernel template.
        jinja2.TemplateError: when *context* lacks a name the template uses (the environment is strict).
    """
    if template not in backend.templates.kernels:
        raise ValueError(f"backend {backend.name!r} has no kernel template {template!r}; "
                         f"it has {list(backend.templates.kernels)}")
    return _environment().get_template(backend._loader_name(template)).render(**context)

"""``symcost derive NAME``: the simplified closed form of a formula for one variant."""

from __future__ import annotations

import argparse

import sympy

from symbolic import registry
from symbolic.simplify import closed_form
from symbolic.symbols import SPECS
from symbolic.variants import FAMILIES, Variant, resolve


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("derive", help="print the closed form of a formula",
                       description="Print the simplified closed form of a registered formula, or of a function "
                                   "of the original for one variant (e.g. cp_traffic --algo ulysses_cp "
                                   "--attention gqa).")
    p.add_argument("name", nargs="?", help="formula name or original function name")
    p.add_argument("--algo", help="CP algorithm: colossalai_cp, hybrid_cp (hybird_cp), ulysses_cp")
    p.add_argument("--attention", help="attention type: mha, gqa, mqa, mla")
    p.add_argument("--linear", action="store_true", help="a linear-attention layer (n_linrec != 0)")
    p.add_argument("--latex", action="store_true", help="print LaTeX instead of text")
    p.add_argument("--list", action="store_true", help="list formula and function names")
    p.set_defaults(func=run)


def render(expr: sympy.Expr, latex: bool) -> str:
    if latex:
        return sympy.latex(expr)
    return sympy.pretty(expr, use_unicode=True, wrap_line=False)


def run(args: argparse.Namespace) -> int:
    if args.list or not args.name:
        print("functions of the original (take --algo/--attention):")
        for name in FAMILIES:
            print(f"  {name}")
        print("formulas:")
        for name, f in registry.FORMULAS.items():
            print(f"  {name}  [{f.unit}]")
        return 0
    formulas = resolve(args.name, Variant(args.algo, args.attention, args.linear))
    for i, f in enumerate(formulas):
        if i:
            print()
        expr = closed_form(f.expr)
        print(f"{f.name}  [{f.unit}]")
        print(f"  {f.doc}")
        print(f"  source: {f.source}")
        symbols = ", ".join(f"{a} ({SPECS[a].meaning})" for a in f.arguments)
        print(f"  symbols: {symbols or 'none'}")
        print()
        print(render(expr, args.latex))
    return 0

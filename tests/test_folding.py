"""Constant terms (codegen.pricing.folding): a term the shared arguments decide alone is folded to its
number only where every layout's real evaluation gives exactly that number."""

from __future__ import annotations

import numpy as np
import pytest

import generated
from codegen.configs import load_model
from codegen.pricing.engine import BoundKernel, bound_term
from codegen.pricing.pricer import StagePricer

#: Shared values that make conditions hold (0, 1: no such dimension, no communication) and some that do not.
_SHARED = np.array([0.0, 1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 8.0, 0.5])


def _kernels() -> list[str]:
    return sorted(name for name in generated.FORMULAS if getattr(getattr(generated, name), "kernel", None) is not None)


def test_folded_terms_equal_every_layouts_value():
    """For every generated kernel and several draws of which arguments are shared (and their values), a
    folded number equals the function's value at every one of 64 layouts of random varying values."""
    rng = np.random.default_rng(7)
    folded = 0
    for name in _kernels():
        function = getattr(generated, name)
        kernel = function.kernel
        for _ in range(4):
            shared = {a: float(rng.choice(_SHARED)) for a in kernel.arguments
                      if a in kernel.widened or rng.random() < 0.5}
            own = [a for a in kernel.arguments if a not in shared]
            with np.errstate(all="ignore"):  # (a 0 field divides in the invariants, as the function would)
                plan = bound_term(name, shared)
            if plan is None or not own:
                continue
            value = plan.constant()
            if value is None:
                continue
            folded += 1
            varying = {a: np.where(rng.random(64) < 0.2, rng.choice([0.0, 1.0, 2.0], 64), rng.uniform(0, 100, 64))
                       for a in own}
            with np.errstate(all="ignore"):
                actual = np.broadcast_to(function(**shared, **varying), (64,))
            np.testing.assert_array_equal(actual, np.full(64, value), err_msg=f"{name} with shared {shared}")
    # The fold must have been tried on real cases (not a test that passes by never folding).
    assert folded >= 100, folded


def test_unknown_operations_stop_the_fold():
    """A block doing anything the stand-ins do not model is not folded (it is evaluated as before)."""
    from codegen.pricing.folding import constant_output

    def block(out, r0, x):
        np.multiply(x, 2.0, out=r0)
        np.cumsum(r0, out=out)  # no elementwise ufunc call: not modelled

    assert constant_output(block, 1, 0, [np.asarray(1.0)], [], quiet=False) is None

    def guarded(out, r0, m0, x, y):
        np.less_equal(x, 1.0, out=m0)
        if not m0.all():
            np.divide(y, x, out=r0)
        np.copyto(r0, 0.0, where=m0)
        np.copyto(out, r0)

    # x shared and 1: every layout takes the zero branch, whatever y is.
    assert constant_output(guarded, 1, 1, [np.asarray(1.0), None], [1], quiet=True) == 0.0
    # x shared and 2: the branch reads y, which varies.
    assert constant_output(guarded, 1, 1, [np.asarray(2.0), None], [1], quiet=True) is None

    def loud(out, x):
        np.divide(1.0, x, out=out)

    # A division by a shared 0 in a loud kernel, which the real block would warn about, stops the fold;
    # a quiet kernel ignores it, as the real block does.
    assert constant_output(loud, 0, 0, [np.asarray(0.0)], [], quiet=False) is None
    assert constant_output(loud, 0, 0, [np.asarray(0.0)], [], quiet=True) == np.inf


@pytest.mark.parametrize("fixed", [{}, {"cp": 1}, {"cp": 1, "t": 1}])
def test_pricer_prices_alike_with_and_without_folding(monkeypatch, fixed):
    """Qwen3-72B (its EP term is 0 for every layout, and the CP term with cp = 1): the same prices,
    bit for bit, with the fold and without it."""
    model = load_model("qwen3-72b")
    rng = np.random.default_rng(3)
    n = 3000
    arrays = {"d": rng.choice([1, 2, 4, 8], n), "t": rng.choice([1, 2, 4, 8], n), "p": rng.choice([1, 2, 4, 8], n),
              "cp": rng.choice([1, 2, 4], n), "m": rng.integers(1, 64, n), "b": rng.choice([1, 2], n)}
    arrays.update(fixed)
    from codegen.configs import LayoutBatch, validate_batch

    keep = validate_batch(model, LayoutBatch.from_arrays(model.layout, **arrays))
    arrays = {k: (v[keep] if isinstance(v, np.ndarray) else v) for k, v in arrays.items()}
    pricer = StagePricer(model, device="A2")
    pricer(**arrays)  # the plan
    folded = pricer(**arrays)
    assert any(plan.constants for plan in pricer._call_plans.values()), "nothing folded: the test checks nothing"
    monkeypatch.setattr(BoundKernel, "constant", lambda self: None)
    plain = StagePricer(model, device="A2")
    plain(**arrays)
    unfolded = plain(**arrays)
    assert not any(plan.constants for plan in plain._call_plans.values())
    np.testing.assert_array_equal(folded.bottleneck, unfolded.bottleneck)
    np.testing.assert_array_equal(folded.sum, unfolded.sum)

"""The NumPy target on other array-API libraries: the plain path (no ``out=``) gives the same numbers.

On NumPy itself the path is forced (NumPy 2 is an array-API namespace); on
JAX (CPU, float64, in a child process) it is taken because the arguments are
JAX arrays, and JAX arrays come out. The JAX test skips when JAX is not installed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import generated
import generated._runtime as runtime
from symbolic import registry
from conftest import assert_close
from test_generated import valid_values

#: Plain whole-array expressions against the blocked in-place statements: the same operations in
#: another order, so they agree to rounding.
RTOL = 1e-12

NAMES = list(registry.FORMULAS)


def test_plain_path_on_numpy_agrees_with_the_in_place_path(monkeypatch):
    values = {name: valid_values(registry.get(name).arguments, 300, seed=29) for name in NAMES}
    with np.errstate(all="ignore"):
        want = {name: getattr(generated, name)(**values[name]) for name in NAMES}
    taken = []

    def numpy_namespace(args):
        taken.append(True)
        return np

    monkeypatch.setattr(runtime, "namespace", numpy_namespace)
    for name in NAMES:
        with np.errstate(all="ignore"):
            got = getattr(generated, name)(**values[name])
        assert got.shape == want[name].shape, name
        # An absolute floor of RTOL times the function's largest value over the points: a form that is a
        # difference (a low-precision run's change of bytes) may cancel to a value far below its terms, where the two
        # paths' rounding orders differ by more than RTOL of the small result.
        finite = np.abs(want[name][np.isfinite(want[name])]) if np.ndim(want[name]) else np.abs(want[name])
        floor = RTOL * float(np.max(finite, initial=0.0))
        assert_close(got, want[name], rtol=RTOL, atol=floor, msg=name)
    assert len(taken) == sum(1 for n in NAMES if registry.get(n).arguments)


def test_numpy_values_never_take_the_plain_path():
    assert runtime.namespace((1, 2.5, np.float64(3), np.ones(3), [1.0, 2.0], (3.0,))) is None


#: JAX runs in a child process: imported into this one, it would start threads that the compiler's forked
#: workers (later tests render generated/) must not inherit.
_JAX_CHILD = """
import sys
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
sys.path.insert(0, "tests")
import generated
from symbolic import registry
from conftest import assert_close
from test_generated import valid_values

for name in sys.argv[1:]:
    values = valid_values(registry.get(name).arguments, 500, seed=31)
    first = min(values)
    values[first] = values[first][0]  # a Python number among the JAX arrays
    want = getattr(generated, name)(**values)
    got = getattr(generated, name)(**{k: (v if k == first else jnp.asarray(v)) for k, v in values.items()})
    assert type(got).__module__.startswith("jax"), (name, type(got))
    assert got.dtype == jnp.float64 and got.shape == want.shape, name
    assert_close(np.asarray(got), want, rtol=%r, atol=0.0)
got = generated.cp_ring_mha_traffic_bytes(b=jnp.asarray([1, 2]), bytes_compute=2, cp=2, h=8, s=4, t=1)
assert got.dtype == jnp.float64, got.dtype  # JAX integer arrays become floats
assert_close(np.asarray(got), [128.0, 256.0])
print("ok", len(sys.argv) - 1)
""" % RTOL


def test_jax_arrays_in_jax_arrays_out():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed: the array-API test on JAX (CPU) is skipped")
    names = ["cp_ulysses_mla_traffic_bytes", "cp_record_gqa_kv_dim_elements",
             "cp_ring_gqa_record_exposed_comm_time_ms", "fsdp_tied_embedding_traffic_bytes"]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _JAX_CHILD, *names], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", str(len(names))]

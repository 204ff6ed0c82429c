"""The pricing engine (``codegen.pricing.engine``): its block loop and its one grouping of rows by their keys."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.pricing import engine
from codegen.pricing.engine import Digit, KeyColumns, RowGroups, blocks, group_rows, whole_column


def test_blocks_cover_every_row_once_in_order():
    assert [(r.start, r.stop) for r in blocks(10, 4)] == [(0, 4), (4, 8), (8, 10)]
    assert list(blocks(0, 4)) == []
    assert [(r.start, r.stop) for r in blocks(4, 4)] == [(0, 4)]


def _same_partition(inverse: np.ndarray, rows: np.ndarray) -> None:
    """Rows share a group exactly when their tuples are equal."""
    distinct, want = np.unique(rows, axis=0, return_inverse=True)
    assert len(np.unique(inverse)) == len(distinct)
    assert len(np.unique(np.stack([inverse, want.reshape(-1)], axis=1), axis=0)) == len(distinct)


@pytest.mark.parametrize("table", [1 << 18, 1 << 9, 1 << 5])
def test_groups_partition_the_rows_by_their_keys(table):
    """Every way of numbering (one pass, renumberings, a column's own values, a sort of a wide column, a table grown
    past the rule) puts two rows in one group exactly when all their keys are equal, and reads each group's keys
    back; with too few rows sharing their keys there are no groups."""
    rng = np.random.default_rng(table)
    n = 20_000
    columns = {"a": rng.choice([1, 2, 4, 8, 64], n), "b": rng.integers(3, 9, n), "c": rng.choice([0, 300], n),
               "d": rng.choice([5, 10 ** 9, 10 ** 12], n), "e": np.full(n, 3)}
    limit = max(4 * n, 1 << 12)
    bound = min(limit, table)
    groups = group_rows({k: Digit.of(v, compact_above=bound) for k, v in columns.items()}, n, table=bound, limit=limit)
    rows = np.stack(list(columns.values()), axis=1)
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    assert len(groups.present) == len(distinct)
    number = groups.number
    pairs = np.unique(np.stack([number, inverse.ravel()], axis=1), axis=0)  # same number <=> same keys
    assert len(pairs) == len(distinct)
    where = np.searchsorted(groups.present, number)
    assert np.array_equal(groups.present[where], number)
    for name, column in columns.items():
        assert np.array_equal(groups.keys[name][where], column), name
    reps, inv = groups.rows()
    np.testing.assert_array_equal(rows[reps][inv], rows)
    assert group_rows({}, 5, table=table).number.tolist() == [0] * 5
    # Every row its own group, and 7 values beside them: more than four table entries per row.
    wide = {"a": np.arange(n), "b": np.arange(n) % 7}
    assert group_rows({k: Digit.of(v, compact_above=bound) for k, v in wide.items()}, n, table=bound,
                      limit=limit) is None
    # ... which the exact grouping numbers by a sort instead.
    exact = group_rows({k: Digit.of(v, compact_above=bound) for k, v in wide.items()}, n, table=bound, limit=limit,
                       exact=True)
    assert isinstance(exact, RowGroups) and len(exact) == n
    np.testing.assert_array_equal(exact.keys["a"][exact.number], wide["a"])


def test_only_whole_columns_are_group_keys():
    np.testing.assert_array_equal(whole_column(np.array([1.0, 8.0, 4096.0])), [1, 8, 4096])
    assert whole_column(np.array([1.0, 2.5])) is None
    assert whole_column(np.array([1.0, np.nan])) is None
    assert whole_column(np.array([np.inf, 2.0])) is None


@pytest.mark.parametrize("table", [engine.GROUP_TABLE, 80])
def test_key_columns_group_as_a_sort_does(table):
    """A block's rows share a group exactly when every key column is equal (narrow columns by offset, others by a
    table or a sort; *table* 80 forces the renumbering of the groups so far), each group's representative is one
    of its rows; a column that is not whole is no key, and grouping that would not pay is declined."""
    rng = np.random.default_rng(3)
    m = 4096
    a = rng.integers(3, 9, m).astype(float)
    columns = {"a": a, "b": a * 1000, "c": rng.integers(0, 6, m).astype(float),
               "d": rng.choice([7, 10**12], m).astype(float), "e": np.full(m, 2.0)}
    keys = KeyColumns(m)
    keys.columns = dict(columns)
    reps, inverse = keys.group(sorted(columns), table=table)
    rows = np.stack([columns[k] for k in sorted(columns)], axis=1)
    np.testing.assert_array_equal(rows[reps][inverse], rows)  # each row's group holds its own values
    _same_partition(inverse, rows)
    keys.columns["half"] = a + 0.5
    assert keys.group(["a", "half"]) is None  # not whole: not a key
    keys.columns["ids"] = np.arange(m, dtype=float)
    assert keys.group(["ids"]) is None  # every row distinct: grouping does not pay


@pytest.mark.parametrize("vp_values", [(1,), (2,), (1, 2, 3)])
def test_pipeline_shapes_used_index_the_shapes_present(vp_values):
    """``PipelineShapes.used``: each layout's index names its own (p, vp) in ``present``, ``present`` holds the
    shapes some layout has and no other, and ``index_of`` numbers the layouts of a part alike."""
    rng = np.random.default_rng(5)
    p = rng.choice([1, 2, 4, 8, 16], 500)
    vp = rng.choice(vp_values, 500)
    shapes = engine.PipelineShapes.used(p, vp)
    assert shapes.index is not None
    assert [shapes.present[int(i)] for i in shapes.index] == list(zip(p.tolist(), vp.tolist()))
    assert set(shapes.present.values()) == set(zip(p.tolist(), vp.tolist()))
    part = slice(100, 140)
    assert np.array_equal(shapes.index_of(p[part], vp[part]), shapes.index[part])


def test_pipeline_shapes_used_one_pipeline():
    """Both columns one broadcast value: one pipeline, no index."""
    p, vp = np.broadcast_to(np.int64(4), (300,)), np.broadcast_to(np.int64(2), (300,))
    shapes = engine.PipelineShapes.used(p, vp)
    assert shapes.index is None and shapes.radix is None and shapes.present == {0: (4, 2)}
    assert shapes.index_of(p, vp) is None

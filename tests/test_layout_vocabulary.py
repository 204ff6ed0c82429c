"""The layout keys, recompute modes and ZeRO levels are declared once (``symbolic.vocabulary``) and every place
that names them derives from that declaration: the layout types, the layout text, the input gate's bounds, the
search's keys and columns and the command line."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from codegen.cli.search import OUT_COLUMNS
from codegen.configs import ARRAY_KEYS, Layout, LayoutBatch, LayoutError, RecomputePlan, load_model, parse_layout, \
    parse_recompute
from codegen.pricing.chunks import Setting
from codegen.runtime.inputs import COUNT_MAX, DEGREE_FIELDS, DEGREE_MAX, bound
from codegen.search import COLUMNS
from codegen.search.space import SearchSpace
from symbolic import vocabulary as v

ROOT = Path(__file__).resolve().parent.parent

#: A value of each kind of key the layout text accepts.
TEXT_VALUE = {"whole": "2", "flag": "1", "text": "ulysses"}


def test_layout_fields_are_the_declared_keys_with_their_defaults():
    fields = dataclasses.fields(Layout)
    assert tuple(f.name for f in fields) == v.LAYOUT_KEY_NAMES
    for f in fields:
        declared = v.layout_key(f.name).default
        if declared is v.REQUIRED:
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert f.default_factory().mode == declared, f.name  # the recompute plan's mode
        else:
            assert f.default == declared, f.name
    assert Layout(d=1, t=1, p=1, m=1).recompute == RecomputePlan(v.layout_key("recompute").default)


def test_batch_columns_and_settings_are_the_declared_keys():
    names = [f.name for f in dataclasses.fields(LayoutBatch) if not f.name.endswith("_pipeline")]
    assert tuple(names) == v.LAYOUT_KEY_NAMES
    assert ARRAY_KEYS == v.PER_LAYOUT_KEYS
    assert set(v.PER_LAYOUT_KEYS) | set(v.SHARED_KEYS) == set(v.LAYOUT_KEY_NAMES)
    batch = LayoutBatch.from_layouts([Layout(d=2, t=1, p=1, m=4)])
    assert all(getattr(batch, name).dtype.kind == "i" for name in v.PER_LAYOUT_KEYS)
    assert batch.settings()[:len(v.SHARED_KEYS)] == tuple(getattr(batch, name) for name in v.SHARED_KEYS)


def test_the_input_gate_bounds_each_key_as_declared():
    assert (v.DEGREE_MAX, v.COUNT_MAX) == (DEGREE_MAX, COUNT_MAX)
    whole = {key.name for key in v.LAYOUT_KEYS if key.kind == "whole"}
    assert DEGREE_FIELDS & whole == set(v.LAYOUT_DEGREES)  # (the field sp is the flag's TP split, a degree too)
    for key in v.LAYOUT_KEYS:
        if key.kind == "whole":
            assert (key.minimum, key.maximum) == (1, bound(key.name)), key.name
            assert key.maximum == (DEGREE_MAX if key.degree else COUNT_MAX), key.name


@pytest.mark.parametrize("key", v.LAYOUT_KEYS, ids=lambda key: key.name)
def test_the_layout_text_takes_the_declared_keys_within_their_bounds(key):
    defaults = Layout(d=4, t=2, p=2, m=8)
    if not key.in_text:
        with pytest.raises(LayoutError, match=f"layout key '{key.name}' is unknown; known keys: "
                                              f"{', '.join(v.TEXT_KEYS)}$"):
            parse_layout(f"{key.name}=1", defaults)
        return
    parse_layout(f"{key.name}={TEXT_VALUE[key.kind]}", defaults)
    if key.kind == "whole":
        for value in (key.minimum - 1, key.maximum + 1):
            with pytest.raises(LayoutError, match=f"^layout {key.name}: must be"):
                parse_layout(f"{key.name}={value}", defaults)


def test_the_recompute_modes_are_the_declared_ones():
    for mode in v.RECOMPUTE_MODES:
        assert RecomputePlan(mode).mode == parse_recompute(mode).mode == mode
    with pytest.raises(LayoutError, match=f"mode must be one of {', '.join(v.RECOMPUTE_MODES)}, got 'most'"):
        RecomputePlan("most")
    space = SearchSpace(load_model("llama2-7b"), 8, 64)
    assert tuple(dict.fromkeys(setting.recompute for setting in space.settings)) == v.RECOMPUTE_MODES


def test_the_zero_levels_set_the_declared_switches():
    for level, switches in v.ZERO_LEVELS.items():
        assert Setting(v.RECOMPUTE_MODES[0], level, "colossalai_cp").batch_kwargs() == {
            "recompute": v.RECOMPUTE_MODES[0], "cp_algo": "colossalai_cp", **switches}
        assert all(v.layout_key(name).kind == "flag" for name in switches)
    with pytest.raises(ValueError, match=f"zero level: one of {', '.join(map(str, v.ZERO_LEVELS))}, got 7"):
        SearchSpace(load_model("llama2-7b"), 8, 64, zero_levels=(7,))


def test_the_search_keys_and_columns_follow_the_declaration():
    chunk = next(SearchSpace(load_model("llama2-7b"), 8, 64).chunks())
    assert set(chunk.values) == set(v.SEARCH_KEYS)  # the keys a search decodes are the declared ones
    assert set(v.SEARCH_KEYS) == set(v.PER_LAYOUT_KEYS) - {"os"}
    assert COLUMNS[1:1 + len(v.SEARCH_KEYS) + len(v.SEARCH_SETTINGS)] == (*v.SEARCH_KEYS, *v.SEARCH_SETTINGS)
    assert OUT_COLUMNS == ("rank", *v.SEARCH_KEYS, *v.SEARCH_SETTINGS)


#: The declared groups a dictionary restates by its keys (a dictionary with one entry per layout key is no copy).
_DICTIONARY_GROUPS = ("ZERO_LEVELS switches", "LEVEL_PARAMETERS")


def _string_collections(path: Path):
    """``(line, names, is_dict)`` of each literal tuple, list or set of strings and each dictionary of constant keys."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts):
            yield node.lineno, frozenset(item.value for item in node.elts), False
        elif isinstance(node, ast.Dict) and node.keys and all(isinstance(k, ast.Constant) for k in node.keys):
            yield node.lineno, frozenset(k.value for k in node.keys), True


def test_no_module_restates_a_declared_group():
    """A literal tuple, list or set naming exactly the declared recompute modes, one of the declared groups of
    layout keys or the search's keys or settings, or a dictionary of a ZeRO level's switches or of the network
    levels' parameters, anywhere but in the vocabulary, is a second copy."""
    groups = {"RECOMPUTE_MODES": v.RECOMPUTE_MODES, "LAYOUT_KEY_NAMES": v.LAYOUT_KEY_NAMES,
              "PER_LAYOUT_KEYS": v.PER_LAYOUT_KEYS, "SHARED_KEYS": v.SHARED_KEYS, "TEXT_KEYS": v.TEXT_KEYS,
              "LAYOUT_DEGREES": v.LAYOUT_DEGREES, "SEARCH_KEYS": v.SEARCH_KEYS, "SEARCH_SETTINGS": v.SEARCH_SETTINGS,
              "ZERO_LEVELS switches": tuple(v.ZERO_LEVELS[max(v.ZERO_LEVELS)]),
              "LEVEL_PARAMETERS": tuple(v.LEVEL_PARAMETERS)}
    wanted = {frozenset(names): group for group, names in groups.items()}
    found = []
    for top in ("symbolic", "hardware", "codegen"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "symbolic" / "vocabulary.py":
                continue
            found += [f"{path.relative_to(ROOT)}:{line} restates {wanted[names]}"
                      for line, names, is_dict in _string_collections(path)
                      if names in wanted and (not is_dict or wanted[names] in _DICTIONARY_GROUPS)]
    assert not found, "\n".join(found)

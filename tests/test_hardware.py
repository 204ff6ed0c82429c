"""The hardware catalog: every file loads, A2/A3 as the original models them, the
GPU systems as their datasheets state, bindings match the declared symbols, and a
malformed file always fails with a HardwareSpecError that names it."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hardware
from codegen.cli import main
from hardware import HardwareSpecError, Level, System, UnusedHelperLevel
from hardware._nccl import time_bindings
from symbolic.symbols import SPECS

from conftest import CASES, ROOT

CATALOG = ROOT / "hardware" / "catalog"
SYMBOLS_FILE = ROOT / "symbolic" / "symbols.py"


def _catalog_files() -> list[Path]:
    return sorted(CATALOG.glob("*.toml"))


# ---------------------------------------------------------------- the catalog


def test_names_are_the_catalog_file_stems():
    assert set(hardware.names()) == {p.stem for p in _catalog_files()}
    assert {"A2", "A3", "dgx_a100", "dgx_h100", "dgx_h200", "gb200_nvl72", "dgx_b200", "hgx_b300",
            "gb300_nvl72"} <= set(hardware.names())


@pytest.mark.parametrize("path", _catalog_files(), ids=lambda p: p.stem)
def test_every_catalog_file_loads(path):
    system = hardware.load(path.stem)
    assert system.name == path.stem
    assert hardware.load_file(path) == system
    assert system.levels[-1].unbounded
    assert all(not level.unbounded for level in system.levels[:-1])


_ASSIGNMENT = re.compile(r"^\s*(?P<key>[A-Za-z_]\w*)\s*=\s*(?P<value>.*?)(?P<comment>\s+#.*)?$")


@pytest.mark.parametrize("path", _catalog_files(), ids=lambda p: p.stem)
def test_every_number_in_the_catalog_has_a_comment_saying_where_it_comes_from(path):
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _ASSIGNMENT.match(line)
        # Numbers, not text: "A2" or "ConnectX-7" in a string names a thing, it states no figure.
        if match and not match["value"].startswith(('"', "'")) and re.search(r"\d", match["value"]):
            assert match["comment"], f"{path.name}:{lineno}: a number without a source comment: {line!r}"


# ------------------------------------------- A2 and A3 as the original models them


def test_a2_as_formulas_section_9_states():
    a2 = hardware.load("A2")
    assert a2.level_bounds() == (8, None)  # docs/model.md, "Level score": bounds [8, ∞]
    assert a2.level_bandwidths_gbps() == (50.0, 10.0)  # docs/model.md, "Level score": BW [50, 10] GB/s
    assert [lvl.bandwidth_bytes_per_s for lvl in a2.levels] == [50e9, 10e9]
    assert a2.devices_per_node == 8
    assert a2.bindings()["device_intra_node_num"] == 8  # docs/model.md, "Config fields": A2: 8


def test_a3_as_formulas_section_9_states():
    a3 = hardware.load("A3")
    assert a3.level_bounds() == (16, 24, None)  # docs/model.md, "Level score": bounds [16, 24, ∞]
    assert a3.level_bandwidths_gbps() == (200.0, 25.0, 10.0)  # docs/model.md, "Level score": BW [200, 25, 10]
    assert a3.devices_per_node == 16
    assert a3.bindings()["device_intra_node_num"] == 16  # docs/model.md, "Config fields": A3: 16


@pytest.mark.parametrize("name", ["A2", "A3"])
def test_unused_helper_figures_of_the_original_are_kept(name):
    helpers = {h.name: h for h in hardware.load(name).unused_helper_levels}
    # docs/model.md, "Level score": NODE 300 GB/s × 0.7 and CLUSTER 25 × 0.9; latencies from the
    # published comm_time.py level_latency (NODE 0.00001 s, CLUSTER 0.00002 s).
    assert helpers["NODE"] == UnusedHelperLevel("NODE", 300e9, 0.7, 1e-5)
    assert helpers["CLUSTER"] == UnusedHelperLevel("CLUSTER", 25e9, 0.9, 2e-5)


def test_device_intra_node_num_of_the_reference_cases():
    seen = set()
    for case in CASES:
        inputs = case.inputs
        if "device" in inputs and "device_intra_node_num" in inputs:
            got = hardware.load(inputs["device"]).bindings()["device_intra_node_num"]
            assert got == inputs["device_intra_node_num"], case.id
            seen.add(inputs["device"])
    assert seen == {"A2", "A3"}


def test_level_bounds_agree_with_the_reference_level_assignments():
    """The original's recorded placements never put more devices in one level than
    its bound, and fill level 0 (and A3's level 1) up to it."""
    most: dict[tuple[str, int], float] = {}
    for case in CASES:
        inputs = case.inputs
        if "assignment" not in inputs:
            continue
        bounds = hardware.load(inputs["device"]).level_bounds()
        per_dim = inputs["assignment"]
        assert all(len(counts) == len(bounds) for counts in per_dim.values()), case.id
        for lvl, bound in enumerate(bounds):
            placed = math.prod(counts[lvl] for counts in per_dim.values())
            if bound is not None:
                assert placed <= bound, case.id
                most[inputs["device"], lvl] = max(most.get((inputs["device"], lvl), 0), placed)
    assert most == {("A2", 0): 8, ("A3", 0): 16, ("A3", 1): 24}


# ------------------------------------------------ GPU systems as their datasheets state


@pytest.mark.parametrize(
    ("name", "gpus", "nvlink_bidirectional_gb_s", "scale_out_gbit_s"),
    [
        ("dgx_a100", 8, 600, 200),  # NVLink 3, ConnectX-6 HDR
        ("dgx_h100", 8, 900, 400),  # NVLink 4, ConnectX-7 NDR
        ("dgx_h200", 8, 900, 400),  # NVLink 4, ConnectX-7 NDR
        ("gb200_nvl72", 72, 1800, 400),  # NVLink 5 (1.8 TB/s), ConnectX-7 NDR
        ("dgx_b200", 8, 1800, 400),  # NVLink 5, ConnectX-7 NDR
        ("hgx_b300", 8, 1800, 800),  # NVLink 5, ConnectX-8 SuperNIC
        ("gb300_nvl72", 72, 1800, 800),  # NVLink 5, ConnectX-8 SuperNIC
    ],
)
def test_gpu_systems_store_per_direction_peaks(name, gpus, nvlink_bidirectional_gb_s, scale_out_gbit_s):
    system = hardware.load(name)
    assert system.level_bounds() == (gpus, None)
    assert system.levels[0].bandwidth_bytes_per_s == nvlink_bidirectional_gb_s * 1e9 / 2
    assert system.levels[1].bandwidth_bytes_per_s == scale_out_gbit_s * 1e9 / 8
    assert system.bindings()["bw_intra"] > system.bindings()["bw_inter"]


@pytest.mark.parametrize("name", ["dgx_a100", "dgx_h100", "dgx_h200", "gb200_nvl72", "dgx_b200", "hgx_b300",
                                  "gb300_nvl72"])
def test_gpu_systems_keep_the_marketed_figure_its_direction_aliases_and_capacities(name):
    system = hardware.load(name)
    nvlink = system.levels[0]
    assert nvlink.marketed_direction == "bidirectional"
    assert nvlink.marketed_bandwidth_bytes_per_s == 2 * nvlink.bandwidth_bytes_per_s
    assert system.levels[1].marketed_direction == "per_direction"
    assert system.aliases and hardware.load(system.aliases[0]) == system
    gpu = system.gpu
    # HBM is binary: 80 GB cards hold 80 GiB; a capacity stored as GB (1e9) would not be a whole GiB count.
    assert gpu.hbm_bytes % 2**30 == 0 and 80 <= gpu.hbm_bytes / 2**30 <= 288
    assert 1e14 < gpu.peak_flops_bf16_per_s < 1e16
    assert system.nics_per_node == system.devices_per_node  # one NIC per GPU on every one of them
    assert nvlink.nvls == (gpu.generation != "ampere")


def test_every_csv_system_name_is_an_alias():
    for alias in ("a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"):
        assert alias in hardware.load(alias).aliases


@pytest.mark.parametrize("spelled, name", [
    ("DGX-H100", "dgx_h100"), ("DGX-B200", "dgx_b200"), ("DGX B200", "dgx_b200"),  # NVIDIA's performance tables
    ("dgx_b300", "hgx_b300"), ("DGX-B300", "hgx_b300"),                            # DGX B300: the HGX B300 board
    ("dgx_gb200", "gb200_nvl72"), ("DGX-GB200", "gb200_nvl72"), ("DGX-GB300", "gb300_nvl72"),
    ("a2", "A2"), ("GB200_NVL72", "gb200_nvl72"),
])
def test_a_system_answers_to_nvidias_spelling_of_its_name(spelled, name):
    assert hardware.load(spelled).name == name


@pytest.mark.parametrize("name", ["dgx-h1000", "DGX_H100X", "dgx h", ""])
def test_a_name_no_spelling_reaches_stays_unknown(name):
    with pytest.raises(hardware.HardwareSpecError, match="unknown hardware system"):
        hardware.load(name)


def test_a3_stage_cost_scale_is_data():
    assert hardware.load("A3").original_stage_cost_scale == 0.5
    assert {hardware.load(n).original_stage_cost_scale for n in hardware.names() if n != "A3"} == {1.0}


@pytest.mark.parametrize(("marketed", "direction", "what"), [
    ("900e9", "per_direction", "a bidirectional NVLink figure read as one direction"),
    ("450e9", "bidirectional", "a per-direction figure doubled"),
    ("483183820800", "bidirectional", "450 GiB/s: GiB read as GB"),
])
def test_a_unit_or_direction_mix_up_is_caught(tmp_path, marketed, direction, what):
    text = _VALID.replace("bandwidth_bytes_per_s = 50e9  # toy",
                          f"bandwidth_bytes_per_s = 450e9  # toy\nmarketed_bandwidth_bytes_per_s = {marketed}  # toy\n"
                          f'marketed_direction = "{direction}"')
    with pytest.raises(HardwareSpecError, match="not the per-direction share of the marketed"):
        hardware.load_file(_write(tmp_path, text))
    good = text.replace(f"marketed_bandwidth_bytes_per_s = {marketed}", "marketed_bandwidth_bytes_per_s = 900e9")
    good = good.replace(f'marketed_direction = "{direction}"', 'marketed_direction = "bidirectional"')
    assert hardware.load_file(_write(tmp_path, good, stem="good")).levels[0].bandwidth_bytes_per_s == 450e9, what


@pytest.mark.parametrize(("addition", "expected"), [
    ('[gpu]\nmodel = "x"\n', r"gpu\.generation: missing required key"),
    ('[gpu]\nmodel = "x"\ngeneration = "volta"\ncompute_capability = 70\nnvlink_links = 6\nhbm_bytes = 1\n'
     'peak_flops_bf16_per_s = 1\n', r"gpu\.generation: one of ampere, hopper, blackwell"),
    ('[gpu]\nmodel = "x"\ngeneration = "hopper"\ncompute_capability = 90\nnvlink_links = 18\nhbm_bytes = 0\n'
     'peak_flops_bf16_per_s = 1\n', r"gpu\.hbm_bytes: must be a finite number > 0"),
    ('[gpu]\ncolour = 1\n', r"gpu\.colour: unknown key"),
    ("original_stage_cost_scale = -0.5\n", r"original_stage_cost_scale: must be a finite number > 0"),
    ('aliases = "h100"\n', r"aliases: must be an array of strings"),
])
def test_new_keys_are_checked(tmp_path, addition, expected):
    text = addition + _VALID if not addition.startswith("[gpu]") else _VALID + addition
    with pytest.raises(HardwareSpecError, match=expected):
        hardware.load_file(_write(tmp_path, text))


# ------------------------------------------------------------------ bindings


def _declared_hardware_symbols() -> set[str]:
    """Symbols declared under a ``# Hardware…`` comment of ``symbolic/symbols.py``."""
    group, names = "", set()
    for line in SYMBOLS_FILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            group = stripped
        match = re.match(r'\(\s*"(\w+)"', stripped)
        if match and group.startswith("# Hardware"):
            names.add(match[1])
    return names


_LEVEL_SYMBOL = re.compile(r"level_(bw|bound)_(\d+)")


def test_the_declared_hardware_symbols_are_found():
    assert {"device_per_node", "bw_intra", "bw_inter", "device_intra_node_num"} <= _declared_hardware_symbols()


@pytest.mark.parametrize("name", hardware.names())
def test_bindings_are_declared_symbols_and_cover_the_hardware_ones(name):
    system = hardware.load(name)
    bindings = system.bindings()
    assert set(bindings) <= set(SPECS), set(bindings) - set(SPECS)
    assert _declared_hardware_symbols() <= set(bindings)
    depth = len(system.levels)
    for symbol_name in SPECS:
        match = _LEVEL_SYMBOL.fullmatch(symbol_name)
        if match:
            kind, lvl = match[1], int(match[2])
            covered = lvl < depth if kind == "bw" else lvl < depth - 1
            assert (symbol_name in bindings) == covered, symbol_name


@pytest.mark.parametrize("name", hardware.names())
def test_binding_values_come_from_the_levels(name):
    system = hardware.load(name)
    bindings = system.bindings()
    assert bindings["device_per_node"] == bindings["device_intra_node_num"] == system.levels[0].devices
    assert bindings["bw_intra"] == system.levels[0].bandwidth_bytes_per_s / 1e9
    assert bindings["bw_inter"] == system.levels[1].bandwidth_bytes_per_s / 1e9
    for lvl, level in enumerate(system.levels):
        assert bindings[f"level_bw_{lvl}"] == level.bandwidth_bytes_per_s / 1e9
        assert bindings.get(f"level_bound_{lvl}") == level.devices
    for key, value in bindings.items():
        if SPECS[key].integer:
            assert isinstance(value, int), key


# ---------------------------------------------------- types and the rules they keep


def _two_levels(**top: object) -> tuple[Level, Level]:
    return Level("node", 8, 50e9), Level("cluster", None, 10e9, **top)


def test_system_is_frozen_and_built_in_python_obeys_the_same_rules():
    system = System("toy", "a toy", _two_levels())
    with pytest.raises(dataclasses.FrozenInstanceError):
        system.name = "other"  # type: ignore[misc]
    with pytest.raises(HardwareSpecError, match=r"levels\[0\].*only the top"):
        System("toy", "a toy", (Level("node", None, 50e9), Level("cluster", None, 10e9)))
    with pytest.raises(HardwareSpecError, match=r"levels\[1\].*must be unbounded"):
        System("toy", "a toy", (Level("node", 8, 50e9), Level("cluster", 4, 10e9)))
    with pytest.raises(HardwareSpecError, match="at least two levels"):
        System("toy", "a toy", ())
    with pytest.raises(HardwareSpecError, match="bandwidth_bytes_per_s.*-1"):
        Level("node", 8, -1.0)
    with pytest.raises(HardwareSpecError, match="efficiency.*1.5"):
        Level("node", 8, 1.0, efficiency=1.5)
    with pytest.raises(HardwareSpecError, match="devices.*True"):
        Level("node", True, 1.0)  # type: ignore[arg-type]


def test_load_of_an_unknown_name_lists_the_known_ones():
    with pytest.raises(HardwareSpecError) as info:
        hardware.load("a9")  # ("a2" is A2 in another case: a spelling of a known name)
    assert "'a9'" in str(info.value)
    for name in hardware.names():
        assert name in str(info.value)


def test_importing_hardware_reads_no_file():
    probe = (
        "import builtins, pathlib, io\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError(f'file access at import: {args!r}')\n"
        "builtins.open = io.open = refuse\n"
        "for attr in ('read_bytes', 'read_text', 'open', 'glob', 'iterdir'):\n"
        "    setattr(pathlib.Path, attr, refuse)\n"
        "import hardware\n"
        "print(sorted(hardware.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "load_file" in done.stdout


# ------------------------------------------------------------- malformed files

_VALID = """\
description = "a toy system"  # no number
[[levels]]
name = "node"
devices = 8  # toy
bandwidth_bytes_per_s = 50e9  # toy
[[levels]]
name = "cluster"
unbounded = true
bandwidth_bytes_per_s = 10e9  # toy
"""


def _write(tmp_path: Path, text: str | bytes, stem: str = "toy") -> Path:
    path = tmp_path / f"{stem}.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_the_toy_file_is_valid(tmp_path):
    system = hardware.load_file(_write(tmp_path, _VALID))
    assert system.level_bounds() == (8, None)
    assert system.name == "toy"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("devices = 8", "devices = 8\nbogus = 3", r"levels\[0\]\.bogus: unknown key \(value 3\)"),
        ('description = "a toy system"', 'colour = "red"', r"colour: unknown key"),
        ('description = "a toy system"  # no number', "", r"description: missing required key"),
        ("bandwidth_bytes_per_s = 50e9", "", r"levels\[0\]\.bandwidth_bytes_per_s: missing"),
        ("devices = 8", "", r"levels\[0\]: needs either 'devices'.*neither"),
        ("devices = 8", "devices = 8\nunbounded = true", r"levels\[0\]: needs either.*both"),
        ("unbounded = true", "unbounded = false", r"levels\[1\]\.unbounded: the only allowed value is true.*False"),
        ("unbounded = true", "devices = 4", r"levels\[1\] \('cluster'\): the top \(last\) level must be unbounded"),
        ("devices = 8", "unbounded = true", r"levels\[0\] \('node'\): only the top \(last\) level may be unbounded"),
        ("devices = 8", "devices = 8.0", r"levels\[0\]\.devices: must be an integer, got 8\.0"),
        ("devices = 8", "devices = -8", r"levels\[0\]\.devices: must be an integer > 0, got -8"),
        ("50e9", "nan", r"levels\[0\]\.bandwidth_bytes_per_s: must be a finite number > 0, got nan"),
        ("50e9", "-inf", r"levels\[0\]\.bandwidth_bytes_per_s: must be a finite number > 0, got -inf"),
        ("50e9", "0", r"levels\[0\]\.bandwidth_bytes_per_s: must be a finite number > 0, got 0"),
        ("50e9", '"50e9"', r"levels\[0\]\.bandwidth_bytes_per_s: must be a number, got '50e9'"),
        ("50e9", "true", r"levels\[0\]\.bandwidth_bytes_per_s: must be a number, got True"),
        ("devices = 8", "devices = 8\nefficiency = 1.5", r"levels\[0\]\.efficiency: .*\(0, 1\]; got 1\.5"),
        ("devices = 8", "devices = 8\nlatency_s = 0.0", r"levels\[0\]\.latency_s: must be a finite number > 0"),
        ('name = "cluster"', 'name = "node"', r"levels\[1\]\.name: duplicate level name 'node'"),
        ('name = "node"', 'name = ""', r"levels\[0\]\.name: must not be empty"),
        ('name = "node"', "name = 3", r"levels\[0\]\.name: must be a string, got 3"),
        ("[[levels]]", "[levels]", r"not valid TOML"),
        ("devices = 8", "devices = ", r"not valid TOML"),
    ],
)
def test_malformed_file_names_file_key_and_value(tmp_path, old, new, expected):
    assert old in _VALID
    path = _write(tmp_path, _VALID.replace(old, new, 1))
    with pytest.raises(HardwareSpecError, match=expected) as info:
        hardware.load_file(path)
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('description = "x"\nlevels = []\n', r"needs at least two levels.*got 0"),
        ('description = "x"\n', r"levels: missing required key"),
        ('description = "x"\nlevels = [1, 2]\n', r"levels\[0\]: must be a table, got 1"),
        ('description = "x"\nlevels = "node"\n', r"levels: must be an array of tables"),
        ("", r"description: missing required key"),
        (b'description = "\xff"\n', r"not UTF-8 text"),
        (_VALID + "[[unused_helper_levels]]\nname = 'NODE'\n", r"unused_helper_levels\[0\]\.bandwidth_bytes_per_s: missing"),
        (_VALID.split("[[levels]]\nname = \"cluster\"")[0], r"needs at least two levels.*got 1"),
    ],
    ids=["no_levels", "levels_missing", "levels_not_tables", "levels_a_string", "empty_file", "not_utf8",
         "helper_incomplete", "one_level"],
)
def test_malformed_structure(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(HardwareSpecError, match=expected) as info:
        hardware.load_file(path)
    assert str(info.value).startswith(f"{path}: ")


def test_missing_file_and_bad_stem(tmp_path):
    with pytest.raises(HardwareSpecError, match="cannot read"):
        hardware.load_file(tmp_path / "absent.toml")
    path = _write(tmp_path, _VALID, stem="_hidden")
    with pytest.raises(HardwareSpecError, match="not a system name"):
        hardware.load_file(path)


# Keys each table must have, per table kind (a dropped optional key leaves a valid file).
_REQUIRED = {
    "": {"description"},
    "levels": {"name", "bandwidth_bytes_per_s", "devices", "unbounded"},
    "unused_helper_levels": {"name", "bandwidth_bytes_per_s", "efficiency", "latency_s"},
}
_NUMBER_KEYS = {"devices", "bandwidth_bytes_per_s", "latency_s", "efficiency"}
_BAD_NUMBERS = ["0", "0.0", "-1", "nan", "+nan", "inf", "-inf", '"12"', "true", "[1, 2]", "{ a = 1 }", "1979-05-27"]
_BAD_FLAGS = ["false", "1", '"true"', "0", "[true]"]
_BAD_TEXTS = ["5", "true", "[]", "1.5", "{ }"]
_KINDS = ("drop", "unknown_key", "bad_number", "bad_flag", "bad_text", "duplicate", "syntax", "truncate", "not_utf8")


def _lines_with_tables(text: str) -> list[tuple[int, str, re.Match | None]]:
    """Each line with the table it is in ("", "levels", "unused_helper_levels") and its assignment match."""
    table, out = "", []
    for i, line in enumerate(text.splitlines()):
        header = re.fullmatch(r"\[\[(\w+)\]\]", line.strip())
        if header:
            table = header[1]
        out.append((i, table, _ASSIGNMENT.match(line)))
    return out


def _mutate(text: str, kind: str, rng: random.Random) -> tuple[str | bytes, str]:
    lines = text.splitlines()
    parsed = _lines_with_tables(text)
    assigns = [(i, table, m) for i, table, m in parsed if m]

    def replace_value(i: int, m: re.Match, value: str) -> str:
        lines[i] = f"{m['key']} = {value}{m['comment'] or ''}"
        return "\n".join(lines) + "\n"

    if kind == "drop":
        i, table, m = rng.choice([a for a in assigns if a[2]["key"] in _REQUIRED[a[1]]])
        del lines[i]
        return "\n".join(lines) + "\n", f"drop line {i + 1} ({m['key']})"
    if kind == "unknown_key":
        headers = [i for i, _, _ in parsed if lines[i].strip().startswith("[[")]
        at = rng.choice([0, *[h + 1 for h in headers]])
        value = rng.choice(["1", "2.5", "true", '"x"'])
        lines.insert(at, f"bogus_{rng.randrange(1000)} = {value}")
        return "\n".join(lines) + "\n", f"unknown key at line {at + 1}"
    if kind == "bad_number":
        i, _, m = rng.choice([a for a in assigns if a[2]["key"] in _NUMBER_KEYS])
        choices = [*_BAD_NUMBERS, f"-{m['value']}"]
        choices += {"devices": ["8.5", "16.0"], "efficiency": ["1.5", "2"]}.get(m["key"], [])
        value = rng.choice(choices)
        return replace_value(i, m, value), f"{m['key']} = {value} at line {i + 1}"
    if kind == "bad_flag":
        i, _, m = rng.choice([a for a in assigns if a[2]["key"] == "unbounded"])
        value = rng.choice(_BAD_FLAGS)
        return replace_value(i, m, value), f"unbounded = {value} at line {i + 1}"
    if kind == "bad_text":
        i, table, m = rng.choice([a for a in assigns if a[2]["key"] in {"name", "description", "fabric"}])
        choices = _BAD_TEXTS + (['""', '"  "'] if m["key"] != "fabric" else [])
        value = rng.choice(choices)
        return replace_value(i, m, value), f"{m['key']} = {value} at line {i + 1}"
    if kind == "duplicate":
        i, _, m = rng.choice(assigns)
        lines.insert(i + 1, lines[i])
        return "\n".join(lines) + "\n", f"duplicate key {m['key']} at line {i + 1}"
    if kind == "syntax":
        i, _, m = rng.choice(assigns)
        how = rng.choice(["no_equals", "open_string", "open_header", "header_as_table", "stray_bracket"])
        if how == "no_equals":
            lines[i] = lines[i].replace("=", " ", 1)
        elif how == "open_string":
            lines[i] = f'{m["key"]} = "unterminated'
        elif how == "open_header":
            lines.insert(i, "[[levels]")
        elif how == "header_as_table":
            first = lines.index("[[levels]]")
            lines[first] = "[levels]"
        else:
            lines[i] = f"{m['key']} = {m['value']} ]{m['comment'] or ''}"  # before the comment, where it counts
        return "\n".join(lines) + "\n", f"syntax ({how}) at line {i + 1}"
    if kind == "truncate":
        # Anything cut before the top level's "unbounded = true" is complete is invalid.
        limit = text.rindex("unbounded = true") + len("unbounded = tru")
        at = rng.randrange(0, limit + 1)
        return text[:at], f"truncated at byte {at}"
    if kind == "not_utf8":
        raw = text.encode("utf-8")
        at = rng.randrange(0, len(raw) + 1)
        return raw[:at] + b"\xff\xfe" + raw[at:], f"invalid UTF-8 at byte {at}"
    raise AssertionError(kind)


def test_fuzzed_catalog_files_always_fail_cleanly(tmp_path):
    """A few hundred seeded mutations of the catalog's own files: each must raise
    HardwareSpecError naming the file, never another exception."""
    rng = random.Random(20250609)
    # Files of levels (a cluster file, a base node and its [network] table, has its own in tests/test_multinode.py).
    sources = {p.stem: text for p in _catalog_files() if "[[levels]]" in (text := p.read_text(encoding="utf-8"))}
    control = tmp_path / "control"
    control.mkdir()
    for stem, text in sources.items():  # the unmutated files are valid, so each failure is the mutation's
        assert hardware.load_file(_write(control, text, stem)) == hardware.load(stem)
    counts = dict.fromkeys(_KINDS, 0)
    for n in range(360):
        stem = rng.choice(sorted(sources))
        kind = _KINDS[n % len(_KINDS)]
        mutated, what = _mutate(sources[stem], kind, rng)
        folder = tmp_path / f"m{n:03d}"
        folder.mkdir()
        path = _write(folder, mutated, stem)
        try:
            hardware.load_file(path)
        except HardwareSpecError as exc:
            assert type(exc) is HardwareSpecError
            assert str(exc).startswith(f"{path}: "), (what, str(exc))
            counts[kind] += 1
        else:
            pytest.fail(f"mutant {n} of {stem} ({what}) loaded without error")
    assert all(c == 360 // len(_KINDS) for c in counts.values()), counts


# ------------------------------------------------------------------------- CLI


def test_cli_list(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    for name in hardware.names():
        assert re.search(rf"^{re.escape(name)}\s", out, re.M), name
    assert "node x8 @ 50 GB/s > cluster unbounded @ 10 GB/s" in out
    assert "node x16 @ 200 GB/s > supernode x24 @ 25 GB/s > cluster unbounded @ 10 GB/s" in out


@pytest.mark.parametrize("name", hardware.names())
def test_cli_show_text(capsys, name):
    assert main(["hardware", "show", name]) == 0
    out = capsys.readouterr().out
    system = hardware.load(name)
    assert out.startswith(f"{name}: {system.description}")
    for level in system.levels:
        assert f"({level.bandwidth_gbps:g} GB/s)" in out
    assert "bound: unbounded" in out
    for key in system.bindings():
        assert f"  {key} = " in out


def test_cli_show_reads_five_digit_figures_without_an_exponent(capsys):
    """GB300's dense FP4 peak (15 PFLOP/s a GPU: the 1,080 PFLOPS of NVIDIA's GB300 NVL72 specifications over 72,
    as the catalog states it) reads as 15,000 TFLOP/s, not 1.5e+04; a figure under 10,000 keeps its four
    significant digits."""
    assert main(["hardware", "show", "gb300_nvl72"]) == 0
    out = capsys.readouterr().out
    assert "peak dense FP4: 1.5e+16 FLOP/s (15,000 TFLOP/s)" in out
    assert "peak dense BF16: 2.5e+15 FLOP/s (2,500 TFLOP/s)" in out and "(288 GiB)" in out
    assert "e+04 " not in out


def test_cli_show_text_of_a_gpu_system_has_every_figure_the_time_and_memory_models_use(capsys):
    assert main(["hardware", "show", "dgx_h100"]) == 0
    out = capsys.readouterr().out
    assert "also answers to: h100_sxm" in out
    # the datasheet's marketed NVLink figure beside the per-direction peak, NVLS and the NICs
    assert "bandwidth: 4.5e+11 bytes/s (450 GB/s)\n      marketed: 900 GB/s, bidirectional" in out
    assert "NVLink SHARP (NVLS): yes" in out and "NICs: 8 per unit" in out
    assert "GPU: H100 SXM5 80GB (hopper, compute capability 9.0, 18 NVLink links)" in out
    assert "HBM: 8.58993e+10 bytes (80 GiB)" in out and "peak dense BF16: 9.89e+14 FLOP/s (989 TFLOP/s)" in out
    for key in time_bindings(hardware.load("dgx_h100")):
        assert f"\n  {key} = " in out, key
    assert "ring_channels = 12 channels" in out and "p2p_chunk_bytes = 524288 bytes (512 KiB)" in out
    assert main(["hardware", "show", "A2"]) == 0
    assert "GPU: none stated" in capsys.readouterr().out


def test_cli_show_json(capsys):
    assert main(["hardware", "show", "A3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["name"] == "A3"
    assert record["level_bounds"] == [16, 24, None]
    assert record["level_bandwidths_gbps"] == [200.0, 25.0, 10.0]
    assert [lvl["bandwidth_bytes_per_s"] for lvl in record["levels"]] == [200e9, 25e9, 10e9]
    assert record["bindings"]["device_intra_node_num"] == 16
    assert {h["name"] for h in record["unused_helper_levels"]} == {"NODE", "CLUSTER"}
    assert record["gpu"] is None and record["time_bindings"] is None
    assert main(["hardware", "show", "h100_sxm", "--json"]) == 0  # an alias names its system
    record = json.loads(capsys.readouterr().out)
    assert record["name"] == "dgx_h100" and record["gpu"]["hbm_bytes"] == 80 * 2**30
    assert record["time_bindings"] == time_bindings(hardware.load("dgx_h100"))


def test_cli_show_unknown_name_exits_2(capsys):
    assert main(["hardware", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "A2" in err


#: Datasheet peaks per GPU (dense; sparsity figures halved) and the generation's chosen efficiencies, as
#: docs/search.md states them: (BF16, FP8, FP4 FLOP/s, HBM bytes/s, GEMM efficiency, vector FLOP/s).
BLACKWELL_FACTS = {
    "dgx_b200": (2.25e15, 4.5e15, 9e15, 8e12, 0.776, 150e12),  # DGX B200 datasheet; FP32 75 TFLOPS x 2
    "gb200_nvl72": (2.5e15, 5e15, 10e15, 8e12, 0.776, 160e12),  # GB200 NVL72 datasheet; FP32 80 TFLOPS x 2
    "hgx_b300": (2.25e15, 4.5e15, 13.5e15, 8e12, 0.786, 150e12),  # HGX B300 specifications
    "gb300_nvl72": (2.5e15, 5e15, 15e15, 8e12, 0.786, 160e12),  # GB300 NVL72 specifications
}


#: Transformer Engine's GEMM profiling tutorial (NVIDIA/TransformerEngine@1609c89,
#: docs/examples/gemm_profiling/gemm_profiling.rst): a training layer's 12 GEMMs, ms per layer, in its autocast mode
#: (each GEMM's inputs quantized before it, as in training) on B300 (lines 64-92) and H200 (lines 243-254), and the
#: NVFP4 kernel alone on B300 (pre-quantized, line 148).
TE_LAYER_MS = {"b300": {"bf16": 12.758, "fp8": 7.802, "fp8_cs": 9.147, "mxfp8": 8.984, "nvfp4": 6.453},
               "h200": {"bf16": 32.014, "fp8": 18.978, "fp8_cs": 20.285}}
TE_B300_NVFP4_KERNEL_MS = 3.764


def test_low_precision_efficiencies_are_the_bf16_one_times_transformer_engines_speedups():
    """A low-precision GEMM's efficiency (of its own peak, its quantization included) is the generation's BF16
    efficiency times the speedup over BF16 Transformer Engine measures in training (autocast) times the BF16 / low
    peak: Hopper from the H200 run, Blackwell Ultra from the B300 run, Blackwell from it with the FP4 kernel at its
    own FP4 peak (the quantization the same: the same HBM bandwidth)."""
    def expected(bf16_efficiency, run, precision, peak_ratio):
        ms = TE_LAYER_MS[run]
        return round(bf16_efficiency * ms["bf16"] / ms[precision] * peak_ratio, 3)

    for name in ("dgx_h100", "dgx_h200", "aws_p5", "gcp_a3_mega"):
        gpu = hardware.load(name).gpu
        assert gpu.compute_efficiency_fp8 == expected(0.803, "h200", "fp8", 0.5)
        assert gpu.compute_efficiency_fp8_cs == expected(0.803, "h200", "fp8_cs", 0.5)
        assert gpu.compute_efficiency_mxfp8 is None and gpu.compute_efficiency_nvfp4 is None  # Blackwell formats
    for name in ("hgx_b300", "gb300_nvl72", "dgx_b200", "gb200_nvl72"):
        gpu = hardware.load(name).gpu
        ultra = gpu.compute_capability == 103
        bf16 = 0.786 if ultra else 0.776
        assert gpu.compute_efficiency == bf16
        for precision in ("fp8", "fp8_cs", "mxfp8"):
            assert getattr(gpu, f"compute_efficiency_{precision}") == expected(bf16, "b300", precision, 0.5)
        fp4_ratio = gpu.peak_flops_bf16_per_s / gpu.peak_flops_fp4_per_s
        if ultra:
            assert gpu.compute_efficiency_nvfp4 == expected(bf16, "b300", "nvfp4", fp4_ratio)
        else:  # the B300 kernel at this GPU's FP4 peak (2/3 of B300's), the quantization the same
            ms = TE_LAYER_MS["b300"]
            kernel = TE_B300_NVFP4_KERNEL_MS * 13.5 / 9
            speedup = ms["bf16"] / (kernel + ms["nvfp4"] - TE_B300_NVFP4_KERNEL_MS)
            assert gpu.compute_efficiency_nvfp4 == round(bf16 * speedup * fp4_ratio, 3)
    assert hardware.load("dgx_a100").gpu.compute_efficiency_fp8 is None  # no FP8 on Ampere


@pytest.mark.parametrize("name", sorted(BLACKWELL_FACTS))
def test_blackwell_systems_have_the_compute_facts_a_step_time_needs(name):
    """Every Blackwell system is priced (no NoComputeFactsError); its BF16 GEMM efficiency is the generation's
    published maximum achievable matmul efficiency (B200 77.6 %, B300 78.6 %), as Hopper's is H100's (80.3 %)."""
    from codegen.configs.models import load_model
    from codegen.pricing.step_time import StepTimePricer

    gpu = hardware.load(name).gpu
    bf16, fp8, fp4, hbm, gemm, vector = BLACKWELL_FACTS[name]
    assert (gpu.peak_flops_bf16_per_s, gpu.peak_flops_fp8_per_s, gpu.peak_flops_fp4_per_s, gpu.hbm_bytes_per_s,
            gpu.compute_efficiency, gpu.vector_flops_per_s) == (bf16, fp8, fp4, hbm, gemm, vector)
    h100 = hardware.load("dgx_h100").gpu
    assert h100.compute_efficiency == 0.803
    assert (gpu.hbm_efficiency, gpu.vector_efficiency) == (0.9, 0.1)  # (Calculon's, as on Hopper)
    values = {k: np.array([v]) for k, v in dict(d=8, t=4, p=2, cp=1, ep=1, etp=1, vp=1, b=1, m=16).items()}
    model = load_model("qwen3-72b")
    blackwell = StepTimePricer(model, system=name).price(values, "selective", zero=1)["compute_s"][0]
    h100 = StepTimePricer(model, system="dgx_h100").price(values, "selective", zero=1)["compute_s"][0]
    # Compute seconds are a sum of GEMM, HBM and vector terms, each the same quantity over Hopper's rate times the
    # ratio of the two GPUs' achieved rates: the total's ratio lies between the smallest and the largest of these.
    h = hardware.load("dgx_h100").gpu
    speedups = (bf16 * gemm / (h.peak_flops_bf16_per_s * h.compute_efficiency), hbm / h.hbm_bytes_per_s,
                vector / h.vector_flops_per_s)
    assert min(speedups) > 1 and h100 / max(speedups) <= blackwell <= h100 / min(speedups)


def _user_catalog(tmp_path, name="my_cluster", source="dgx_h100"):
    """A folder holding one user system file: a bundled one's text, its aliases dropped, under another name."""
    text = (hardware.CATALOG_DIR / f"{source}.toml").read_text(encoding="utf-8")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("aliases"))
    (tmp_path / f"{name}.toml").write_text(text + "\n", encoding="utf-8")
    return tmp_path


def test_a_users_catalog_folder_adds_its_systems_for_every_command(tmp_path, monkeypatch, capsys):
    from codegen.cli import main

    monkeypatch.setattr("hardware._load._ADDED", [])
    monkeypatch.delenv(hardware.CATALOG_ENV, raising=False)
    folder = _user_catalog(tmp_path)
    assert "my_cluster" not in hardware.names()
    assert main(["--catalog", str(folder), "hardware", "show", "my_cluster"]) == 0
    assert "my_cluster" in capsys.readouterr().out
    assert hardware.load("my_cluster").levels == hardware.load("dgx_h100").levels
    monkeypatch.setattr("hardware._load._ADDED", [])
    monkeypatch.setenv(hardware.CATALOG_ENV, str(folder))
    assert "my_cluster" in hardware.names() and hardware.catalog_dirs()[-1] == hardware.CATALOG_DIR
    args = ["search", "--model", "llama2-7b", "--devices", "16", "--global-batch", "32", "--top", "1", "--json",
            "--no-progress"]
    assert main([*args, "--system", "my_cluster"]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert main([*args, "--system", "dgx_h100"]) == 0
    bundled = json.loads(capsys.readouterr().out)
    assert mine["top"] == bundled["top"]  # (the same facts under another name)


def test_catalog_is_also_an_option_of_each_command(tmp_path, monkeypatch, capsys):
    # Written after the command (or its action), beside --system, --catalog reads the same folder as before it; a
    # folder that is not one, or no folder, is one line naming the option.
    from codegen.cli import main

    monkeypatch.setattr("hardware._load._ADDED", [])
    monkeypatch.delenv(hardware.CATALOG_ENV, raising=False)
    folder = _user_catalog(tmp_path)
    assert main(["hardware", "show", "my_cluster", "--catalog", str(folder)]) == 0
    after = capsys.readouterr().out
    monkeypatch.setattr("hardware._load._ADDED", [])
    assert main(["--catalog", str(folder), "hardware", "show", "my_cluster"]) == 0
    assert capsys.readouterr().out == after
    monkeypatch.setattr("hardware._load._ADDED", [])
    args = ["collective", "all_reduce", "--ranks", "16", "--ranks-per-node", "8", "--bytes", "1G", "--json"]
    assert main([*args, "--system", "my_cluster", "--catalog", str(folder)]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert main([*args, "--system", "dgx_h100"]) == 0
    assert mine["time_s"] == json.loads(capsys.readouterr().out)["time_s"]  # (the same facts under another name)
    monkeypatch.setattr("hardware._load._ADDED", [])
    assert main(["hardware", "--catalog", str(folder), "show", "my_cluster"]) == 0  # (between command and action)
    assert capsys.readouterr().out == after
    monkeypatch.setattr("hardware._load._ADDED", [])
    assert main(["hardware", "list", "--catalog", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().endswith("nowhere: not a folder of system files (<name>.toml)")
    assert main(["hardware", "show", "my_cluster", "--catalog"]) == 2  # the option named, not the command lost
    assert capsys.readouterr().err.strip() == ("symcost hardware show: error: argument --catalog: expected one "
                                               "argument (see symcost hardware show --help)")


def test_a_users_catalog_that_clashes_or_is_missing_is_one_clear_error(tmp_path, monkeypatch, capsys):
    from codegen.cli import main

    monkeypatch.setattr("hardware._load._ADDED", [])
    monkeypatch.delenv(hardware.CATALOG_ENV, raising=False)
    assert main(["--catalog", str(tmp_path / "nowhere"), "hardware", "list"]) == 2
    assert capsys.readouterr().err.strip().endswith("nowhere: not a folder of system files (<name>.toml)")
    folder = _user_catalog(tmp_path, name="dgx_h100")
    assert main(["--catalog", str(folder), "hardware", "list"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the system 'dgx_h100' is also" in err and len(err.splitlines()) == 1
    monkeypatch.setattr("hardware._load._ADDED", [])
    monkeypatch.setenv(hardware.CATALOG_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(hardware.HardwareSpecError, match=r"\$SYMCOST_CATALOG .*nowhere: not a folder"):
        hardware.names()


def test_a_host_cpu_is_one_nccl_tells_apart_and_a_cluster_file_may_state_its_own(tmp_path):
    # A cluster file's host_cpu replaces its base's (AWS P5: DGX H100-like nodes with AMD EPYC hosts); a value NCCL's
    # tuner does not tell apart is one error naming the file, the key and the value.
    assert (hardware.load("aws_p5").host_cpu, hardware.load("dgx_h100").host_cpu) == ("amd", "intel")
    mine = tmp_path / "my_nodes.toml"
    mine.write_text('description = "H100 nodes on Arm hosts"\nbase = "dgx_h100"\nhost_cpu = "arm"\n[network]\n'
                    'transport = "ib"\n', encoding="utf-8")
    assert hardware.load_file(mine).host_cpu == "arm"
    assert hardware.time_bindings(hardware.load_file(mine))["net_overhead_s"] == pytest.approx(
        hardware.time_bindings(hardware.load("dgx_h100"))["net_overhead_s"])  # 1 us on Intel and on Arm alike
    mine.write_text(mine.read_text(encoding="utf-8").replace('"arm"', '"power"'), encoding="utf-8")
    with pytest.raises(hardware.HardwareSpecError) as err:
        hardware.load_file(mine)
    assert str(err.value) == f"{mine}: host_cpu: one of intel, amd, arm, got 'power'"

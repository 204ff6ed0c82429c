"""Reading hardware descriptions: one TOML file per system, the file stem is its name.

File layout (every key below is checked; any other key is an error)::

    description = "…"                       # required, text
    [[levels]]                              # required, at least two, innermost first
    name = "node"                           # required, text, unique
    devices = 8                             # bounded levels: a positive integer …
    unbounded = true                        # … or, for the top level only, this instead
    bandwidth_bytes_per_s = 50e9            # required, peak per device per direction
    latency_s = 1e-5                        # optional
    efficiency = 0.9                        # optional, measured fraction of the peak
    fabric = "NVLink 4 through NVSwitch"    # optional, text
    marketed_bandwidth_bytes_per_s = 900e9  # optional, the datasheet's figure as printed …
    marketed_direction = "bidirectional"    # … and how it counts directions (checked against the peak)
    nics_per_unit = 8                       # optional, scale-out NICs per unit of the level below
    nvls = true                             # optional, the level's switches do NVLink SHARP
    devices_per_host = 4                    # optional, innermost level: a unit spanning hosts (NVL72 trays)
    transport = "ib"                        # optional, network level: ib, roce, efa, tcp (default ib)
    nic_bandwidth_bytes_per_s = 50e9        # optional, one NIC's peak (default: per device x devices / NICs)
    nccl_net_latency_s = 75e-6              # optional, what NCCL's network plugin reports, what its tuner prices
                                            # a network hop with (default: the transport's)
    net_latency_ll128_s = 2e-5              # optional, per protocol (ll, ll128, simple): what one hop takes, measured
                                            # (default: the plugin's, twice with simple; symcost calibrate writes them)
    rail_optimized = true                   # optional (default true); shown, not yet priced
    sharp = false                           # optional (default false); shown, not yet priced
    aliases = ["h100_sxm"]                  # optional, other names the system answers to
    original_stage_cost_scale = 0.5         # optional (default 1), the original's A3 halving
    host_cpu = "intel"                      # optional (default intel): intel, amd or arm, the host CPU NCCL's tuner
                                            # sees (its network overhead, LL bandwidth across nodes)
    [gpu]                                   # optional: model, generation, compute_capability,
                                            # nvlink_links, hbm_bytes, peak_flops_bf16_per_s,
                                            # peak_flops_fp8_per_s, peak_flops_fp4_per_s,
                                            # compute_efficiency, compute_efficiency_fp8,
                                            # compute_efficiency_fp8_cs, compute_efficiency_mxfp8,
                                            # compute_efficiency_nvfp4,
                                            # hbm_bytes_per_s, hbm_efficiency,
                                            # vector_flops_per_s, vector_efficiency,
                                            # attention_efficiency (optional)
    [[unused_helper_levels]]                # optional: figures the original never uses
    name = "NODE"
    bandwidth_bytes_per_s = 300e9
    efficiency = 0.7
    latency_s = 1e-5

A cluster is a node times a network: a file with ``base`` (another catalog system of two levels) and a
``[network]`` table instead of ``levels`` and ``gpu``::

    description = "…"
    base = "dgx_h100"                       # the node: GPU, NVLink domain
    [network]                               # its scale-out network (keys of ``with_network``)
    transport = "efa"
    nics_per_node = 32
    nic_gbps = 100                          # or nic_bandwidth_bytes_per_s = 12.5e9
    nccl_net_latency_s = 75e-6              # optional, as above; also name, fabric, efficiency,
                                            # rail_optimized, sharp
    host_cpu = "amd"                        # optional, top level: the cluster's host CPU (default: the base's)

Nothing is read at import time; ``names()`` and ``load()`` look at the catalog
folders when they are called: the bundled one and a user's (``add_catalog``, ``symcost --catalog DIR``, the
environment variable ``SYMCOST_CATALOG``).
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

from ._system import NETWORK_KEYS, Gpu, HardwareSpecError, Level, System, UnusedHelperLevel, with_network

__all__ = ["CATALOG_DIR", "CATALOG_ENV", "add_catalog", "catalog_dirs", "load", "load_file", "names"]

#: The folder of the built-in catalog: ``<name>.toml`` per system.
CATALOG_DIR = Path(__file__).resolve().parent / "catalog"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

_SYSTEM_REQUIRED = ("description", "levels")
_SYSTEM_OPTIONAL = ("unused_helper_levels", "aliases", "original_stage_cost_scale", "gpu", "host_cpu")
_LEVEL_REQUIRED = ("name", "bandwidth_bytes_per_s")
# A level has exactly one of "devices" and "unbounded"; both are listed as optional
# here and the rule is checked on its own so that the message can say so.
_LEVEL_OPTIONAL = ("devices", "unbounded", "latency_s", "efficiency", "fabric", "marketed_bandwidth_bytes_per_s",
                   "marketed_direction", "nics_per_unit", "nvls", "transport", "nic_bandwidth_bytes_per_s",
                   "nccl_net_latency_s", "net_latency_ll_s", "net_latency_ll128_s", "net_latency_simple_s",
                   "rail_optimized", "sharp", "devices_per_host")
_GPU_REQUIRED = ("model", "generation", "compute_capability", "nvlink_links", "hbm_bytes", "peak_flops_bf16_per_s")
_GPU_OPTIONAL = ("peak_flops_fp8_per_s", "peak_flops_fp4_per_s", "compute_efficiency",
                 "compute_efficiency_fp8", "compute_efficiency_fp8_cs", "compute_efficiency_mxfp8",
                 "compute_efficiency_nvfp4", "hbm_bytes_per_s", "hbm_efficiency", "vector_flops_per_s",
                 "vector_efficiency", "attention_efficiency")
_HELPER_REQUIRED = ("name", "bandwidth_bytes_per_s", "efficiency", "latency_s")


def _check_keys(table: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    label = where or "the file"
    if not isinstance(table, dict):
        raise HardwareSpecError(f"{label}: must be a table, got {table!r} ({type(table).__name__})")
    prefix = f"{where}." if where else ""
    allowed = required + optional
    for key in table:
        if key not in allowed:
            raise HardwareSpecError(
                f"{prefix}{key}: unknown key (value {table[key]!r}); allowed keys: {', '.join(allowed)}")
    for key in required:
        if key not in table:
            raise HardwareSpecError(f"{prefix}{key}: missing required key")
    return table


def _array_of_tables(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise HardwareSpecError(f"{key}: must be an array of tables ([[{key}]]), got {value!r}")
    return value


def _relabel(where: str, build: Any, **fields: Any) -> Any:
    """Build a dataclass, prefixing the key path of any error with *where*."""
    try:
        return build(**fields)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"{where}.{exc}") from None


def _level(table: object, where: str) -> Level:
    table = _check_keys(table, where, _LEVEL_REQUIRED, _LEVEL_OPTIONAL)
    has_devices, has_unbounded = "devices" in table, "unbounded" in table
    if has_devices == has_unbounded:
        got = ("both 'devices' and 'unbounded'" if has_devices else "neither")
        raise HardwareSpecError(
            f"{where}: needs either 'devices' (a positive integer) or 'unbounded = true' (top level only), got {got}")
    if has_unbounded and table["unbounded"] is not True:
        raise HardwareSpecError(
            f"{where}.unbounded: the only allowed value is true (give 'devices' for a bounded level), "
            f"got {table['unbounded']!r}")
    return _relabel(
        where, Level,
        name=table["name"],
        devices=table.get("devices"),
        bandwidth_bytes_per_s=table["bandwidth_bytes_per_s"],
        latency_s=table.get("latency_s"),
        efficiency=table.get("efficiency"),
        fabric=table.get("fabric", ""),
        marketed_bandwidth_bytes_per_s=table.get("marketed_bandwidth_bytes_per_s"),
        marketed_direction=table.get("marketed_direction"),
        nics_per_unit=table.get("nics_per_unit"),
        nvls=table.get("nvls", False),
        transport=table.get("transport"),
        nic_bandwidth_bytes_per_s=table.get("nic_bandwidth_bytes_per_s"),
        nccl_net_latency_s=table.get("nccl_net_latency_s"),
        net_latency_ll_s=table.get("net_latency_ll_s"),
        net_latency_ll128_s=table.get("net_latency_ll128_s"),
        net_latency_simple_s=table.get("net_latency_simple_s"),
        rail_optimized=table.get("rail_optimized", True),
        sharp=table.get("sharp", False),
        devices_per_host=table.get("devices_per_host"),
    )


def _helper(table: object, where: str) -> UnusedHelperLevel:
    table = _check_keys(table, where, _HELPER_REQUIRED, ())
    return _relabel(where, UnusedHelperLevel, **table)


#: A cluster file: a catalog node (``base``) on the network its ``[network]`` table describes.
_CLUSTER_REQUIRED = ("description", "base", "network")
_CLUSTER_OPTIONAL = ("aliases", "host_cpu")
_NETWORK_GBPS = "nic_gbps"
#: The cluster files being read, whose base is being read now: a base among them is a loop.
_BASES_LOADING: set[str] = set()


def _cluster(name: str, data: dict[str, Any]) -> System:
    """A system file that names a base node and describes its scale-out network (``with_network``)."""
    data = _check_keys(data, "", _CLUSTER_REQUIRED, _CLUSTER_OPTIONAL)
    base = data["base"]
    if not isinstance(base, str) or base == name:
        raise HardwareSpecError(f"base: the name of another catalog system, got {base!r}")
    network = dict(_check_keys(data["network"], "network", (), (*NETWORK_KEYS, _NETWORK_GBPS)))
    if _NETWORK_GBPS in network:
        if "nic_bandwidth_bytes_per_s" in network:
            raise HardwareSpecError(f"network.{_NETWORK_GBPS}: give it or nic_bandwidth_bytes_per_s, not both")
        gbps = network.pop(_NETWORK_GBPS)
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not gbps > 0 or gbps == float("inf"):
            raise HardwareSpecError(f"network.{_NETWORK_GBPS}: must be a finite number > 0, got {gbps!r}")
        network["nic_bandwidth_bytes_per_s"] = gbps * 1e9 / 8
    if base in _BASES_LOADING:
        raise HardwareSpecError(f"base: {base!r} leads back to itself through other files' base")
    _BASES_LOADING.add(name)
    try:
        node = load(base)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"base: {exc}") from None
    finally:
        _BASES_LOADING.discard(name)
    if len(node.levels) != 2:
        raise HardwareSpecError(f"base: {base!r} has {len(node.levels)} levels; a cluster file needs a node of two "
                                "(the node and its network)")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list):
        raise HardwareSpecError(f"aliases: must be an array of strings, got {aliases!r}")
    try:
        system = with_network(node, system_name=name, description=data["description"], **network)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"network.{exc}") from None
    return System(name=system.name, description=system.description, levels=system.levels, aliases=tuple(aliases),
                  gpu=system.gpu, host_cpu=data.get("host_cpu", system.host_cpu))


def _system(name: str, data: dict[str, Any]) -> System:
    if not _NAME.fullmatch(name):
        raise HardwareSpecError(f"file name: the stem {name!r} is not a system name (letters, digits, _ . -)")
    if isinstance(data, dict) and "base" in data:
        return _cluster(name, data)
    data = _check_keys(data, "", _SYSTEM_REQUIRED, _SYSTEM_OPTIONAL)
    levels = tuple(_level(t, f"levels[{i}]") for i, t in enumerate(_array_of_tables(data["levels"], "levels")))
    helpers = tuple(_helper(t, f"unused_helper_levels[{i}]")
                    for i, t in enumerate(_array_of_tables(data.get("unused_helper_levels", []),
                                                           "unused_helper_levels")))
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list):
        raise HardwareSpecError(f"aliases: must be an array of strings, got {aliases!r}")
    gpu = None
    if "gpu" in data:
        gpu = _relabel("gpu", Gpu, **_check_keys(data["gpu"], "gpu", _GPU_REQUIRED, _GPU_OPTIONAL))
    return System(name=name, description=data["description"], levels=levels, unused_helper_levels=helpers,
                  aliases=tuple(aliases), original_stage_cost_scale=data.get("original_stage_cost_scale", 1.0),
                  gpu=gpu, host_cpu=data.get("host_cpu", "intel"))


def load_file(path: str | os.PathLike[str]) -> System:
    """Read one hardware description; its name is the file's stem.

    Raises:
        HardwareSpecError: the file cannot be read, is not UTF-8 TOML, or breaks a
            rule of the layout (unknown or missing key, wrong type, a number that is
            not finite and > 0, an efficiency above 1, fewer than two levels, an
            unbounded level that is not the last). The message starts with the path
            and names the key path and the value.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HardwareSpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HardwareSpecError(f"{path}: not UTF-8 text: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise HardwareSpecError(f"{path}: not valid TOML: {exc}") from None
    try:
        return _system(path.stem, data)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"{path}: {exc}") from None


#: The environment variable naming folders of a user's system files (``os.pathsep``-separated), read with the
#: bundled catalog by every command (and by every worker of a distributed search that has it set).
CATALOG_ENV = "SYMCOST_CATALOG"

#: Folders added in this process (``add_catalog``: ``symcost --catalog DIR``), in the order given.
_ADDED: list[Path] = []


def _folder(path: str | os.PathLike[str], what: str) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise HardwareSpecError(f"{what} {path}: not a folder of system files (<name>.toml)")
    return folder.resolve()


def add_catalog(path: str | os.PathLike[str]) -> None:
    """Read the system files (``<name>.toml``, the bundled catalog's format) of the folder *path* with the bundled
    catalog, for the rest of the process.

    Raises:
        HardwareSpecError: *path* is not a folder.
    """
    folder = _folder(path, "--catalog")
    if folder not in _ADDED:
        _ADDED.append(folder)


def catalog_dirs() -> tuple[Path, ...]:
    """The folders systems are read from: those added (``add_catalog``), those of ``$SYMCOST_CATALOG``, then the
    bundled catalog.

    Raises:
        HardwareSpecError: a folder of ``$SYMCOST_CATALOG`` that is not one.
    """
    listed = [_folder(part, f"${CATALOG_ENV}") for part in os.environ.get(CATALOG_ENV, "").split(os.pathsep)
              if part.strip()]
    out: list[Path] = []
    for folder in (*_ADDED, *listed, CATALOG_DIR):
        if folder not in out:
            out.append(folder)
    return tuple(out)


def _files() -> dict[str, Path]:
    """Each system's file by name, over :func:`catalog_dirs`; one name in two folders is an error (which of the
    two a command used would depend on the order of its options)."""
    files: dict[str, Path] = {}
    for folder in catalog_dirs():
        for path in sorted(folder.glob("*.toml")):
            if path.stem in files:
                raise HardwareSpecError(f"{path}: the system {path.stem!r} is also {files[path.stem]}; rename one "
                                        f"file (a system's name is its file's stem)")
            files[path.stem] = path
    return files


def names() -> tuple[str, ...]:
    """The names of the catalog's systems (the bundled ones and a user's, :func:`catalog_dirs`), sorted
    case-insensitively."""
    return tuple(sorted(_files(), key=lambda n: (n.lower(), n)))


def _spelling(name: str) -> str:
    """*name* as the catalog spells its names: lower case, a run of hyphens or spaces one underscore (NVIDIA's
    performance tables write "DGX-B200" and "DGX GB200" for the catalog's ``dgx_b200`` and alias ``dgx_gb200``)."""
    return re.sub(r"[\s-]+", "_", name.strip().lower())


def load(name: str) -> System:
    """The catalog's system called *name* (e.g. "A2", "dgx_h100") or one of its aliases: the exact spelling first,
    then the same name in another case or with hyphens or spaces for underscores ("DGX-H100").

    Raises:
        HardwareSpecError: *name* is neither a system nor an alias of one (the
            message lists the known names), or a file is malformed.
    """
    files = _files()
    if name in files:
        return load_file(files[name])
    known = sorted(files, key=lambda n: (n.lower(), n))
    spelled, spelled_as = _spelling(name), None
    for system_name in known:
        system = load_file(files[system_name])
        if name in system.aliases:
            return system
        if spelled_as is None and spelled in {_spelling(n) for n in (system_name, *system.aliases)}:
            spelled_as = system  # an exact alias of a later file still wins
    if spelled_as is not None:
        return spelled_as
    raise HardwareSpecError(f"unknown hardware system {name!r}; known: {', '.join(known)} "
                            f"(or an alias: `symcost hardware show NAME` lists a system's aliases)")

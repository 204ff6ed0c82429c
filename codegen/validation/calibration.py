"""Calibrating a cluster's network to its own nccl-tests logs (``symcost calibrate``).

The collective time model prices a cluster with NCCL's tuning constants and the datasheet peaks of its system file.
Two kinds of facts of a real network are in no datasheet: the fraction of the NICs' peak its collectives reach, and
the latency one network hop takes per protocol (beyond tuning.cc's own per-hop figures; in time only: NCCL's tuner
keeps pricing each hop with what the network plugin reports, lines 391-393, so the pick stays NCCL's).
:func:`calibrate` fits these four — the network level's ``efficiency`` and
``net_latency_ll_s``, ``net_latency_ll128_s``, ``net_latency_simple_s`` — and nothing else, to the logs a user
hands it, by least absolute deviations on the logarithm of the time (every size weighs alike, small or large):

    minimise  Σ_rows |ln t_predicted − ln t_measured|
    over      efficiency ∈ [0.05, 1], each latency ∈ [0, 1 ms]

Absolute, not squared, deviations: the error a calibration is judged by (here, in ``symcost validate`` and in what
the command prints) is the median relative error, whose estimator this is; squared deviations let the few
latency-bound rows a sweep misses by 50-70 % (a size NCCL switches algorithm at, a noisy small message) pull the
constants away from the bulk of the rows, leaving the median worse than the catalog's on the same logs.

A grid over the efficiency (0.1 to 1 in steps of 0.1) and one latency shared by the three protocols (0 and ten
values from 1 µs to 1 ms, geometric) finds the basin; a coordinate search (golden-section on each constant in
turn, the efficiency within 0.1 of the grid's best down to its lower bound 0.05, each latency from 0 to the grid's
next values; three rounds) refines it. The constants are
bounded and no gradient is used, because the model is not smooth in them (NCCL's pick switches). The result is
never worse on the logs than the grid's best, nor than the base's own constants, and a constant the logs cannot
tell apart from the base's (no better fitted than at the base's value) keeps the base's.

Only the user's logs are read: the bundled catalog and the project's validations stay unfitted. The result is a
system file (a ``base`` node with a ``[network]`` table) for ``symcost --catalog``.

Public API::

    calibrate(data, base) -> Calibration;  Calibration.system_file(name, sources) -> str
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import hardware

from .collectives import Measurements, predicted_rows

__all__ = ["Calibration", "EFFICIENCY_BOUNDS", "LATENCY_BOUNDS_S", "PROTOCOLS", "calibrate"]

#: The bounds of the fitted constants.
EFFICIENCY_BOUNDS = (0.05, 1.0)
LATENCY_BOUNDS_S = (0.0, 1e-3)


#: The protocols whose per-hop network latency is fitted: every protocol NCCL's model prices.
PROTOCOLS = hardware.PROTOCOLS


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` fitted, and how well.

    Attributes:
        base: the catalog system the logs ran on, as given.
        efficiency: the fitted fraction of the NICs' peak (``efficiency`` of the network level).
        latency_s: the fitted seconds one network hop adds, per protocol (``net_latency_<protocol>_s``).
        base_efficiency, base_latency_s: the same constants as *base* states them (or their defaults).
        rows: the rows fitted.
        median_rel_err, base_median_rel_err: median |predicted − measured| / measured with the fitted constants and
            with *base*'s.
        deviation, base_deviation: mean |ln predicted − ln measured| (what the fit minimises, over the rows) with the
            fitted constants and with *base*'s.
        system: *base* with the fitted constants.
        by_nodes: per node count of the rows, ascending: (nodes, rows, median relative error with the fitted
            constants, with *base*'s): where a fit on few nodes helps and whether it holds as the nodes grow.
    """

    base: str
    efficiency: float
    latency_s: dict[str, float]
    base_efficiency: float
    base_latency_s: dict[str, float]
    rows: int
    median_rel_err: float
    base_median_rel_err: float
    deviation: float
    base_deviation: float
    system: hardware.System
    by_nodes: tuple[tuple[int, int, float, float], ...] = ()

    def system_file(self, name: str, sources: list[str]) -> str:
        """The TOML system file of the calibrated cluster, with where its constants came from."""
        node = self.system
        return "\n".join([
            f"# {name}: {self.base} nodes on their network, calibrated by `symcost calibrate` on {self.rows} rows of "
            "nccl-tests logs:",
            *(f"#   {source}" for source in sources),
            f"# Fit: least absolute deviations on ln(time), mean |ln error| {self.deviation:.3f} (the {self.base} "
            f"catalog system: {self.base_deviation:.3f});",
            f"# median relative error {self.median_rel_err:.1%} (the catalog system: {self.base_median_rel_err:.1%}).",
            f'description = "{self.base} nodes on a network calibrated to its own nccl-tests logs"',
            f'base = "{self.base}"',
            "",
            "[network]",
            f'transport = "{node.network.transport or "ib"}"',
            f"nics_per_node = {node.nics_per_node}",
            f"nic_bandwidth_bytes_per_s = {node.nic_bandwidth_bytes_per_s!r}",
            f"efficiency = {self.efficiency!r}  # fitted (the base: {self.base_efficiency!r})",
            *(f"net_latency_{p}_s = {self.latency_s[p]!r}  # fitted (the base: {self.base_latency_s[p]!r})"
              for p in PROTOCOLS),
            "",
        ])


def _trial(node: hardware.System, efficiency: float, latency: dict[str, float]) -> hardware.System:
    return hardware.with_network(node, efficiency=efficiency, **{f"net_latency_{p}_s": latency[p] for p in PROTOCOLS})


def _golden(f: Callable[[float], float], low: float, high: float, iterations: int = 20) -> float:
    """The minimiser of *f* on [low, high] by golden-section search (the lower end of a tie)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return c if fc <= fd else d


def _relative_errors(data: Measurements, name: str, node: hardware.System) -> np.ndarray:
    """|predicted − measured| / measured of every row of *data*, its system *name* priced as *node*."""
    predicted = predicted_rows(data, {name: node})[0]
    return np.abs(predicted - data.time_s) / data.time_s


def _by_nodes(data: Measurements, fitted: np.ndarray, base: np.ndarray) -> tuple[tuple[int, int, float, float], ...]:
    """(nodes, rows, median of *fitted*, median of *base*) per node count of *data*'s rows (a one-node table: one)."""
    nodes = data.clusters.nodes if data.clusters is not None else np.ones(data.time_s.shape, dtype=np.int64)
    return tuple((int(n), int(np.sum(nodes == n)), float(np.median(fitted[nodes == n])),
                  float(np.median(base[nodes == n]))) for n in np.unique(nodes))


def calibrate(data: Measurements, base: str) -> Calibration:
    """Fit the network efficiency and per-protocol hop latencies of *base* to *data* (its rows:
    ``nccl_logs.measurements``).

    Raises:
        ValueError: *data* has no rows, or rows of another system than *base*.
    """
    if not len(data.time_s):
        raise ValueError("logs: no rows to calibrate on")
    names = set(np.asarray(data.system).tolist())
    if names != {base}:
        raise ValueError(f"--system: the rows are of {', '.join(sorted(names))}, not of {base!r}")
    node = hardware.load(base)
    measured = np.log(data.time_s)
    seen: dict[tuple[float, ...], float] = {}

    def loss(efficiency: float, latency: dict[str, float]) -> float:
        key = (efficiency, *(latency[p] for p in PROTOCOLS))
        if key not in seen:
            predicted = predicted_rows(data, {base: _trial(node, efficiency, latency)})[0]
            residual = np.log(predicted) - measured
            seen[key] = float(np.sum(np.abs(residual))) if np.all(np.isfinite(residual)) else math.inf
        return seen[key]

    efficiencies = np.round(np.arange(0.1, EFFICIENCY_BOUNDS[1] + 1e-9, 0.1), 4)
    latencies = np.concatenate([[0.0], np.geomspace(1e-6, LATENCY_BOUNDS_S[1], 10)])
    grid = min(((float(e), float(t)) for e in efficiencies for t in latencies),
               key=lambda p: loss(p[0], dict.fromkeys(PROTOCOLS, p[1])))
    eff, lat = grid[0], dict.fromkeys(PROTOCOLS, grid[1])
    start = (eff, dict(lat))
    index = int(np.searchsorted(latencies, grid[1]))
    span = (float(latencies[max(index - 2, 0)]), float(latencies[min(index + 2, len(latencies) - 1)]))
    for _ in range(3):
        eff = _golden(lambda e: loss(e, lat), max(EFFICIENCY_BOUNDS[0], eff - 0.1), min(EFFICIENCY_BOUNDS[1],
                                                                                       eff + 0.1))
        for p in PROTOCOLS:
            lat[p] = _golden(lambda t: loss(eff, {**lat, p: t}), LATENCY_BOUNDS_S[0], max(span[1], 2 * lat[p]))
    if loss(*start) < loss(eff, lat):  # the refinement never ends worse than the grid
        eff, lat = start
    base_efficiency = node.network.efficiency or 1.0
    base_latency = {key.removeprefix("net_latency_").removesuffix("_s"): value
                    for key, value in hardware.hop_latencies(node).items()}
    # Nor worse than the catalog's own constants; and a constant the logs cannot tell apart from the base's (a fit
    # no better with the fitted value than with the base's: sizes that do not depend on it, or where a cap of
    # NCCL's binds before it) keeps the base's, one constant after the other.
    if loss(base_efficiency, base_latency) <= loss(eff, lat):
        eff, lat = base_efficiency, dict(base_latency)
    if loss(base_efficiency, lat) <= loss(eff, lat):
        eff = base_efficiency
    for p in PROTOCOLS:
        if loss(eff, {**lat, p: base_latency[p]}) <= loss(eff, lat):
            lat[p] = base_latency[p]
    fitted = _trial(node, eff, lat)
    errors, base_errors = _relative_errors(data, base, fitted), _relative_errors(data, base, node)
    return Calibration(base=base, efficiency=eff, latency_s=dict(lat), base_efficiency=base_efficiency,
                       base_latency_s=base_latency,
                       rows=len(data.time_s), median_rel_err=float(np.median(errors)),
                       base_median_rel_err=float(np.median(base_errors)), deviation=loss(eff, lat) / len(measured),
                       base_deviation=loss(base_efficiency, base_latency) / len(measured), system=fitted,
                       by_nodes=_by_nodes(data, errors, base_errors))

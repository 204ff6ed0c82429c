"""Comparing the models with measurements (``symcost validate``), and the runtime helpers they need.

Public API::

    collectives.predict(system, op, ranks, msg_bytes, ...) -> Prediction
    collectives.load_measurements(path) -> Measurements
    collectives.validate(measurements) -> list[Group]
    placement.group_strides(order, degrees) -> dict[str, int | ndarray]

Runs on the generated evaluators only: nothing here imports SymPy.
"""

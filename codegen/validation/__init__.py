"""Comparing the models with measurements and published figures (``symcost validate``).

Public API::

    collectives.predict(system, op, ranks, msg_bytes, ...) -> Prediction
    collectives.load_measurements(path) -> Measurements
    collectives.validate(measurements) -> list[Group]
    memory.zero_table1_rows(path=None), memory.megatron_rows(path=None, settings=PAPER_SETTINGS)
    memory.run_memory_validation(data=None) -> exit status

Runs on the generated evaluators only: nothing here imports SymPy.
"""

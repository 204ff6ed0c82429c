"""Comparing the models with measurements and published figures (``symcost validate``).

Public API::

    collectives.predict(system, op, ranks, msg_bytes, ...) -> Prediction
    collectives.nics_in_use(system, gpus_per_node) -> NICs a node of that many ranks drives
    collectives.load_measurements(path) -> Measurements
    collectives.validate(measurements) -> list[Group]
    memory.zero_table1_rows(path=None), memory.megatron_rows(path=None, settings=PAPER_SETTINGS)
    memory.run_memory_validation(data=None) -> exit status
    step_time.run_step_time_validation(data=None, system=None) -> exit status
    step_rows.step_rows(table, system=None), step_rows.sweep_stats(rows)
    step_rows.spearman(x, y), step_rows.regret(predicted, measured)
    nccl_logs.read_logs(paths, gpus_per_node=None, op=None) -> list[LogRow]   (raw nccl-tests output)

    rows_read(path, n) -> the line each validation prints first
    no_cyclic_gc() -> a context that pauses the cyclic garbage collector over a large table

Every cell of a measurement table passes the input gate (``codegen.runtime.inputs``) in ``csvfile``;
a bad one is one error line naming the file, line, column and value.

Runs on the generated evaluators only: nothing here imports SymPy.
"""

from .csvfile import no_cyclic_gc as no_cyclic_gc
from .csvfile import rows_read as rows_read

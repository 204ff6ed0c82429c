"""Validation of the model against published figures and measurements (``tests/data``).

Runs on the generated evaluators only: importing it does not import SymPy.
"""

from .memory import MEGATRON_CSV as MEGATRON_CSV
from .memory import PAPER_SETTINGS as PAPER_SETTINGS
from .memory import ZERO_CSV as ZERO_CSV
from .memory import MemorySettings as MemorySettings
from .memory import megatron_rows as megatron_rows
from .memory import run_memory_validation as run_memory_validation
from .memory import zero_table1_rows as zero_table1_rows

"""Model configs and parallel layouts: load a model, parse and check layouts, derive their fields and stages.

A :class:`Layout` is one training run's parallel strategy (its keys are declared once, in
``symbolic.vocabulary.LAYOUT_KEYS``); together with a :class:`ModelConfig` it fixes every
configuration field the communication formulas read (docs/model.md, "Config fields"), which
:func:`derive_fields` computes, and the pipeline layout the stage walk visits (docs/model.md,
"From a layer to a stage"), which :func:`build_stages` builds. A :class:`LayoutBatch` holds
millions of layouts of one run as int64 columns, and :func:`validate_batch`,
:func:`derive_fields_batch` and :func:`pipeline_stage_counts` work on it without a Python loop.

One private module per job, re-exported here: ``_layout`` (the types and parsing), ``_batch``
(batches), ``_derivation`` (the rules that turn keys into fields), ``_pipeline`` (the pipeline
split), ``_validation`` (the constraints), ``_fields`` (the derived fields), ``_stages`` (the
stages), ``_model`` (the model type); :mod:`codegen.configs.models` reads model files.
"""

from ._batch import ARRAY_KEYS as ARRAY_KEYS
from ._batch import WHOLE_DP_GROUP as WHOLE_DP_GROUP
from ._batch import LayoutBatch as LayoutBatch
from ._batch import inherit_os as inherit_os
from ._derivation import LAYOUT_FIELD_KEYS as LAYOUT_FIELD_KEYS
from ._derivation import LAYOUT_FIELD_NAMES as LAYOUT_FIELD_NAMES
from ._derivation import ORIGINAL_CP_NETWORK as ORIGINAL_CP_NETWORK
from ._derivation import direct_column as direct_column
from ._derivation import dp_comm_level_values as dp_comm_level_values
from ._fields import derive_fields as derive_fields
from ._fields import derive_fields_batch as derive_fields_batch
from ._layout import Layout as Layout
from ._layout import LayoutError as LayoutError
from ._layout import RecomputePlan as RecomputePlan
from ._layout import parse_layout as parse_layout
from ._layout import parse_recompute as parse_recompute
from ._model import ModelConfig as ModelConfig
from ._model import ModelConfigError as ModelConfigError
from ._pipeline import accounted as accounted
from ._pipeline import accounted_split_offset as accounted_split_offset
from ._pipeline import accounted_stage_layers as accounted_stage_layers
from ._pipeline import chunk_layer_counts as chunk_layer_counts
from ._pipeline import interleaving_notes as interleaving_notes
from ._pipeline import module_list_split_offset as module_list_split_offset
from ._pipeline import split_layers as split_layers
from ._pipeline import uneven_chunks as uneven_chunks
from ._pipeline import ungrouped_microbatches as ungrouped_microbatches
from ._stages import batch_stage_counts as batch_stage_counts
from ._stages import build_stages as build_stages
from ._stages import pipeline_stage_counts as pipeline_stage_counts
from ._stages import LAYER_KIND_NAMES as LAYER_KIND_NAMES
from ._stages import stage_layer_kinds as stage_layer_kinds
from ._stages import stage_layers as stage_layers
from ._validation import LAYOUT_CONSTRAINTS as LAYOUT_CONSTRAINTS
from ._validation import check_batch as check_batch
from ._validation import constraint_keys as constraint_keys
from ._validation import layout_violations as layout_violations
from ._validation import validate as validate
from ._validation import validate_batch as validate_batch
from ._validation import violation_message as violation_message
from .models import load_model as load_model
from .models import model_names as model_names

"""Pricing: the engine every cost family's pricer runs on (``engine``: blocks, grouping by the keys a term reads,
calls of generated terms, pipeline-shape tables), the families as specs (``families``), and the families' pricers:
the original's volumes (``pricer``; its fused numba backend, ``fused``), collective time (``time``,
``collective``), memory (``memory``), step time (``step_time``), sensitivity (``sensitivity``).
docs/architecture.md says how they fit."""

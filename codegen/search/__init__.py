"""The search: every valid layout of a model on N devices (``space``), priced and reduced to its best rows,
in process or as Dask blocks (``run``)."""

"""The SymPy-free run-time services: the input gate (``inputs``), the lookup and checked call of generated
functions (``kernels``), and the per-user cache (``cache``)."""

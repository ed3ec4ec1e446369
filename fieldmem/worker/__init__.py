"""What runs where jax and the user's code run: ``python -m fieldmem.worker.main`` (started by
:mod:`fieldmem.parent.spawn`), or a check in the caller's own process. It reads through
:mod:`fieldmem.driver` and answers the parent with readings; it never imports analysis (findings, xla),
renderers or the command line."""

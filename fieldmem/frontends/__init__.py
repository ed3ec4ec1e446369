"""What users call: the ``fieldmem`` command (one module per command), the Python API, the pytest plugin,
the ``--watch`` loop, and writing a run's outputs. Options in, exit code or exception out; nothing here
computes a figure."""

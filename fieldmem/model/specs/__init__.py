"""Files fieldmem ships besides its code: XLA's GPU target configs (``gpu/``)."""

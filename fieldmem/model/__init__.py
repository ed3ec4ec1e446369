"""The records every layer shares, and nothing that drives jax or prints: the report and its JSON codec,
what the driver reads (readings), the words of copies and findings, every error class, byte units, safe
file writing, the escaping rule for user text, the supported jax releases and the bundled GPU specs."""

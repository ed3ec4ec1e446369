"""Readings -> report: the verdict (analysis), the donation advisor, update chains and --run confirmation. No jax."""

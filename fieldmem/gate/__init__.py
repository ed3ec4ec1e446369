"""Gating a report: tolerances, baselines and the comparison of saved reports. No jax."""

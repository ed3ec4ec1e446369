"""Readers of XLA's output (optimized HLO text, the serialized buffer assignment): pure text and bytes, no jax."""

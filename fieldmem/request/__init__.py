"""What the user asked for, with no jax: target specs, the case registry, [tool.fieldmem] config, option parsing."""

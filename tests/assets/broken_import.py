"""A user's module that raises while it is imported."""

import fieldmem


def step(u):
    return u


fieldmem.case(step, args=lambda: ())
raise ValueError("config.yaml not found")

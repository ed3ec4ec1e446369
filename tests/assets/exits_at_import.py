"""A user's script that calls sys.exit() at import (no __main__ guard)."""

import sys


def step(u):
    return u


sys.exit(3)

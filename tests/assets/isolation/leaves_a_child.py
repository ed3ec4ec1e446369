"""A module that starts a child process which would outlive the worker, and writes its pid beside the
file named by $FIELDMEM_TEST_CHILD_PID (tests/parent/test_isolation.py)."""

import os
import subprocess
import sys

import jax.numpy as jnp

import fieldmem

_CHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.environ["FIELDMEM_TEST_CHILD_PID"], "w") as _file:
    _file.write(str(_CHILD.pid))


def make():
    return (jnp.zeros((8,)),)


def bump(u):
    return u + 1


fieldmem.case(bump, args=make)

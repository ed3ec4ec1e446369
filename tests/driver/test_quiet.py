"""jax starts without the accelerator plugins' known start-up noise on stderr, and real lines still get through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fieldmem.driver.quiet import known_noise

ROOT = Path(__file__).resolve().parents[2]

# as printed on this project's machines by jax 0.10.2 with libtpu and the CUDA plugin installed, no device
NOISE = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1796304677.325220   19659 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda12.initialize()
Traceback (most recent call last):
  File "/v/site-packages/jax_plugins/xla_cuda12/__init__.py", line 201, in _version_check
    version = get_version()
              ^^^^^^^^^^^^^
RuntimeError: jaxlib/cuda/versions_helpers.cc:38: operation cudaRuntimeGetVersion(&version) failed: Error loading CUDA libraries. GPU will not be used.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/v/site-packages/jax/_src/xla_bridge.py", line 508, in discover_pjrt_plugins
    plugin_module.initialize()
RuntimeError: Unable to load CUDA. Is it installed?
Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please set env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.
WARNING: Logging before InitGoogle() is written to STDERR
E0000 00:00:1796304642.719182   19275 common_lib.cc:554] INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES.
=== Source Location Trace: ===
learning/45eac/tfrc/runtime/libtpu_init_utils.cc:327
"""


def test_known_noise_goes_and_everything_else_stays() -> None:
    assert known_noise(NOISE.splitlines()) == []
    real = ["UserWarning: something real", "E0000 00:00:1.0 1 other.cc:1] a real error", "after"]
    mixed = [real[0], *NOISE.splitlines()[:2], real[1], *NOISE.splitlines()[2:], real[2]]
    assert known_noise(mixed) == real


def test_the_cuda13_plugins_start_traceback_is_noise_too() -> None:
    lines = NOISE.replace("xla_cuda12", "xla_cuda13").splitlines()
    assert any("xla_cuda13" in line for line in lines)
    assert known_noise(lines) == []


def test_another_plugin_traceback_is_kept() -> None:
    lines = ["Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda12.initialize()", "x"]
    lines += ["RuntimeError: CUDA version mismatch"]
    assert known_noise(lines) == lines


@pytest.mark.compile
@pytest.mark.parametrize("platforms", [None, "cpu"], ids=["JAX_PLATFORMS unset", "JAX_PLATFORMS=cpu"])
def test_start_jax_keeps_stderr_to_real_lines(platforms: str | None) -> None:
    code = (
        "import os\n"
        "from fieldmem.driver import start_jax\n"
        "start_jax()\n"
        "import jax\n"
        "os.write(2, b'after\\n')\n"
        "print(jax.devices()[0].platform)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JAX_PLATFORMS", None)
    if platforms:
        env["JAX_PLATFORMS"] = platforms
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "after\n"
    assert done.stdout.strip() == "cpu"

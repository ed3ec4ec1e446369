"""What jax copies onto the devices before every call, and what the program holds in host memory;
with ``--run``, the copies jax's transfer guard logged. Records of the report, no computation.
"""

from __future__ import annotations

from dataclasses import dataclass

from fieldmem.model.word_sets import TransferKind

__all__ = [
    "Transfer",
    "TransferRun",
    "Transfers",
]


@dataclass(frozen=True)
class Transfer:
    """One argument leaf jax copies onto the devices before every call, because the call gives it elsewhere than
    the program takes it.

    ``kind``: ``host-to-device`` (a NumPy array, a Python number the program takes as an array),
    ``across-devices`` (a jax array on another device or sharding: an uncommitted one, which jax moves) or
    ``memory-kind`` (the same devices, another memory). ``donated``: jax donates the copy it made, so the
    given buffer stays alive (on a device, the donation is lost: a ``resharded-donation`` finding).
    """

    input: str
    input_index: int
    kind: TransferKind
    given: str  # where the call gives it, in words ("cpu:0 (uncommitted)", "a NumPy array on the host")
    wanted: str | None  # where the program takes it (its sharding, in words)
    bytes: int  # what jax writes onto the devices per call, every shard counted
    device_bytes: int  # the most of it on one device: the copy that device holds beside the rest
    devices: int = 1  # the devices it is written to
    donated: bool = False
    fix: str = ""
    held_bytes: int = 0  # the given array's own buffer on one device: what a donation lost to the move leaves alive


@dataclass(frozen=True)
class TransferRun:
    """The copies jax's transfer guard logged during the donated run (``--run``) against the plan's.

    ``bytes``: what it logged copying the arguments onto the devices (None: not measured, ``unavailable``
    says why); ``agrees``: every leaf moved as many bytes as planned, and nothing else was logged.
    """

    planned: int
    bytes: int | None
    agrees: bool
    detail: str
    unavailable: str | None = None


@dataclass(frozen=True)
class Transfers:
    """What jax copies onto the devices before every call of the program, the arguments given as the check
    gives them, and which leaves the program holds in host memory (``pinned_host``: offloaded).

    ``bytes_per_call``: every :class:`Transfer`'s ``bytes``; ``summary``: the section in words, with the fix.
    ``offloaded_*``: the leaves the program takes or returns in a host memory kind, and their bytes per device
    (fieldmem's from the leaves, beside XLA's ``host_*`` figures).
    """

    leaves: tuple[Transfer, ...] = ()
    bytes_per_call: int = 0
    summary: str = ""
    offloaded_inputs: tuple[str, ...] = ()
    offloaded_outputs: tuple[str, ...] = ()
    offloaded_argument_bytes: int = 0
    offloaded_output_bytes: int = 0
    run: TransferRun | None = None  # only with --run

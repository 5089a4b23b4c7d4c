"""A first-order α-β estimate of a dim's communication time per step (ring all-reduce).

:class:`Links` holds the two kinds of link a group's traffic may cross (inside one host,
or between hosts) and times one collective over them; :func:`traffic_bytes` checks what a
plan's dims carry.  Pure arithmetic: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from .._core import MAX_UNIVERSE, InvalidSizeError, MeshTypeError, as_int, as_name, items_of, show

__all__ = ["Links", "traffic_bytes"]


def _as_number(value: object) -> float:
    """A real number (an int or a float, not a bool) as a float, else MeshTypeError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeshTypeError(f"a Links field must be a number (int or float), got {show(value)}")
    try:
        return float(value)
    except OverflowError:  # an int past any float: refused as the validators refuse inf
        return math.inf


def _in_range(least: float, *, strict: bool) -> Callable[[Any, Any, float], None]:
    def check(_: Any, field: Any, value: float) -> None:
        if not (math.isfinite(value) and (value > least if strict else value >= least)):
            bound = f"> {least:g}" if strict else f">= {least:g}"
            raise InvalidSizeError(f"Links.{field.name} must be a finite number {bound}, got "
                                   f"{show(value)}")
    return check


@attrs.frozen
class Links:
    """The links a collective runs over: bandwidth in Gb/s (10**9 bits per second, one
    direction, per rank) and latency per step in µs, inside one host and between hosts.

    Defaults, a common GPU cluster (H100 class): inside a host NVLink 4 at 3,600 Gb/s
    (18 links × 25 GB/s = 450 GB/s per direction) and 2 µs; between hosts one 400 Gb/s
    NIC per GPU (InfiniBand NDR) and 10 µs.  Measure yours (``nccl-tests``' bus
    bandwidth) and pass them: the estimate is only as good as these four numbers.

    THE LAW (:meth:`allreduce_seconds`, a ring all-reduce of ``b`` bytes per rank over a
    group of ``g`` ranks, first order): ``2 (g − 1) / g · 8 b / (gbps · 10**9) +
    2 (g − 1) · latency_us · 10**-6`` seconds, with the intra-host parameters when the
    group stays inside one host (or fast domain) and the inter-host ones otherwise (the
    slowest link a ring crosses bounds it).  A group of one rank costs 0.

    >>> links = Links()
    >>> round(links.allreduce_seconds(2**30, 8, inside=True) * 1e3, 2)  # 1 GiB over 8 ranks
    4.2
    >>> round(links.allreduce_seconds(2**30, 8, inside=False) * 1e3, 2)
    37.72
    """

    intra_host_gbps: float = attrs.field(default=3600.0, converter=_as_number,
                                         validator=_in_range(0.0, strict=True))
    inter_host_gbps: float = attrs.field(default=400.0, converter=_as_number,
                                         validator=_in_range(0.0, strict=True))
    intra_host_latency_us: float = attrs.field(default=2.0, converter=_as_number,
                                               validator=_in_range(0.0, strict=False))
    inter_host_latency_us: float = attrs.field(default=10.0, converter=_as_number,
                                               validator=_in_range(0.0, strict=False))

    FORMULA = "2 * (g - 1) / g * bytes / bandwidth + 2 * (g - 1) * latency"
    """The estimate, as the reports print it (``g``: the group size)."""

    def allreduce_seconds(self, nbytes: int, group_size: int, *, inside: bool) -> float:
        """Seconds for a ring all-reduce of ``nbytes`` per rank over ``group_size`` ranks,
        over intra-host links when ``inside`` (else inter-host ones): see the law above."""
        b = as_int(nbytes, "nbytes")
        g = as_int(group_size, "group_size")
        if not (0 <= b < MAX_UNIVERSE and 1 <= g <= MAX_UNIVERSE):
            raise InvalidSizeError(f"allreduce_seconds takes 0 <= nbytes < 2**63 and 1 <= "
                                   f"group_size <= 2**63, got {show(b)} and {show(g)}")
        if not isinstance(inside, bool):
            raise MeshTypeError(f"inside must be a bool, got {show(inside)}")
        gbps = self.intra_host_gbps if inside else self.inter_host_gbps
        latency = self.intra_host_latency_us if inside else self.inter_host_latency_us
        steps = 2 * (g - 1)
        return steps / g * (8 * b) / (gbps * 1e9) + steps * latency * 1e-6

    def to_dict(self) -> dict[str, Any]:
        """The parameters and the formula, as the JSON of ``meshlayout compare`` holds them."""
        return {"formula": self.FORMULA, "collective": "ring all-reduce",
                "intra_host_gbps": self.intra_host_gbps, "inter_host_gbps": self.inter_host_gbps,
                "intra_host_latency_us": self.intra_host_latency_us,
                "inter_host_latency_us": self.inter_host_latency_us}


def traffic_bytes(traffic: object) -> dict[str, int]:
    """``traffic`` checked: dim name -> bytes per step per rank (an int >= 0); None is none."""
    if traffic is None:
        return {}
    out = {}
    for dim, nbytes in items_of(traffic, "traffic", "a mapping of dim names to bytes per step"):
        name = as_name(dim, "a traffic dim name")  # first: a key of any kind is named safely
        b = as_int(nbytes, f"traffic[{name!r}]", "an int (bytes per step per rank)")
        if not 0 <= b < 1 << 63:
            raise InvalidSizeError(f"traffic[{name!r}] must be bytes in [0, 2**63), got "
                                   f"{show(b)}")
        out[name] = b
    return out

"""The price list of a recovery: :class:`Costs`, and the one law every way is priced by.

THE LAW.  A way's ``seconds`` (predicted time until training resumes) is

    fixed + rebind + communicators + the moves,

- ``fixed``: ``restart_s`` for a restart, ``repair_s`` for waiting, else 0;
- ``rebind``: ``rebind_s`` for every way that goes on in the live job (all but a restart):
  the ranks still up meet once and end the groups the failure broke
  (``DeviceMesh.rebind``);
- ``communicators``: groups are made concurrently and a rank is in one group per view and
  dim, so it is ``create_s`` per (view, dim) where some group is created plus
  ``reconfigure_s`` per (view, dim) where some group is reconfigured (not per group);
- the moves: every receiving rank ``r`` receives, over all tensors at once (one batch per
  peer pair), ``B[r, t]`` bytes on each link tier ``t`` and reads ``S[r]`` bytes from the
  checkpoint; its link time is ``in[r] = Σ_t (8 B[r, t] / (gbps_t 10**9) + latency_t
  [B[r, t] > 0])`` and what follows, ``after[r] = 8 S[r] / (storage_gbps 10**9) + 8 C[r]
  / (copy_gbps 10**9)``.  Every sending rank ``q`` sends ``E[q, t]`` bytes on each tier
  (a cell a receiver gets from a tier is charged in equal shares to the holders nearest
  it: the plan takes them in turn, ``g mod h``), in ``out[q] = Σ_t (8 E[q, t] / (gbps_t
  10**9) + latency_t [E[q, t] > 0])``.  The way waits for the slowest receiver, ``max_r
  (in[r] + after[r])``, or, if longer, for the slowest sender and then the longest
  ``after`` of a rank receiving over a link (``max_q out[q] + max_r after[r]``: a rank
  that sends to several receivers, as one a drop leaves out alive sends its block, holds
  them all up); or, with ``shared_gbps``, for ``8 Σ_r,t B[r, t] / (shared_gbps 10**9)`` if
  that is longer still: every byte moved passes one resource all transfers share (an
  oversubscribed fabric; for ranks that are processes of one machine, its CPUs).
  ``C[r]`` is what ``r`` writes into the blocks it rebuilds: a block of which it receives
  or reads anything is rebuilt, every byte of it placed (received, read, or copied from
  what ``r`` kept); a block it receives nothing of stays as it is.  A restart reads every
  rank's whole block from the checkpoint; its slowest reader is taken to be the rank at
  each view's first coordinate, which holds the first (largest) chunk of every tensor.

What the law leaves out: which sender feeds which receiver (every receiver is taken to
wait for the slowest sender), and the plan's own turn-taking among replicas (it charges
them equal shares; the plan's ``g mod h`` may give one a cell more).  On
``bench/recover_gloo.py``'s loopback job the senders were most of why a drop was
predicted at 0.6-0.8 of its measured time before the law counted them (a timed trial:
rank 0, left out, sending 53 MiB to two ranks took 90 ms where their own 32 MiB would
take 47; they rebuilt after it).

A drop *reconfigures* the groups it breaks: each new group is an old one without the
dropped members, in order (what ``backend``'s rebind re-forms in place on Gloo with torch
>= 2.14; elsewhere it creates it, so set ``reconfigure_s`` to ``create_s`` there).  Every
other way *creates* its new groups: a spare or the repaired rank joins groups it was not
a member of, a re-factor regroups the survivors, a restart starts afresh.  Ties in
``cost`` are broken by kind (in the order of ``mesh.Way.Kind``), then label.

Its ``cost``, the ranking key, charges the throughput it gives up over ``horizon_s``:
``seconds + (1 − throughput) · horizon_s``, so a quick way to a smaller world competes
with a slower one that keeps every rank, and waiting for a repair with both.

>>> from mesh import Costs
>>> c = Costs(across_gbps=200)
>>> c.across_gbps, c.host_gbps, c.horizon_s
(200.0, 3600.0, 3600.0)
>>> round(c.link_seconds({"across": 10**9}), 4)  # 1 GB across hosts at 200 Gb/s, + 10 µs
0.04
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from .._core import MeshTypeError, RecoveryError, show

__all__ = ["LINK_TIERS", "Costs", "after_seconds", "slowest"]

LINK_TIERS = ("host", "domain", "across")
"""The tiers a byte can cross between two ranks (``mesh.reshard``'s, without ``"kept"``)."""


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeshTypeError(f"a cost must be a number (int or float), got {show(value)}")
    return float(value)


def _non_negative(inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise RecoveryError(f"Costs.{attribute.name} must be a finite number >= 0, got "
                            f"{show(value)}")


def _positive(inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise RecoveryError(f"Costs.{attribute.name} must be a finite number > 0 (a "
                            f"bandwidth), got {show(value)}")


def _optional_bandwidth(value: object) -> float | None:
    """None (no such limit), or a finite number > 0."""
    if value is None:
        return None
    got = _number(value)
    if not math.isfinite(got) or got <= 0:
        raise RecoveryError(f"Costs.shared_gbps must be None or a finite number > 0 (a "
                            f"bandwidth), got {show(value)}")
    return got


def _field(default: float, *, bandwidth: bool = False) -> Any:
    return attrs.field(default=default, converter=_number,
                       validator=_positive if bandwidth else _non_negative)


@attrs.frozen(kw_only=True)
class Costs:
    """The figures a recovery is priced with; every one overridable by keyword.

    Defaults, a common GPU cluster (H100 class, as :class:`~mesh.Links`): inside a host
    NVLink at 3,600 Gb/s and 2 µs; inside a fast domain (NVL72-like) 3,600 Gb/s and 3 µs;
    across domains one 400 Gb/s NIC per GPU and 10 µs (bandwidths in Gb/s, one direction,
    per rank; latencies in µs per message).  A checkpoint read at 16 Gb/s (2 GB/s) per
    reading rank.  No bandwidth shared by all transfers (``shared_gbps=None``).  A rank
    writes its rebuilt blocks at 12,000 Gb/s (1.5 TB/s: an HBM copy reads and writes).
    2 s to create a communicator (NCCL init at scale) and 0.2 s to reconfigure one
    (Gloo's shrink measured 33–44 ms on 4 processes; NCCL's shrink is slower).  1 s for
    the survivors' meeting at a rebind (a store barrier of about 4 calls per rank on one
    store server: about a second at 10^4 ranks; 25–45 ms on 8 loopback processes,
    ``bench/recover_gloo.py``).  600 s to restart every worker
    (torchelastic: processes, imports, rendezvous; torchft users report 948 s), 3,600 s to
    repair a host, and lost throughput
    charged over a 3,600 s horizon.  Measure yours and pass them: a ranking is only as
    good as these figures.  Refused: a figure that is not an int or float
    (:class:`~mesh.MeshTypeError`), negative or not finite, or a bandwidth of 0
    (:class:`~mesh.RecoveryError`, naming the field).
    """

    host_gbps: float = _field(3600.0, bandwidth=True)
    domain_gbps: float = _field(3600.0, bandwidth=True)
    across_gbps: float = _field(400.0, bandwidth=True)
    host_latency_us: float = _field(2.0)
    domain_latency_us: float = _field(3.0)
    across_latency_us: float = _field(10.0)
    storage_gbps: float = _field(16.0, bandwidth=True)
    copy_gbps: float = _field(12000.0, bandwidth=True)
    shared_gbps: float | None = attrs.field(default=None, converter=_optional_bandwidth)
    create_s: float = _field(2.0)
    reconfigure_s: float = _field(0.2)
    rebind_s: float = _field(1.0)
    restart_s: float = _field(600.0)
    repair_s: float = _field(3600.0)
    horizon_s: float = _field(3600.0)

    def link_seconds(self, tier_bytes: Mapping[str, float], storage: float = 0,
                     copied: float = 0) -> float:
        """One receiver's time for ``tier_bytes`` (bytes per tier of :data:`LINK_TIERS`;
        other keys ignored), ``storage`` bytes read from the checkpoint and ``copied`` bytes
        written into its rebuilt blocks: the law above."""
        out = 8 * storage / (self.storage_gbps * 1e9) + 8 * copied / (self.copy_gbps * 1e9)
        for t in LINK_TIERS:
            b = tier_bytes.get(t, 0)
            if b:
                out += 8 * b / (getattr(self, f"{t}_gbps") * 1e9) + \
                    getattr(self, f"{t}_latency_us") * 1e-6
        return out

    def to_dict(self) -> dict[str, float | None]:
        """Every figure by name (JSON-able)."""
        return attrs.asdict(self)


def after_seconds(costs: Costs, row: Any) -> Any:
    """What a receiver does once its bytes are in: its checkpoint reads and rebuilt blocks
    (``row``: host, domain, cross, storage, rebuilt bytes; or their columns of rows)."""
    return 8 * row[3] / (costs.storage_gbps * 1e9) + 8 * row[4] / (costs.copy_gbps * 1e9)


def slowest(np: Any, costs: Costs, rows: Any) -> float:
    """The largest :meth:`Costs.link_seconds` of ``rows`` (an array: bytes over host,
    domain and cross links, then, where given, storage and rebuilt bytes), computed for all
    rows at once in the same order of operations: a receiver's or a sender's time."""
    out = (after_seconds(costs, rows.T) if rows.shape[1] > len(LINK_TIERS)
           else np.zeros(rows.shape[0]))
    for k, t in enumerate(LINK_TIERS):
        b = rows[:, k]
        out = out + np.where(b > 0, 8 * b / (getattr(costs, f"{t}_gbps") * 1e9)
                             + getattr(costs, f"{t}_latency_us") * 1e-6, 0.0)
    return float(out.max()) if out.size else 0.0

"""The values a recovery decision is made of: :class:`Kind`, :class:`Way`, :class:`Refusal`
and :class:`Recovery` (each made by :func:`~mesh.recover`, never constructed)."""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from .._core import MeshView
from .._recover import Made
from .._tensor import Reshard
from ._costs import Costs

__all__ = ["BYTE_TIERS", "Box", "Kind", "Recovery", "Refusal", "Way"]

Box = tuple[tuple[int, int], ...]
"""A box of a global tensor: ``(start, stop)`` per tensor dim."""

BYTE_TIERS = ("kept", "host", "domain", "across", "storage")
"""The keys of :attr:`Way.bytes`: ``mesh.reshard``'s link tiers, then checkpoint reads."""


class Kind(str, enum.Enum):
    """The kinds of way on, in the order ties are broken (a string: ``Kind.DROP == "drop"``).

    ``spare``: a spare in each failed coordinate; ``drop``: the failed slices along one dim
    cut out; ``refactor``: the survivors packed into the same dims with one shrunk;
    ``evict_host`` / ``evict_domain``: the failed ranks' whole hosts (fast domains) left
    out, onto spares or with a drop; ``restart``: every rank restarted, its state read from
    the checkpoint; ``wait``: the failed ranks repaired in place."""

    SPARE = "spare"
    DROP = "drop"
    REFACTOR = "refactor"
    EVICT_HOST = "evict_host"
    EVICT_DOMAIN = "evict_domain"
    RESTART = "restart"
    WAIT = "wait"


def _frozen(m: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(m))


@attrs.frozen(init=False, eq=False)
class Way(Made):
    """One way on after a failure, priced (made by :func:`~mesh.recover`).

    ``kind`` (a :class:`Kind`) and ``label`` (which dim, host or spares, in words);
    ``views`` (view name -> the view after; no failed rank in any, except for ``wait``,
    whose repaired ranks come back under their own numbers); ``moves`` (tensor name -> the
    :class:`~mesh.Reshard` from what the ranks up hold to the new sharding: a failed rank
    sends nothing, a healthy rank the way leaves out still sends; empty for ``restart``);
    ``lost`` (tensor name -> the boxes no rank up holds, read from the checkpoint; the whole
    tensor for ``restart``); ``bytes`` (:data:`BYTE_TIERS` -> bytes: ``"kept"`` kept in
    place, the link tiers moved, ``"storage"`` read); ``communicators`` (``kept``,
    ``reconfigured``, ``created`` groups, per view and dim summed); ``seconds`` (time to
    resume, by the law of :class:`~mesh.Costs`); ``throughput`` (the fraction of the old
    step rate kept: ranks working after / before); ``cost`` (``seconds + (1 − throughput)
    · horizon_s``, the ranking key); ``ranks`` (ranks working after).
    """

    kind: Kind
    label: str
    views: Mapping[str, MeshView] = attrs.field(converter=_frozen)
    moves: Mapping[str, Reshard] = attrs.field(converter=_frozen)
    lost: Mapping[str, tuple[Box, ...]] = attrs.field(converter=_frozen)
    bytes: Mapping[str, int] = attrs.field(converter=_frozen)
    communicators: Mapping[str, int] = attrs.field(converter=_frozen)
    seconds: float
    throughput: float
    cost: float
    ranks: int

    MADE_BY: ClassVar[str] = "mesh.recover(plan, world, failed, ...)"
    Kind: ClassVar[type[Kind]] = Kind
    """The kinds of way (``mesh.Way.Kind.SPARE == "spare"``)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return Way._trusted, (self.kind, self.label, dict(self.views), dict(self.moves),
                              dict(self.lost), dict(self.bytes), dict(self.communicators),
                              self.seconds, self.throughput, self.cost, self.ranks)

    def __repr__(self) -> str:
        return (f"Way({self.kind.value}: {self.label}, {self.seconds:.3g} s, throughput "
                f"{self.throughput:.3g}, cost {self.cost:.4g})")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the kind, label, prices, bytes, communicators, the lost
        boxes, and each view's dim names and shape (``views[name].to_dict()`` for more)."""
        return {"kind": self.kind.value, "label": self.label, "seconds": self.seconds,
                "throughput": self.throughput, "cost": self.cost, "ranks": self.ranks,
                "bytes": dict(self.bytes), "communicators": dict(self.communicators),
                "lost": {t: [[list(p) for p in box] for box in boxes]
                         for t, boxes in self.lost.items()},
                "views": {n: {"names": list(v.names), "shape": list(v.shape)}
                          for n, v in self.views.items()}}


@attrs.frozen(init=False)
class Refusal(Made):
    """A way on that is impossible here, with the reason in words naming the value."""

    kind: Kind
    label: str
    reason: str

    MADE_BY: ClassVar[str] = "mesh.recover(plan, world, failed, ...)"

    def __reduce__(self) -> tuple[Any, ...]:
        return Refusal._trusted, (self.kind, self.label, self.reason)

    def to_dict(self) -> dict[str, str]:
        """``{"kind", "label", "reason"}``."""
        return {"kind": self.kind.value, "label": self.label, "reason": self.reason}


@attrs.frozen(init=False, eq=False)
class Recovery(Made):
    """Every way on after ``failed`` ranks, cheapest first, and the ways refused (made by
    :func:`~mesh.recover`).  ``spares`` are the spares given; ``costs`` the prices used."""

    failed: tuple[int, ...]
    spares: tuple[int, ...]
    ways: tuple[Way, ...]
    refused: tuple[Refusal, ...]
    costs: Costs

    MADE_BY: ClassVar[str] = "mesh.recover(plan, world, failed, ...)"

    def __reduce__(self) -> tuple[Any, ...]:
        return Recovery._trusted, (self.failed, self.spares, self.ways, self.refused,
                                   self.costs)

    @property
    def best(self) -> Way | None:
        """The cheapest way (None when every way is refused)."""
        return self.ways[0] if self.ways else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the failure, the costs, the ways in order, the refused."""
        return {"failed": list(self.failed), "spares": list(self.spares),
                "costs": self.costs.to_dict(), "ways": [w.to_dict() for w in self.ways],
                "refused": [r.to_dict() for r in self.refused]}

    def table(self) -> str:
        """The ways as a text table (kind, label, seconds, throughput kept, cost, GB per
        tier, groups kept/reconfigured/created), then the refused with their reasons."""
        head = (f"{'kind':<12} {'seconds':>9} {'kept':>6} {'cost':>9} "
                + " ".join(f"{t + ' GB':>10}" for t in BYTE_TIERS) + "  groups k/r/c  way")
        rows = [head, "-" * len(head)]
        for w in self.ways:
            c = w.communicators
            rows.append(f"{w.kind.value:<12} {w.seconds:>9.3f} {w.throughput:>6.3f} "
                        f"{w.cost:>9.2f} "
                        + " ".join(f"{w.bytes[t] / 1e9:>10.3f}" for t in BYTE_TIERS)
                        + f"  {c['kept']}/{c['reconfigured']}/{c['created']}  {w.label}")
        rows += [f"refused {r.kind.value} ({r.label}): {r.reason}" for r in self.refused]
        return "\n".join(rows)

"""What moving a model's tensors from one plan to another costs: :class:`Moves`, the data of
``meshlayout reshard`` (one :func:`~mesh.reshard` plan per tensor, priced together), and
its picture, :func:`traffic_svg` (which ranks send to which).

Totals treat the tensors as moved together: a pair of ranks exchanges one message carrying
every tensor's boxes, so the rounds are those of the union of the pairs.

>>> from mesh import MeshView, Replicate, Shard, Sharding, Topology
>>> train = MeshView.from_shape((2, 2), ("dp", "tp"))
>>> serve = MeshView.from_ranks([4, 5, 6, 7], ("tp",))
>>> m = Moves.of({"w": Sharding(train, (Replicate(), Shard(0)), (8, 8))},
...              {"w": Sharding(serve, (Shard(1),), (8, 8))}, Topology(8, 4), itemsize=2)
>>> m.totals()["tiers"]
{'kept': 0, 'host': 0, 'domain': 0, 'across': 128}
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import attrs

from .._core import MeshTypeError, show
from .._plan import MIB
from .._tensor import TIERS, Reshard, Sharding, reshard
from .._topology import Topology
from ._planfile import Refused

__all__ = ["MAX_MATRIX", "RESHARD_SCHEMA", "Moves", "traffic_svg"]

RESHARD_SCHEMA = "meshlayout.reshard/2"
"""The ``schema`` field of :meth:`Moves.to_dict` (``meshlayout reshard --format json``)."""

MAX_MATRIX = 256
"""The most source (or destination) ranks :func:`traffic_svg` draws one by one; larger
plans are drawn host by host (with a topology)."""


def _size(n: float) -> str:
    for unit, scale in (("GiB", MIB * 1024), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


@attrs.frozen
class Moves:
    """One reshard plan per tensor name the two sides share, on one machine."""

    plans: tuple[tuple[str, Reshard], ...]
    topology: Topology | None

    @classmethod
    def of(cls, src: Mapping[str, Sharding], dst: Mapping[str, Sharding],
           topology: Topology | None = None, *, itemsize: int = 4) -> Moves:
        """Plans for every tensor both ``src`` and ``dst`` name (the same names, else
        :class:`~mesh._cli._planfile.Refused` listing the odd ones)."""
        for side, tensors in (("source", src), ("destination", dst)):
            if not isinstance(tensors, Mapping) or not tensors:
                raise Refused(f"the {side} plan must define TENSORS, a non-empty dict of "
                              f"tensor name -> mesh.Sharding; got {show(tensors)}")
            for name, s in tensors.items():
                if not isinstance(name, str) or not isinstance(s, Sharding):
                    raise Refused(f"TENSORS of the {side} maps {show(name)} to {show(s)}; "
                                  "every entry must be a name (str) -> mesh.Sharding")
        odd = sorted(set(src) ^ set(dst))
        if odd:
            raise Refused(f"the two plans must name the same tensors; only one names "
                          f"{odd[:10]}{' ...' if len(odd) > 10 else ''}")
        return cls(tuple((n, reshard(src[n], dst[n], topology, itemsize=itemsize))
                         for n in src), topology)

    def traffic(self) -> dict[tuple[int, int], int]:
        """Bytes per (source rank, destination rank), every tensor together."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for _, plan in self.plans:
            for pair, n in plan.traffic().items():
                out[pair] += n * plan.itemsize
        return dict(out)

    def totals(self) -> dict[str, Any]:
        """Bytes moved, bytes per tier, the busiest rank and the rounds of every tensor
        moved together."""
        tiers = dict.fromkeys(TIERS, 0)
        for _, plan in self.plans:
            for tier, n in plan.tier_bytes.items():
                tiers[tier] += n
        traffic = self.traffic()
        sent: dict[int, int] = defaultdict(int)
        got: dict[int, int] = defaultdict(int)
        peers_out: dict[int, int] = defaultdict(int)
        peers_in: dict[int, int] = defaultdict(int)
        for (s, d), n in traffic.items():
            sent[s] += n
            got[d] += n
            peers_out[s] += 1
            peers_in[d] += 1
        load = {r: max(sent[r], got[r]) for r in set(sent) | set(got)}
        busiest = min(load, key=lambda r: (-load[r], r)) if load else -1
        return {"bytes": sum(traffic.values()), "tiers": tiers,
                "busiest": {"rank": busiest, "bytes": load.get(busiest, 0)},
                "rounds": max([*peers_out.values(), *peers_in.values()], default=0)}

    def rank(self, rank: int) -> dict[str, Any]:
        """One rank's transfers per tensor: what it sends, receives and keeps."""
        out: dict[str, Any] = {}
        for name, plan in self.plans:
            out[name] = {
                "sends": [[t.dest, t.elements * plan.itemsize, [list(map(list, b))
                                                                 for b in t.boxes]]
                          for t in plan.sends(rank)],
                "receives": [[t.source, t.elements * plan.itemsize,
                              [list(map(list, b)) for b in t.boxes]]
                             for t in plan.receives(rank)],
                "kept": plan.kept(rank) * plan.itemsize}
        return out

    def to_dict(self, rank: int | None = None) -> dict[str, Any]:
        """The report as plain data (the ``--format json`` output)."""
        tensors = [{"name": n, "shape": list(p.src.shape), "from": _placed(p.src),
                    "to": _placed(p.dst), "bytes": p.bytes_moved, "tiers": p.tier_bytes,
                    "busiest": {"rank": p.busiest[0], "bytes": p.busiest[1]},
                    "rounds": p.rounds, "partial": p.partial} for n, p in self.plans]
        out: dict[str, Any] = {"schema": RESHARD_SCHEMA, "tensors": tensors,
                               "total": self.totals()}
        if rank is not None:
            out["rank"] = {"rank": rank, "tensors": self.rank(rank)}
        return out

    def report(self, rank: int | None = None) -> str:
        """The text report."""
        rows: list[tuple[str, ...]] = [
            ("tensor", "shape", "from", "to", "moved", *TIERS, "busiest rank", "rounds")]
        for n, p in self.plans:
            tier_bytes = p.tier_bytes
            rows.append((n, "x".join(map(str, p.src.shape)) or "()", _placed(p.src),
                         _placed(p.dst), _size(p.bytes_moved),
                         *(_size(tier_bytes[t]) for t in TIERS),
                         f"{p.busiest[0]}: {_size(p.busiest[1])}", str(p.rounds)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        t = self.totals()
        tiers = t["tiers"]
        lines += ["", f"total: {_size(t['bytes'])} moved; "
                  + ", ".join(f"{tier} {_size(tiers[tier])}" for tier in TIERS),
                  _TIER_WORDS if self.topology else
                  _TIER_WORDS + " (no topology given: every move is counted across)",
                  f"busiest rank: {t['busiest']['rank']} ({_size(t['busiest']['bytes'])} "
                  f"in its busier direction); {t['rounds']} rounds (no rank sends or receives "
                  "twice in a round; one message per pair of ranks)"]
        ways = sorted({p.partial for _, p in self.plans if p.partial})
        if ways:
            lines.append("partial sources: " + "; ".join(ways))
        if rank is not None:
            lines += ["", f"rank {rank}:", *self._rank_lines(rank)]
        return "\n".join(lines)

    def _rank_lines(self, rank: int) -> list[str]:
        """The report's lines for ``rank``: per tensor, what it sends, receives and keeps."""
        lines = []
        for name, mine in self.rank(rank).items():
            for verb, peers, word in (("sends", mine["sends"], "to"),
                                      ("receives", mine["receives"], "from")):
                for peer, n, boxes in peers:
                    shown = ", ".join(_box(b) for b in boxes[:3]) + (
                        f" and {len(boxes) - 3} more" if len(boxes) > 3 else "")
                    lines.append(f"  {name}: {verb} {_size(n)} {word} rank {peer}: {shown}")
            if mine["kept"]:
                lines.append(f"  {name}: keeps {_size(mine['kept'])}")
        return lines


_TIER_WORDS = ("kept: already on its receiver (not moved); host: moved inside a host; domain: "
               "across hosts inside a fast domain; across: across fast domains")
"""What the report's tier columns (:data:`~mesh._tensor.TIERS`) count."""


def _placed(s: Sharding) -> str:
    return "(" + ", ".join(f"{n}={k}:{p!r}" for n, k, p in
                           zip(s.view.names, s.view.shape, s.placements)) + ")"


def _box(box: list[list[int]]) -> str:
    return "[" + ", ".join(f"{a}:{b}" for a, b in box) + "]"


def traffic_svg(moves: Moves, title: str = "") -> str:
    """Which ranks send to which: a matrix of sources (rows) by destinations (columns),
    each cell shaded by its bytes; drawn host by host when a side has more than
    :data:`MAX_MATRIX` ranks (which needs a topology)."""
    traffic = moves.traffic()
    if not isinstance(title, str):
        raise MeshTypeError(f"title must be a str, got {show(title)}")
    src = sorted({s for s, _ in traffic})
    dst = sorted({d for _, d in traffic})
    unit = "rank"
    if max(len(src), len(dst), 0) > MAX_MATRIX:
        if moves.topology is None:
            raise Refused(f"--svg draws at most {MAX_MATRIX} ranks a side one by one, and this "
                          f"plan has {len(src):,} sources and {len(dst):,} destinations; give "
                          "the machine (--devices-per-host, --topology) to draw it by host")
        host = moves.topology.host
        grouped: dict[tuple[int, int], int] = defaultdict(int)
        for (s, d), n in traffic.items():
            grouped[host(s), host(d)] += n
        traffic, unit = dict(grouped), "host"
        src, dst = sorted({s for s, _ in traffic}), sorted({d for _, d in traffic})
        if max(len(src), len(dst)) > MAX_MATRIX:
            raise Refused(f"--svg draws at most {MAX_MATRIX} hosts a side, and this plan "
                          f"spans {max(len(src), len(dst)):,}")
    return _matrix(traffic, src, dst, unit, title)


def _matrix(traffic: dict[tuple[int, int], int], src: list[int], dst: list[int], unit: str,
            title: str) -> str:
    cell, left, top = 14, 70, 60
    most = max(traffic.values(), default=1)
    col = {d: i for i, d in enumerate(dst)}
    row = {s: i for i, s in enumerate(src)}
    w, h = left + cell * len(dst) + 20, top + cell * len(src) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="10">',
           f'<text x="8" y="16" font-size="12">{html.escape(title)}</text>',
           f'<text x="{left}" y="34">destination {unit}s →</text>',
           f'<text x="8" y="{top - 6}">source {unit}s ↓</text>']
    for d, i in col.items():
        out.append(f'<text x="{left + i * cell + 2}" y="{top - 4}" font-size="7">{d}</text>')
    for s, i in row.items():
        out.append(f'<text x="{left - 4}" y="{top + i * cell + 10}" text-anchor="end" '
                   f'font-size="7">{s}</text>')
    for (s, d), n in sorted(traffic.items()):
        shade = 0.15 + 0.85 * n / most
        out.append(f'<rect x="{left + col[d] * cell}" y="{top + row[s] * cell}" '
                   f'width="{cell - 1}" height="{cell - 1}" fill="#1f5fa8" '
                   f'fill-opacity="{shade:.3f}"><title>{unit} {s} → {unit} {d}: '
                   f'{_size(n)}</title></rect>')
    out.append(f'<text x="8" y="{h - 12}">darker: more bytes (most: {_size(most)} '
               f'between one pair)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"

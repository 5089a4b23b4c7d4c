"""A finished plan's totals, tallied from its pairs as they are listed, never kept per pair.

A plan's totals (:attr:`~._reshard.Reshard.elements_moved`, ``tier_bytes``, ``busiest``,
``rounds``) are sums and maxima over the (sender, receiver) pairs that move elements.  The
pairs of one plan can grow faster than its ranks (a receiver's fan-in grows with the
source's shards: FSDP over expert parallelism syncs each inference rank from every expert
shard), so a plan keeps only what the totals need: per rank while tallying (elements sent,
received, peers per phase), then four numbers.  :meth:`~._reshard.Reshard.traffic` lists
the pairs again when asked.

>>> t = tally([iter([(0, 2, 5), (1, 2, 3)]), iter([(2, 3, 8)])], lambda s, d: 3)
>>> t.elements, t.busiest, t.rounds, t.tiers
(16, (2, 8), 3, (0, 0, 0, 16))
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

import attrs

__all__ = ["Pair", "Totals", "tally"]

Pair = tuple[int, int, int]
"""(sender, receiver, elements): one pair of one phase, listed once."""


@attrs.frozen
class Totals:
    """A plan's totals in elements: ``elements`` moved; ``busiest``, (rank, elements) of
    the rank whose larger direction carries the most ((-1, 0) when nothing moves);
    ``rounds``, summed over the phases (the most peers one rank sends to or receives from
    in each: a bipartite multigraph's edges colour in its largest degree, König); ``tiers``,
    elements per link tier (:data:`~._reshard.TIERS`; the first, kept, is 0 here)."""

    elements: int
    busiest: tuple[int, int]
    rounds: int
    tiers: tuple[int, int, int, int]

    @property
    def price(self) -> tuple[int, int, int]:
        """(elements moved, the busiest rank's elements, rounds): how ways are compared."""
        return (self.elements, self.busiest[1], self.rounds)


def tally(phases: Iterable[Iterable[Pair]], tier: Callable[[int, int], int]) -> Totals:
    """The totals of ``phases`` (each lists its pairs once; ``tier(sender, receiver)`` is a
    pair's link tier, an index into :data:`~._reshard.TIERS`), in memory linear in the ranks
    that move anything, whatever the number of pairs."""
    sent: dict[int, int] = defaultdict(int)
    got: dict[int, int] = defaultdict(int)
    tiers = [0, 0, 0, 0]
    rounds = 0
    for phase in phases:
        out: dict[int, int] = defaultdict(int)
        into: dict[int, int] = defaultdict(int)
        for s, d, n in phase:
            sent[s] += n
            got[d] += n
            out[s] += 1
            into[d] += 1
            tiers[tier(s, d)] += n
        rounds += max([*out.values(), *into.values()], default=0)
    busiest = min(((-max(sent.get(r, 0), got.get(r, 0)), r) for r in sent.keys() | got.keys()),
                  default=(0, -1))
    return Totals(sum(sent.values()), (busiest[1], -busiest[0]), rounds,
                  (tiers[0], tiers[1], tiers[2], tiers[3]))

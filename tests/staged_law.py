"""The brute-force laws of a reshard plan with a :class:`~mesh.Partial` source, over element
maps from torch's own ``_split_tensor`` (``sharding_cases.torch_holdings``), never from the
code under test.  For a destination that keeps no partial dim and no ``down`` ranks, with
``p`` partial coordinates, ``R_e`` the destination ranks needing element ``e``:

- **bytes**: the plan moves exactly ``min(A, C)`` elements, where ``A = Σ_e Σ_{r ∈ R_e}``
  (the contributions of ``e`` that ``r`` does not hold) is summing at the destination, and
  ``C = Σ_e (p - 1) + |R_e| - [some holder of e is in R_e]`` is reducing each element at
  one holder (a receiver where one holds it) and sending the sum to the other receivers.
  Reduce-scatter then gather moves at least ``C`` (each part is reduced at one holder: the
  same count, or more where its reducer is no receiver), so ``min(A, C)`` is the best of
  the three ways; and never more than ``A``.
- **exact, staged** (the sums happen on the way): a rank reduces only elements it holds;
  each stage-1 transfer comes from a holder of its contribution and lands on boxes its
  receiver reduces; every reduced element combines each partial coordinate exactly once;
  every element a destination rank needs arrives exactly once, from a rank that reduced it,
  or is kept because it reduced it itself; nothing else arrives; ``sends`` lists exactly
  the transfers naming their source; the totals agree with the transfers (rounds: the
  largest degree of each phase, summed).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from sharding_cases import torch_holdings

from mesh import Reshard, Sharding, Transfer

__all__ = ["check_staged", "law_bytes", "universe"]

STAGED = ("reduce-scatter then gather", "reduce at one holder then scatter")


def universe(s: Sharding) -> list[int]:
    return list(s.view.ranks.take(range(s.view.ranks.size)))


def _held(s: Sharding, rank: int) -> set[int]:
    c = s.view.coordinate(rank)
    assert c is not None
    return set(torch_holdings(s, c).numpy().reshape(-1).tolist())


def _combo(s: Sharding, rank: int) -> tuple[int, ...]:
    c = s.view.coordinate(rank)
    assert c is not None
    return tuple(c[i] for i in s.partial_dims)


def _elements(box: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> list[int]:
    if not shape:
        return [0]
    grid = np.ix_(*[np.arange(a, b) for a, b in box])
    return np.ravel_multi_index(grid, shape).reshape(-1).tolist()  # type: ignore[no-any-return]


def law_bytes(plan: Reshard) -> tuple[int, int]:
    """(A, C) of the module's docs, in elements."""
    src, dst = plan.src, plan.dst
    holders: dict[int, dict[tuple[int, ...], set[int]]] = defaultdict(lambda: defaultdict(set))
    for s in universe(src):
        for e in _held(src, s):
            holders[e][_combo(src, s)].add(s)
    p = math.prod(src.view.shape[i] for i in src.partial_dims)
    needed: dict[int, set[int]] = defaultdict(set)
    for r in universe(dst):
        for e in _held(dst, r):
            needed[e].add(r)
    a = c = 0
    for e, rs in needed.items():
        a += sum(1 for r in rs for hs in holders[e].values() if r not in hs)
        near = any(h in rs for hs in holders[e].values() for h in hs)
        c += (p - 1) + len(rs) - near
    return a, c


def check_staged(plan: Reshard) -> list[str]:
    """The exactness laws of a staged plan (the module's docs); the problems found."""
    src, dst, shape = plan.src, plan.dst, plan.src.shape
    problems: list[str] = []
    reduced: dict[tuple[int, int], list[tuple[int, ...]]] = defaultdict(list)  # (g, e) -> combos
    every: dict[int, list[Transfer]] = defaultdict(list)
    for g in universe(src):
        own = _held(src, g)
        for box in plan.reduces(g):
            for e in _elements(box, shape):
                if e not in own:
                    problems.append(f"rank {g} reduces element {e}, which it does not hold")
                reduced[g, e].append(_combo(src, g))
    ranks = sorted(set(universe(src)) | set(universe(dst)))
    for r in ranks:
        for t in plan.receives(r):
            every[t.source].append(t)
            if t.stage != 1:
                continue
            theirs = _held(src, t.source)
            for box in t.boxes:
                for e in _elements(box, shape):
                    if e not in theirs or _combo(src, t.source) != t.contribution:
                        problems.append(f"{t}: its source does not hold element {e} as "
                                        f"contribution {t.contribution}")
                    if (r, e) not in reduced:
                        problems.append(f"{t}: rank {r} does not reduce element {e}")
                    reduced[r, e].append(t.contribution)
    p = math.prod(src.view.shape[i] for i in src.partial_dims)
    for (g, e), combos in reduced.items():
        if len(combos) != p or len(set(combos)) != p:
            problems.append(f"rank {g} reduces element {e} from contributions {combos}, not "
                            f"each of the {p} once")
    for r in universe(dst):
        arrived: list[int] = []
        for t in plan.receives(r):
            if t.stage == 1:
                continue
            if t.stage != 2:
                problems.append(f"{t}: a staged plan sends no stage-{t.stage} transfer")
            for box in t.boxes:
                for e in _elements(box, shape):
                    if (t.source, e) not in reduced:
                        problems.append(f"{t}: rank {t.source} sends element {e} it did not "
                                        "reduce")
                    arrived.append(e)
        keep = plan.keeps(r)
        kept = [e for box in (keep.boxes if keep else ()) for e in _elements(box, shape)]
        if any((r, e) not in reduced for e in kept):
            problems.append(f"rank {r} keeps elements it did not reduce")
        if plan.kept(r) != len(kept):
            problems.append(f"rank {r}: kept() says {plan.kept(r)}, it keeps {len(kept)}")
        if sorted(arrived + kept) != sorted(_held(dst, r)):
            problems.append(f"rank {r} gets {sorted(arrived)} and keeps {sorted(kept)}; it "
                            f"needs {sorted(_held(dst, r))}")
    for s in universe(src):
        if sorted(plan.sends(s), key=repr) != sorted(every.get(s, []), key=repr):
            problems.append(f"sends({s}) differs from the receives naming it as source")
    phases: list[dict[tuple[int, int], int]] = [defaultdict(int), defaultdict(int)]
    for ts in every.values():
        for t in ts:
            phases[t.stage - 1][t.source, t.dest] += t.elements
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for phase in phases:
        for k, n in phase.items():
            pairs[k] += n
    if plan.traffic() != dict(pairs) or plan.elements_moved != sum(pairs.values()):
        problems.append("traffic() or elements_moved differs from the transfers")
    rounds = 0
    for phase in phases:
        out: dict[int, int] = defaultdict(int)
        into: dict[int, int] = defaultdict(int)
        for a, b in phase:
            out[a] += 1
            into[b] += 1
        rounds += max([*out.values(), *into.values()], default=0)
    if plan.rounds != rounds:
        problems.append(f"rounds {plan.rounds}, the phases give {rounds}")
    return problems

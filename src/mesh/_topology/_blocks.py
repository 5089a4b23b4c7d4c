"""Host-block arithmetic: the most blocks of consecutive ranks any group of a family spans.

A *block* is ``[k * per, (k + 1) * per)``: a host of ``per`` devices, or a fast domain of
hosts.  :func:`most_blocks` answers :meth:`~mesh.Topology.hosts_per_group` (and
``domains_per_group``) for a regular topology over an identity universe from the dim
layout alone, in O(ndim) for the usual aligned plan, without listing a group.  Pure
arithmetic on flat ``(size, stride)`` modes, as ``layout._flat`` is: nothing here knows a
view or a topology; a placement with too many cases to enumerate raises
:class:`~mesh.TopologyError`.
"""

from __future__ import annotations

import bisect
import math

from layout import Layout, complement, flatten

from .._core import TopologyError, py_offsets

__all__ = ["most_blocks"]


def _modes(L: Layout) -> list[tuple[int, int]]:
    return [(s, d) for s, d in zip(flatten(L.shape), flatten(L.stride)) if s > 1]


_BUDGET = 1 << 20  # the most cases one query may enumerate (irregular placements only)


def most_blocks(dim: Layout, n: int, per: int) -> int:
    """The most blocks ``[k * per, (k + 1) * per)`` any group of the family spans.

    The family's groups start at the complement's offsets ``b`` and are ``b + S`` with
    ``S`` the dim layout's image.  ``S = A + I``: ``A`` holds the modes moving by whole
    blocks (a mode of stride ``d | per`` and extent a multiple of ``per`` splits into a
    block-moving and an inner part), ``I`` the rest.  Shifting a group by ``per`` shifts
    its blocks by one, so its block count depends only on ``p = b % per``: it is
    ``|A / per + {(p + i) // per : i in I}|``, which is ``|A|`` when ``p + I`` stays in
    one block (always, when ``I`` is empty: the usual aligned plan, O(ndim)).  Otherwise
    the count changes only where ``p`` passes a threshold ``per - i % per``: each stretch
    between thresholds that holds a start residue is counted once.  The residues are
    kept as a set modulo a period ``g | per`` (a complement mode that runs through a
    whole cycle shrinks the period), so no step enumerates ``per`` values.  Irregular
    placements too many to enumerate raise :class:`~mesh.TopologyError`.

    >>> most_blocks(Layout(3, 1), 12, 4)  # tp=3 on hosts of 4: (3, 4, 5) spans two
    2
    """
    if per >= n:  # the whole universe is in block 0
        return 1
    whole, inner = _split_modes(dim, per)
    hi = sum((s - 1) * d for s, d in inner)  # the inner part's largest offset
    period, reps = _start_residues(complement(dim, n), per)
    if max(r + per - period for r in reps) + hi < per:  # no start pushes I across a block
        return math.prod(s for s, _ in whole)
    return _sweep(whole, inner, per, period, sorted(reps))


def _split_modes(dim: Layout, per: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(A, I)``: the modes of ``dim`` moving by whole blocks (strides in blocks), and the
    rest; a mode of stride ``d | per`` and extent a multiple of ``per`` goes in both."""
    whole: list[tuple[int, int]] = []
    inner: list[tuple[int, int]] = []
    for s, d in _modes(dim):
        if d % per == 0:
            whole.append((s, d // per))
        elif per % d == 0 and (s * d) % per == 0:
            whole.append((s * d // per, 1))
            inner.append((per // d, d))
        else:
            inner.append((s, d))
    return whole, inner


def _sweep(whole: list[tuple[int, int]], inner: list[tuple[int, int]], per: int, period: int,
           reps: list[int]) -> int:
    """The most blocks a group spans, sweeping its start residue ``p`` up through
    ``[0, per)``: the blocks change only where ``p`` passes a threshold, and each stretch
    between thresholds that holds a start residue (``reps``, sorted) is counted once."""
    size_whole = math.prod(s for s, _ in whole)
    counts, moves = _blocks_at_zero(_image(inner, "its offsets within a host"), per)
    cuts = sorted(moves)
    most = 0
    whole_image: list[int] | None = None
    for a, b in zip([0, *cuts], [*cuts, per]):  # p in [a, b): the same blocks
        if a:
            _shift(counts, moves[a])
        if not _starts_between(a, b, period, reps):
            continue  # no group starts there
        if len(counts) == 1 or size_whole == 1:
            most = max(most, size_whole * len(counts) if len(counts) == 1 else len(counts))
            continue
        _spend(size_whole * len(counts), "its host placements")
        if whole_image is None:
            whole_image = _image(whole, "its host steps")
        most = max(most, len({w + t for w in whole_image for t in counts}))
    return most


def _blocks_at_zero(image: list[int], per: int) -> tuple[dict[int, int], dict[int, list[int]]]:
    """For a group starting at ``p = 0``: how many elements of ``image`` each block holds;
    and, by threshold, the blocks whose elements move to the next block once ``p`` reaches
    it (element ``i`` moves at ``p = per - i % per``)."""
    counts: dict[int, int] = {}
    moves: dict[int, list[int]] = {}
    for i in image:
        counts[i // per] = counts.get(i // per, 0) + 1
        if i % per:
            moves.setdefault(per - i % per, []).append(i // per)
    return counts, moves


def _shift(counts: dict[int, int], blocks: list[int]) -> None:
    """One element of each of ``blocks`` moves to the next block."""
    for q in blocks:
        counts[q] -= 1
        if not counts[q]:
            del counts[q]
        counts[q + 1] = counts.get(q + 1, 0) + 1


def _starts_between(a: int, b: int, period: int, reps: list[int]) -> bool:
    """Whether some ``x`` in ``[a, b)`` has ``x % period`` in ``reps`` (sorted)."""
    if b - a >= period:
        return True
    k = bisect.bisect_left(reps, a % period)
    nearest = reps[k] if k < len(reps) else reps[0] + period
    return a + (nearest - a % period) < b


def _start_residues(starts: Layout, per: int) -> tuple[int, set[int]]:
    """``(g, reps)`` with ``g | per``: the starts' residues modulo ``per`` are exactly the
    ``x`` in ``[0, per)`` with ``x % g`` in ``reps``.  A mode that runs through a whole
    cycle modulo the period shrinks it to the cycle's step; others add a progression."""
    period, reps = per, {0}
    for s, d in _modes(starts):
        step = d % period
        if step == 0:
            continue
        cycle = math.gcd(step, period)
        if s >= period // cycle:  # every multiple of the cycle: the period shrinks
            period = cycle
            reps = {r % period for r in reps}
        else:
            reps = _plus_progression(reps, step, s, period)
    return period, reps


def _plus_progression(r: set[int], d: int, s: int, per: int) -> set[int]:
    """``{(x + c * d) % per : x in r, c < s}`` by doubling: O(log s) passes over the set."""
    out, have = set(r), 1  # out = r + {0, d, ..., (have - 1) * d}
    for bit in bin(s)[3:]:
        out |= {(x + have * d) % per for x in out}
        have *= 2
        if bit == "1":
            out |= {(x + have * d) % per for x in r}
            have += 1
        _spend(len(out), "the group starts within a host")
    return out


def _spend(cases: int, what: str) -> None:
    """Refuse to enumerate more than :data:`_BUDGET` cases."""
    if cases > _BUDGET:
        raise TopologyError(
            f"cannot count the hosts exactly: the dim's groups do not align with the hosts and "
            f"{what} take {cases:,} cases to enumerate (at most {_BUDGET:,}); dims whose sizes "
            "divide, or are multiples of, the devices per host (and hosts per domain) are "
            "answered in O(ndim)")


def _image(modes: list[tuple[int, int]], what: str) -> list[int]:
    _spend(math.prod(s for s, _ in modes), what)
    return py_offsets(tuple(s for s, _ in modes), tuple(d for _, d in modes), 0)

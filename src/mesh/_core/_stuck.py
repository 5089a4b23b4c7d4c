"""A rank stuck behind others (:class:`StuckRank`): the entry of ``blocked`` in both reports
that name one, check_spmd's (``backend.SpmdReport``) and the hang reader's
(:class:`~mesh.HangReport`), defined once so that they say it with the same names."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import attrs

from ._errors import InvalidRanksError
from ._input import MAX_UNIVERSE, show

__all__ = ["StuckRank"]

G = TypeVar("G")


@attrs.frozen
class StuckRank(Generic[G]):
    """A rank stuck behind others: ``rank`` waits in ``group`` for ``waits_for``, ranks that
    are stuck elsewhere first (behind a finding, or in a cycle).  ``group`` is the report's
    own account of a group: the hang reader's ``PlanGroup`` (view, dim, members, coordinate),
    check_spmd's ``(dim, members)`` (``members`` empty for a split over the world).

    >>> stuck = StuckRank(2, ("dp", (0, 2)), (0,))
    >>> stuck.rank, stuck.group, stuck.waits_for
    (2, ('dp', (0, 2)), (0,))

    For one release it also unpacks, with a ``DeprecationWarning``, as the tuple each report
    held before it: ``(rank, group, waits_for)``, a ``group`` that is a tuple (check_spmd's
    ``(dim, members)``) spread in place: ``(rank, dim, members, waits_for)``.
    """

    rank: int = attrs.field()
    group: G = attrs.field()
    waits_for: tuple[int, ...] = attrs.field()

    @rank.validator
    def _check_rank(self, _: object, rank: object) -> None:
        if type(rank) is not int or not 0 <= rank < MAX_UNIVERSE:
            raise InvalidRanksError(f"a StuckRank's rank must be an int >= 0 below 2**63, got "
                                    f"{show(rank)}")

    @waits_for.validator
    def _check_waits_for(self, _: object, ranks: object) -> None:
        if type(ranks) is not tuple or not all(
                type(r) is int and 0 <= r < MAX_UNIVERSE for r in ranks):
            raise InvalidRanksError("a StuckRank's waits_for must be a tuple of ranks (ints "
                                    f">= 0 below 2**63), got {show(ranks)}")

    def __iter__(self) -> Iterator[Any]:
        """The tuple the reports held before (deprecated: read the fields by name)."""
        warnings.warn("unpacking a mesh.StuckRank as a tuple is deprecated and goes in the next "
                      "release: read its fields rank, group and waits_for",
                      DeprecationWarning, stacklevel=2)
        where: tuple[Any, ...] = self.group if isinstance(self.group, tuple) else (self.group,)
        return iter((self.rank, *where, self.waits_for))

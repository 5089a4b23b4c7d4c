"""A barrier round's vocabulary (see :mod:`._rendezvous`): its decision values, its time
constants, one member's attempt, and torch's name for the group a round passed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["GO", "GRACE_S", "MAX_TICKETS", "QUIT", "SHOWN", "SLACK_S", "STOPPED", "TICKET",
           "Attempt", "decision", "torch_name"]

GO = 1 << 40  # d/G/k after a commit
QUIT = 2 << 40  # ... or QUIT + the closer's rank after a close
SLACK_S = 1.0  # how long past a busy peer's deadline it may take to arrive here
GRACE_S = 0.05  # a member that waits longer than this writes its record
SHOWN = 64  # ranks written into a record or a reason, at most
STOPPED = -1  # a round committed by a member that stopped before waking the others
TICKET = 1 << 20
"""What one ticket adds to the ticket counter: the counter holds tickets x TICKET.  The
store's ``add`` reads a value that only starts with digits ("1junk", "1.5", " 1") as that
number and overwrites it with a clean count; counted in steps of TICKET, such a plant (or
any count the barrier did not write, but a multiple of TICKET) leaves a value that is no
multiple of TICKET, which the ticket's taker refuses (:func:`~._records.read_tickets`),
so a plant cannot shift which tickets make a round."""
MAX_TICKETS = 1 << 33  # tickets x TICKET stays within _records.MAX_COUNT (2**53)


def torch_name(name: str, round_: int) -> str:
    """Torch's name for the group a barrier's round ``round_`` passed: ``name`` for the first
    round, then a fresh one per round (so no creation meets an earlier attempt's keys).

    >>> torch_name("ml-ab", 0), torch_name("ml-ab", 3)
    ('ml-ab', 'ml-ab.3')
    """
    return name if round_ == 0 else f"{name}.{round_}"


@attrs.define
class Attempt:
    """One member's attempt at one barrier (what the barrier's steps and the closer's
    diagnosis share)."""

    name: str
    size: int
    members: Sequence[int]
    desc: str
    dim: str
    shown: tuple[int, ...]  # the group's ranks for messages (this rank's group)
    start: float
    deadline: float
    cap: float
    round: int = -1
    late: bool = False  # the others closed a round before this rank came
    tickets: list[int] = attrs.Factory(list)  # filled by the ticket call (Rendezvous._take)
    # the closer's Reasons of a failure seen, not decided (Any: _records imports this module)
    why: Any = None
    counter: str = ""  # the ticket counter's store key (Rendezvous.meet spells it once)
    # once the round went ahead: until when this rank's record says it is inside the creation
    inside: float | None = None

    @property
    def ticket(self) -> int:
        """This attempt's ticket (``tickets`` holds what the counter read after its add)."""
        return self.tickets[-1] // TICKET

    @property
    def last(self) -> int:
        """The last ticket of this attempt's round."""
        return (self.round + 1) * self.size


def decision(value: int) -> tuple[bool, int | None]:
    """(whether a decision value is go, the closer's rank if it is quit)."""
    return (True, None) if value == GO else (False, value - QUIT if value >= QUIT else None)



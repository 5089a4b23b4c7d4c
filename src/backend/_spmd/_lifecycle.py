"""The lifecycle model (class 4): what a rank does with its groups after a failure.

Each rank's events are read in order, with what the rank knows: the ranks it was told are
lost (``retire``/``rebind``, the ranks a ``shrink_group`` excludes), the groups it ended
(ended by a rebind, destroyed, aborted), the revokes it started.  A call breaks the
contract when:

- it **destroys** (``destroy_process_group``) an NCCL group holding a lost rank or one it
  shrank: NCCL's destroy finalizes with every peer and waits for the dead one (pytorch
  #194775; the excluded rank of a shrink must destroy too, pytorch #180611); abort it;
- it calls **shrink_group from outside**: a rank the shrink excludes takes no part in it
  (torch raises; the others wait for it);
- it **uses a group that was ended** (a collective on a group a rebind retired, or one it
  destroyed or aborted), or a group holding a lost rank (it waits for a dead peer);
- it **does not await a revoke** (``ncclCommRevoke`` may return while it runs: the next
  shrink, destroy or collective on that group must wait for it; pytorch #197465, ROCm
  rccl's revoke tests), or issues a collective on a revoked group.

A call that breaks the contract is reported here and does not wait in the replay (its
hang is this finding, not a cascade).  A shrink is a meeting of the members that stay,
who must agree on the ranks excluded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

from mesh._core import FindingKind

from ._events import Abort, Call, Destroy, Event, Retire, Revoke, Shrink, WaitRevoke
from ._keys import Key, ShrinkChannel, ShrinkKey
from ._matcher import Meet, Step
from ._report import Finding

__all__ = ["Lifecycle"]


class Lifecycle:
    """One rank's lifecycle state, read event by event."""

    def __init__(self, rank: int, nccl: bool, meets: dict[Key, Meet]) -> None:
        self.rank = rank
        self.nccl = nccl
        self.meets = meets
        self.lost: set[int] = set()
        self.ended: dict[Hashable, str] = {}
        self.revoking: dict[Hashable, str] = {}
        self.revoked: dict[Hashable, str] = {}
        self.shrunk: dict[Hashable, str] = {}
        self.seq: dict[Hashable, int] = defaultdict(int)

    def see(self, event: Event, index: int, found: list[Finding]) -> Step | None:
        """Note a lifecycle event; a shrink's step (None for the local ones)."""
        if isinstance(event, Retire):
            self.lost |= event.lost
            for g in event.ended:
                self.ended.setdefault(g.key, f"ended by the rebind at {event.line}")
        elif isinstance(event, Destroy):
            self._destroy(event, found)
        elif isinstance(event, Abort):
            self.ended[event.group.key] = f"aborted at {event.line}"
            self.revoking.pop(event.group.key, None)
        elif isinstance(event, Revoke):
            self.revoked[event.group.key] = event.line
            if not event.wait:
                self.revoking[event.group.key] = event.line
        elif isinstance(event, WaitRevoke):
            self.revoking.pop(event.group.key, None)
        elif isinstance(event, Shrink):
            return self._shrink(event, index, found)
        return None

    def _finding(self, text: str, pattern: str) -> Finding:
        return Finding(FindingKind.LIFECYCLE, f"rank {self.rank} {text}", pattern, (self.rank,))

    def _destroy(self, event: Destroy, found: list[Finding]) -> None:
        g = event.group
        if g.key in self.revoking:
            found.append(self._finding(
                f"destroys {g.describe()} ({event.line}) before the revoke it started at "
                f"{self.revoking[g.key]} has ended: wait for the revoke first",
                f"destroy before revoke {event.line}"))
        dead = sorted(r for r in g.members if r in self.lost) if self.lost else []
        if self.nccl and (dead or g.key in self.shrunk) and g.key not in self.ended:
            why = (f"it holds lost rank{'s' if len(dead) > 1 else ''} "
                   f"{', '.join(map(str, dead[:8]))}" if dead else
                   f"it was shrunk at {self.shrunk[g.key]} (its excluded ranks must destroy too)")
            found.append(self._finding(
                f"destroys {g.describe()} ({event.line}) after a failure: {why}, and NCCL's "
                "destroy waits for every peer, so it hangs; abort it "
                "(torch.distributed._abort_process_group; the backend's rebind aborts what "
                "it ends)", f"destroy after failure {event.line}"))
        self.ended[g.key] = f"destroyed at {event.line}"

    def _shrink(self, event: Shrink, index: int, found: list[Finding]) -> Step:
        g = event.group
        if self.rank in event.exclude:
            found.append(self._finding(
                f"calls shrink_group on {g.describe()} ({event.line}) though the shrink "
                f"excludes it: only the ranks that stay take part (torch raises on an "
                "excluded rank; the others would wait for it)",
                f"shrink from outside {event.line}"))
            return Step((), (), True, index)
        if g.key in self.revoking:
            found.append(self._finding(
                f"shrinks {g.describe()} ({event.line}) before the revoke it started at "
                f"{self.revoking[g.key]} has ended: wait for the revoke first (a shrink "
                "racing a revoke fails, rccl's revoke tests)",
                f"shrink before revoke {event.line}"))
        if g.key in self.ended:
            found.append(self._finding(
                f"shrinks {g.describe()} ({event.line}), which was {self.ended[g.key]}",
                f"shrink of ended {event.line}"))
            return Step((), (), True, index)
        self.lost |= set(event.exclude)
        self.shrunk[g.key] = event.line
        n = self.seq[g.key]
        self.seq[g.key] += 1
        key = ShrinkKey(g.key, n)
        if key not in self.meets:
            stay = tuple(r for r in g.members if r not in event.exclude)
            self.meets[key] = Meet(stay, ShrinkChannel(g.key), event)
        return Step((key,), (event.exclude,), True, index)

    def breaks(self, call: Call, found: list[Finding]) -> bool:
        """Whether ``call`` breaks the contract (reported; it then does not wait)."""
        g = call.group
        if not (self.ended or self.revoked or self.lost):
            return False  # nothing has ended: the common case, checked without words
        what = f"calls {call.op} on {g.describe()} ({call.line})"
        if g.key in self.ended:
            found.append(self._finding(f"{what}, which was {self.ended[g.key]}: ask the mesh "
                                       "rebind() returned for its groups",
                                       f"use after end {call.op} {call.line}"))
            return True
        if g.key in self.revoked:
            late = g.key in self.revoking
            found.append(self._finding(
                f"{what} after revoking it at {self.revoked[g.key]}"
                + (" (the revoke not even awaited)" if late else "")
                + ": a revoked communicator takes no new work; shrink it or make a new group",
                f"use after revoke {call.op} {call.line}"))
            return True
        if self.lost and not g.world:
            dead = [r for r in g.members if r in self.lost]
            if dead:
                found.append(self._finding(
                    f"{what}, which holds lost rank{'s' if len(dead) > 1 else ''} "
                    f"{', '.join(map(str, dead[:8]))}: it waits for a dead peer (rebind and "
                    "use the groups of the mesh it returns)",
                    f"use with lost {call.op} {call.line}"))
                return True
        return False

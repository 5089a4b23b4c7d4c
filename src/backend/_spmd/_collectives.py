"""The collective matcher: calls on groups as meetings of the replay, and what does not match.

Every member of a communicator must issue the same sequence of collectives on it: the n-th
call of each member on a group is one meeting (key ``("call", group, n)``), whose
signature is the op, the shapes, the dtype, the reduce op and the root (``Call.
signature``).  Point-to-point calls pair up per direction: the n-th send from ``a`` to
``b`` on a group meets the n-th recv at ``b`` from ``a`` on it (same shape and dtype).
A blocking call waits for its meeting (a Gloo collective, an NCCL kernel in its stream:
issuing collectives on shared groups in orders that wait on each other deadlocks both);
``isend``/``irecv`` and batched p2p ops wait only where the program waits on their work.
``all_to_all`` with split sizes must also pair its sizes: member ``i``'s input split for
``j`` is member ``j``'s output split for ``i``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

from ._events import Call, Trace, WaitWork
from ._matcher import Meet, Mismatch, Outcome, Step
from ._report import Finding, verb, who

__all__ = ["CallLowering", "call_findings", "wait_words"]


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class CallLowering:
    """Turns one rank's calls into steps, adding their keys to ``meets``."""

    def __init__(self, rank: int, meets: dict[Hashable, Meet],
                 to_all: list[tuple[Hashable, int, Call]]) -> None:
        self.rank = rank
        self.meets = meets
        self.to_all = to_all
        self.seq: dict[Hashable, int] = defaultdict(int)
        self.keys: dict[int, Hashable] = {}  # event index -> its key (for waits)

    def step(self, event: Call | WaitWork, index: int) -> Step:
        if isinstance(event, WaitWork):
            keys = tuple(self.keys[i] for i in event.calls if i in self.keys)
            return Step(keys, (None,) * len(keys), True, index)
        group = event.group
        if event.p2p:
            assert event.peer is not None
            peer = group.members[event.peer]
            src, dst = (self.rank, peer) if event.op == "send" else (peer, self.rank)
            channel: Hashable = ("p2p", group.key, src, dst)
            n = self.seq[(channel, event.op)]
            self.seq[(channel, event.op)] += 1
            key: Hashable = ("p2p", group.key, src, dst, n)
            participants: Sequence[int] = (min(src, dst), max(src, dst))
        else:
            channel = ("call", group.key)
            n = self.seq[channel]
            self.seq[channel] += 1
            key = ("call", group.key, n)
            participants = group.members
            if event.op == "all_to_all" and event.splits is not None:
                self.to_all.append((key, self.rank, event))
        if key not in self.meets:
            self.meets[key] = Meet(participants, channel, event)
        self.keys[index] = key
        return Step((key,), (event.signature(),), not event.post, index)


def call_findings(outcome: Outcome, meets: dict[Hashable, Meet], traces: Sequence[Trace],
                  to_all: list[tuple[Hashable, int, Call]], world: int) -> list[Finding]:
    """Desyncs, calls some members never issue, and all_to_all sizes that do not pair."""
    found = [_desync(m, meets, traces, world) for m in outcome.mismatches
             if isinstance(m.channel, tuple) and m.channel[0] in ("call", "p2p")]
    for key, absent in outcome.missing.items():
        info = meets[key].info
        if not isinstance(info, Call):
            continue
        gone = tuple(sorted(absent))
        offered = tuple(sorted(outcome.open.get(key, ())))
        n = key[-1] + 1  # type: ignore[index]
        if info.p2p:
            src, dst = key[2], key[3]  # type: ignore[index]
            if info.op == "send":
                text = (f"rank {src}'s {_nth(n)} send to rank {dst} on {info.group.describe()} "
                        f"({info.describe()}, {info.line}) has no matching recv at rank {dst}: "
                        "the sender waits for it")
            else:
                text = (f"rank {dst}'s {_nth(n)} recv from rank {src} on "
                        f"{info.group.describe()} ({info.describe()}, {info.line}) has no "
                        f"matching send from rank {src}: the receiver waits for it")
            found.append(Finding("unmatched", text, f"p2p {info.op} {info.line}", gone))
            continue
        found.append(Finding(
            "unmatched",
            f"{info.group.describe()}: {who(gone, world)} never "
            f"{verb(gone, 'issues', 'issue')} its {_nth(n)} call ({info.describe()}, "
            f"{info.line}), which {who(offered, world)} {verb(offered, 'issues', 'issue')}: "
            f"{verb(offered, 'it waits', 'they wait')} ({_fewer(traces, gone, info)})",
            f"never {'pg ' if _torch_made(info) else ''}{info.group.label} {info.op} "
            f"{info.line}", gone))
    found += _splits(to_all, world)
    return found


def _torch_made(call: Call) -> bool:
    key = call.group.key
    return isinstance(key, tuple) and key[0] == "pg"


def _fewer(traces: Sequence[Trace], gone: tuple[int, ...], info: Call) -> str:
    rank = gone[0]
    made = sum(isinstance(e, Call) and not e.p2p and e.group.key == info.group.key
               for e in traces[rank].events)
    ended = "its program ended" if traces[rank].error is None else "its program raised"
    return f"rank {rank} issues {made} call{'s' if made != 1 else ''} on it; {ended}"


def _desync(wrong: Mismatch, meets: dict[Hashable, Meet], traces: Sequence[Trace],
            world: int) -> Finding:
    sides: dict[Hashable, list[tuple[int, Call]]] = defaultdict(list)
    for rank, sig, index in wrong.arrivals:
        call = traces[rank].events[index]
        assert isinstance(call, Call)
        sides[sig].append((rank, call))
    first = meets[wrong.key].info
    assert isinstance(first, Call)
    n = wrong.key[-1] + 1  # type: ignore[index]
    ordered = sorted(sides.values(), key=lambda side: min(r for r, _ in side))
    for side in ordered:
        side.sort(key=lambda rc: rc[0])
    words = [f"{who(tuple(r for r, _ in side), world)} {side[0][1].describe()} "
             f"({side[0][1].line})" for side in ordered]
    odd = tuple(sorted(r for r, _ in min(sides.values(), key=len)))
    pattern = "desync " + " | ".join(sorted(
        f"{c.op} {c.shapes} {c.dtype} {c.reduce_op} {c.line}" for c in
        (side[0][1] for side in sides.values())))
    if first.p2p:
        src, dst = wrong.key[2], wrong.key[3]  # type: ignore[index]
        text = (f"the {_nth(n)} send from rank {src} to rank {dst} on {first.group.describe()} "
                f"does not match its recv: " + "; ".join(words))
    else:
        text = (f"{first.group.describe()} desyncs at its {_nth(n)} call: " + "; ".join(words)
                + " (each side's first differing call)")
    return Finding("desync", text, pattern, odd)


def _splits(to_all: list[tuple[Hashable, int, Call]], world: int) -> list[Finding]:
    """Member i's input split for j must be member j's output split for i."""
    by_key: dict[Hashable, dict[int, Call]] = defaultdict(dict)
    for key, rank, call in to_all:
        by_key[key][rank] = call
    found = []
    for calls in by_key.values():
        some = next(iter(calls.values()))
        members = some.group.members
        if len(calls) != len(members):
            continue  # a member never issues it: reported as unmatched
        place = {r: i for i, r in enumerate(members)}
        for r, call in calls.items():
            i = place[r]
            for j, peer in enumerate(members):
                sent = call.splits[0][j]  # type: ignore[index]
                got = calls[peer].splits[1][i]  # type: ignore[index]
                if sent != got:
                    found.append(Finding(
                        "splits",
                        f"all_to_all on {some.group.describe()}: rank {r} sends {sent} rows to "
                        f"rank {peer} ({call.line}), which expects {got} from it "
                        f"({calls[peer].line}): the sizes must pair up",
                        f"splits {some.group.label} {call.line}", (r, peer)))
                    break
            else:
                continue
            break
    return found


def wait_words(step: Step, trace: Trace) -> str | None:
    """What a rank stuck at ``step`` waits in, in words (None for a creation)."""
    event = trace.events[step.event]
    if isinstance(event, WaitWork):
        waited = [trace.events[i] for i in event.calls]
        calls = [c for c in waited if isinstance(c, Call)]
        if calls:
            return (f"in a wait ({event.line}) for {calls[0].describe()} on "
                    f"{calls[0].group.describe()} ({calls[0].line})"
                    + (f" and {len(calls) - 1} more" if len(calls) > 1 else ""))
        return None
    if isinstance(event, Call):
        n = step.keys[0][-1] + 1 if step.keys else 0  # type: ignore[index]
        return (f"in {event.describe()} on {event.group.describe()} (its {_nth(n)} "
                f"{'p2p call' if event.p2p else 'call'} there, {event.line})")
    return None

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

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

from mesh._core import FindingKind, never_issued, nth

from ._events import Call, TorchGroupKey, Trace, WaitWork
from ._keys import CallChannel, CallKey, Key, P2PChannel, P2PKey
from ._matcher import Meet, Mismatch, Outcome, Step
from ._report import Finding, who

__all__ = ["CallLowering", "call_findings", "wait_words"]


class CallLowering:
    """Turns one rank's calls into steps, adding their keys to ``meets``.

    ``shared`` (one dict for every rank of a check) keeps each call's last step by the
    call's id: members of a group that derived the same call (one value, ``_classes``) at
    the same place of their runs offer the same step, so it is made once (time and memory
    of the replay's input; the calls must outlive the dict)."""

    def __init__(self, rank: int, meets: dict[Key, Meet],
                 to_all: list[tuple[Key, int, Call]],
                 shared: dict[int, Step] | None = None) -> None:
        self.rank = rank
        self.meets = meets
        self.to_all = to_all
        self.shared: dict[int, Step] = {} if shared is None else shared
        self.seq: dict[Hashable, int] = defaultdict(int)  # p2p: (channel, op) -> sent
        self.calls: dict[Hashable, int] = {}  # group key -> collectives issued on it
        self.keys: dict[int, Key] = {}  # event index -> its key (for waits)

    def step(self, event: Call | WaitWork, index: int) -> Step:
        if isinstance(event, WaitWork):
            keys = tuple(self.keys[i] for i in event.calls if i in self.keys)
            return Step(keys, (None,) * len(keys), True, index)
        if event.p2p:
            key, meet = self._p2p(event)
            if key not in self.meets:
                self.meets[key] = meet
            self.keys[index] = key
            return Step((key,), (event.signature(),), not event.post, index)
        return self.collective(event, index)

    def _p2p(self, event: Call) -> tuple[Key, Meet]:
        """The n-th send from ``src`` to ``dst`` meets the n-th recv at ``dst`` from ``src``."""
        assert event.peer is not None, "a recorded send or recv names its peer"
        peer = event.group.members[event.peer]
        src, dst = (self.rank, peer) if event.op == "send" else (peer, self.rank)
        channel = P2PChannel(event.group.key, src, dst)
        n = self.seq[(channel, event.op)]
        self.seq[(channel, event.op)] += 1
        return P2PKey(event.group.key, src, dst, n), Meet((min(src, dst), max(src, dst)),
                                                          channel, event)

    def collective(self, event: Call, index: int) -> Step:
        """The n-th collective on the group is its meeting ``CallKey(group, n)``."""
        group = event.group.key
        n = self.calls.get(group, 0)
        self.calls[group] = n + 1
        step = self.shared.get(id(event))
        if step is None or step.event != index or step.keys[0].n != n:
            made = CallKey(group, n)
            if made not in self.meets:
                self.meets[made] = Meet(event.group.members, CallChannel(group), event)
            step = self.shared[id(event)] = Step((made,), (event.signature(),),
                                                 not event.post, index)
        key = step.keys[0]
        if event.op == "all_to_all" and event.splits is not None:
            self.to_all.append((key, self.rank, event))
        self.keys[index] = key
        return step


def call_findings(outcome: Outcome, meets: dict[Key, Meet], traces: Sequence[Trace],
                  to_all: list[tuple[Key, int, Call]], world: int) -> list[Finding]:
    """Desyncs, calls some members never issue, and all_to_all sizes that do not pair."""
    found = [_desync(m, meets, traces, world) for m in outcome.mismatches
             if isinstance(m.channel, (CallChannel, P2PChannel))]
    for key, absent in outcome.missing.items():
        info = meets[key].info
        if not isinstance(info, Call):
            continue
        gone = tuple(sorted(absent))
        if isinstance(key, P2PKey):
            found.append(_unpaired(key, info, gone))
        elif isinstance(key, CallKey):
            offered = tuple(sorted(outcome.open.get(key, ())))
            found.append(_never(key, info, gone, offered, traces, world))
    found += _splits(to_all, world)
    return found


def _unpaired(key: P2PKey, info: Call, gone: tuple[int, ...]) -> Finding:
    """A send without its recv, or a recv without its send."""
    src, dst, n = key.src, key.dst, key.n + 1
    if info.op == "send":
        text = (f"rank {src}'s {nth(n)} send to rank {dst} on {info.group.describe()} "
                f"({info.describe()}, {info.line}) has no matching recv at rank {dst}: "
                "the sender waits for it")
    else:
        text = (f"rank {dst}'s {nth(n)} recv from rank {src} on "
                f"{info.group.describe()} ({info.describe()}, {info.line}) has no "
                f"matching send from rank {src}: the receiver waits for it")
    return Finding(FindingKind.UNMATCHED, text, f"p2p {info.op} {info.line}", gone)


def _never(key: CallKey, info: Call, gone: tuple[int, ...], offered: tuple[int, ...],
           traces: Sequence[Trace], world: int) -> Finding:
    """A collective some members never issue."""
    return Finding(
        FindingKind.UNMATCHED,
        never_issued(info.group.describe(), gone, who(gone, world), key.n + 1,
                     f"{info.describe()}, {info.line}", offered, who(offered, world),
                     _fewer(traces, gone, info)),
        f"never {'pg ' if _torch_made(info) else ''}{info.group.label} {info.op} "
        f"{info.line}", gone)


def _torch_made(call: Call) -> bool:
    return isinstance(call.group.key, TorchGroupKey)


def _fewer(traces: Sequence[Trace], gone: tuple[int, ...], info: Call) -> str:
    rank = gone[0]
    made = sum(isinstance(e, Call) and not e.p2p and e.group.key == info.group.key
               for e in traces[rank].events)
    ended = "its program ended" if traces[rank].error is None else "its program raised"
    return f"rank {rank} issues {made} call{'s' if made != 1 else ''} on it; {ended}"


def _desync(wrong: Mismatch, meets: dict[Key, Meet], traces: Sequence[Trace],
            world: int) -> Finding:
    sides: dict[Hashable, list[tuple[int, Call]]] = defaultdict(list)
    for rank, sig, index in wrong.arrivals:
        sides[sig].append((rank, _call(traces[rank], index)))
    first: Call = meets[wrong.key].info
    n = wrong.key.n + 1
    ordered = sorted(sides.values(), key=lambda side: min(r for r, _ in side))
    for side in ordered:
        side.sort(key=lambda rc: rc[0])
    words = [f"{who(tuple(r for r, _ in side), world)} {side[0][1].describe()} "
             f"({side[0][1].line})" for side in ordered]
    peers = _peer_signatures(wrong, meets)
    odd = tuple(sorted(r for r, _ in min(sides.values(), key=lambda side: (
        len(side), peers[side[0][1].signature()], min(r for r, _ in side)))))
    pattern = "desync " + " | ".join(sorted(
        f"{c.op} {c.shapes} {c.dtype} {c.reduce_op} {c.line}" for c in
        (side[0][1] for side in sides.values())))
    if isinstance(wrong.key, P2PKey):
        src, dst = wrong.key.src, wrong.key.dst
        text = (f"the {nth(n)} send from rank {src} to rank {dst} on {first.group.describe()} "
                f"does not match its recv: " + "; ".join(words))
    else:
        text = (f"{first.group.describe()} desyncs at its {nth(n)} call: " + "; ".join(words)
                + " (each side's first differing call)")
    return Finding(FindingKind.DESYNC, text, pattern, odd)


def _peer_signatures(wrong: Mismatch, meets: dict[Key, Meet]) -> Counter[Hashable]:
    """For a desync of two equal sides (a 2-member group), who is odd: how often each call
    signature was offered first at the same call number on the other groups along the same
    dim (the hang reader asks the same of the dumps)."""
    if not isinstance(wrong.key, CallKey):
        return Counter()
    first = meets[wrong.key].info
    return Counter(m.info.signature() for k, m in meets.items()
                   if isinstance(k, CallKey) and k.n == wrong.key.n and k != wrong.key
                   and isinstance(m.info, Call) and m.info.group.label == first.group.label)


def _call(trace: Trace, index: int) -> Call:
    """The call at ``index`` of ``trace`` (what a call key's offer points at)."""
    call = trace.events[index]
    if not isinstance(call, Call):
        raise TypeError(f"event {index} of rank {trace.rank} is {call!r}, not a call")
    return call


def _splits(to_all: list[tuple[Key, int, Call]], world: int) -> list[Finding]:
    """Member i's input split for j must be member j's output split for i: the first pair
    that does not, per all_to_all."""
    by_key: dict[Key, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = defaultdict(dict)
    first: dict[Key, dict[int, Call]] = defaultdict(dict)
    for key, rank, call in to_all:
        if call.splits is not None:
            by_key[key][rank] = call.splits
            first[key][rank] = call
    found = []
    for key, splits in by_key.items():
        calls = first[key]
        group = next(iter(calls.values())).group
        if len(splits) != len(group.members):
            continue  # a member never issues it: reported as unmatched
        pair = _unpaired_sizes(splits, group.members)
        if pair is not None:
            r, peer, sent, got = pair
            found.append(Finding(
                FindingKind.SPLITS,
                f"all_to_all on {group.describe()}: rank {r} sends {sent} rows to "
                f"rank {peer} ({calls[r].line}), which expects {got} from it "
                f"({calls[peer].line}): the sizes must pair up",
                f"splits {group.label} {calls[r].line}", (r, peer)))
    return found


def _unpaired_sizes(splits: dict[int, tuple[tuple[int, ...], tuple[int, ...]]],
                    members: Sequence[int]) -> tuple[int, int, int, int] | None:
    """The first ``(rank, peer, rows sent, rows expected)`` whose sizes do not pair."""
    place = {r: i for i, r in enumerate(members)}
    for r, (sends, _) in splits.items():
        for j, peer in enumerate(members):
            got = splits[peer][1][place[r]]
            if sends[j] != got:
                return r, peer, sends[j], got
    return None


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
        n = step.keys[0].n + 1 if step.keys else 0
        return (f"in {event.describe()} on {event.group.describe()} (its {nth(n)} "
                f"{'p2p call' if event.p2p else 'call'} there, {event.line})")
    return None

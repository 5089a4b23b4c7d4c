"""What :func:`~backend.check_spmd` found, as data (:class:`SpmdReport`, :class:`Finding`) and
as a report that stays short at any world size: ranks are summarized by pattern ("the odd
ranks ..."), and findings alike but for their group are written once, with a count."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import attrs

from layout import show
from mesh._core import FindingKind, RankStyle, StuckRank, finding_kind, ranks_text

from .._core import BackendConfigError

__all__ = ["FINDING_KINDS", "REPORT_KINDS", "TORCH_HINT", "Finding", "SpmdReport", "group_words",
           "who"]

Members = tuple[int, ...]

FINDING_KINDS: Mapping[str, str] = MappingProxyType({k.value: k.words for k in FindingKind})
"""Every :attr:`Finding.kind`, with what it means (read-only; each a
:class:`mesh._core.FindingKind`'s word and words)."""

REPORT_KINDS: Mapping[str, str] = MappingProxyType({
    "never_created": "a group some member never asks for (SpmdReport.never_created)",
    "deadlock": "ranks whose requests or calls wait on each other (SpmdReport.waiting)",
    "blocked": "ranks stuck behind others (SpmdReport.blocked)",
    "error": "a program that raised (SpmdReport.errors)",
})
"""The kinds :meth:`SpmdReport.kinds` names for the report's problems that are not
:class:`Finding` values, with what they mean (read-only)."""

TORCH_HINT = ("the program calls torch.distributed itself, which the torch-free recorder does "
              "not run: check it with check_spmd(..., torch=True)")
"""What the message of an error raised inside ``torch.distributed`` under the torch-free
recorder ends with (``_run``)."""

_MOST = 8  # entries of one kind written out in a report
_CALLS = frozenset(k.value for k in (FindingKind.DESYNC, FindingKind.UNMATCHED, FindingKind.SPLITS))
"""The kinds of findings about calls (the remedies for calls answer them)."""


@attrs.frozen
class Finding:
    """One problem ``check_spmd`` found beyond the creation order.

    ``kind`` is one of :data:`FINDING_KINDS`; ``text`` says it for one group (naming the
    ranks, the calls and their source lines); ``pattern`` is the same finding with the
    group left out, so that findings alike but for their group are written once;
    ``ranks`` are the ranks at fault (summarized by pattern in the report).
    """

    kind: str = attrs.field(converter=finding_kind)
    text: str = attrs.field()
    pattern: str = attrs.field()
    ranks: Members = attrs.field(default=())

    @kind.validator
    def _check_kind(self, _: object, kind: object) -> None:
        if not (isinstance(kind, str) and kind in FINDING_KINDS):
            raise BackendConfigError(f"a Finding's kind must be one of "
                                     f"{', '.join(FINDING_KINDS)}, got {show(kind)}")

    @text.validator
    @pattern.validator
    def _check_words(self, attribute: attrs.Attribute[str], words: object) -> None:
        if not isinstance(words, str):
            raise BackendConfigError(f"a Finding's {attribute.name} must be a str, got "
                                     f"{show(words)}")

    @ranks.validator
    def _check_ranks(self, _: object, ranks: object) -> None:
        if not (type(ranks) is tuple and all(type(r) is int and r >= 0 for r in ranks)):
            raise BackendConfigError(f"a Finding's ranks must be a tuple of ranks (ints >= 0), "
                                     f"got {show(ranks)}")


@attrs.frozen
class SpmdReport:
    """What :func:`check_spmd` found; ``ok`` is True when every group can be created, every
    call is matched by its peers, and no model found a problem.

    ``never_created``: ``(dim, members, ranks that never ask)`` per incomplete group;
    ``waiting``: sets of ranks whose orders wait on each other, each rank with the group
    it is stuck at ``(rank, dim, members)`` (a creation, or a call on that group);
    ``blocked``: the other stuck ranks, stuck behind the above, each a
    :class:`~mesh.StuckRank` whose group is ``(dim, members)``; ``errors``: ``(rank, group
    requests before, message)`` per program that raised; ``findings``: every other problem
    (:class:`Finding`: calls that do not match, creation and lifecycle contracts,
    topology); ``calls``: how many collective and p2p calls were recorded; ``ran``: on how
    many ranks the program ran (fewer than the world when ``classes=`` let the check derive
    the others); ``notes``: how the check ran.  ``members`` is ``()`` for a split over the
    whole world (NCCL).  ``str()`` reads as a report, summarized by pattern ("the even ranks
    ...") so that it stays short at any world size.
    """

    world_size: int
    groups: int
    never_created: tuple[tuple[str, Members, Members], ...]
    waiting: tuple[tuple[tuple[int, str, Members], ...], ...]
    blocked: tuple[StuckRank[tuple[str, Members]], ...]
    errors: tuple[tuple[int, int, str], ...]
    findings: tuple[Finding, ...] = ()
    calls: int = 0
    ran: int | None = None
    notes: tuple[str, ...] = ()
    wait_words: tuple[tuple[int, str], ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every group can be created, every call matches, no program raised and no
        model found a problem."""
        return not (self.never_created or self.waiting or self.blocked or self.errors
                    or self.findings)

    def kinds(self) -> set[str]:
        """The kinds of every problem: the findings' (``"desync"``, ``"cache_hit"``, ...,
        :data:`FINDING_KINDS`) and the report's others (``"never_created"``, ``"deadlock"``,
        ``"blocked"``, ``"error"``); empty exactly when the report is ok."""
        found = {f.kind for f in self.findings}
        for kind, present in (("never_created", self.never_created), ("deadlock", self.waiting),
                              ("blocked", self.blocked), ("error", self.errors)):
            if present:
                found.add(kind)
        return found

    def __str__(self) -> str:
        if self.calls:
            fine = "every group can be created and every call matches"
            head = (f"check_spmd over {self.world_size} ranks: {self.groups} groups asked for, "
                    f"{self.calls} calls on them; ")
        else:
            fine = "every one can be created"
            head = f"check_spmd over {self.world_size} ranks: {self.groups} groups asked for; "
        lines = [head + (fine if self.ok else "problems found")]
        lines += [f"({note})" for note in self.notes]
        for dim, members, absent in self.never_created[:_MOST]:
            lines.append(f"- {group_words(dim, members)} is never asked for by "
                         f"{who(absent, self.world_size)} (a skipped dim: its other members "
                         "would wait until their timeout)")
        lines += _more(len(self.never_created), "groups some member never asks for")
        words = dict(self.wait_words)
        lines += [self._cycle(c, words) for c in self.waiting[:_MOST]]
        lines += _more(len(self.waiting), "sets of ranks waiting on each other")
        if self.blocked:
            shown = "; ".join(f"rank {b.rank} {words.get(b.rank, 'at ' + group_words(*b.group))} "
                              f"(waiting for {ranks_text(b.waits_for, RankStyle.SPMD)})"
                              for b in self.blocked[:_MOST])
            more = f" and {len(self.blocked) - _MOST} more" if len(self.blocked) > _MOST else ""
            lines.append(f"- stuck behind those: {shown}{more}")
        lines += self._findings()
        lines += self._errors()
        lines += self._remedies()
        return "\n".join(lines)

    def _findings(self) -> list[str]:
        alike: dict[tuple[str, str], list[Finding]] = defaultdict(list)
        for f in self.findings:
            alike[(f.kind, f.pattern)].append(f)
        lines = []
        for (_kind, _), found in list(alike.items())[:2 * _MOST]:
            found.sort(key=lambda f: f.ranks)
            line = f"- {found[0].text}"
            if len(found) > 1:
                ranks = tuple(sorted({r for f in found for r in f.ranks}))
                line += (f"; and {len(found) - 1} more alike"
                         + (f" (in all: {who(ranks, self.world_size)})" if ranks else ""))
            lines.append(line)
        lines += _more(len(alike), "kinds of findings", 2 * _MOST)
        return lines

    def _errors(self) -> list[str]:
        same: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
        for rank, call, message in self.errors:  # alike but for the rank's own number
            same[(call, re.sub(rf"\brank {rank}\b", "rank #", message))].append((rank, message))
        lines = []
        for (call, _), raised in list(same.items())[:_MOST]:
            ranks = tuple(r for r, _ in raised)
            whose = (f"rank {ranks[0]}'s program" if len(ranks) == 1 else
                     f"the programs of {who(ranks, self.world_size)}")
            shown = "" if len(ranks) == 1 else f" (rank {ranks[0]}'s words; the others' alike)"
            lines.append(f"- {whose} raised at group request {call}: {raised[0][1]}{shown}")
        lines += _more(len(same), "distinct errors")
        return lines

    def _remedies(self) -> list[str]:
        if self.ok:
            return []
        out = []
        words = dict(self.wait_words)
        stuck = [r for c in self.waiting for r, _, _ in c] + [b.rank for b in self.blocked]
        torch_errors = [e for e in self.errors if e[2].endswith(TORCH_HINT)]
        if torch_errors:
            out.append("Remedies: a program that calls torch.distributed itself runs on "
                       "torch's fake process group only with check_spmd(..., torch=True).")
        creation = bool(self.never_created or len(self.errors) > len(torch_errors)) or \
            any(r not in words for r in stuck)
        if creation:
            out.append("Remedies: ask for the same groups in the same order on every rank "
                       "(mesh.materialize() creates a mesh's groups in dim order); guard "
                       "requests on views a rank is not in with mesh.get_coordinate() is not "
                       "None.")
        if _CALLS & self.kinds() or any(r in words for r in stuck):
            out.append("Remedies for calls: every member of a group must issue the same calls "
                       "(op, shape, dtype, reduce op, root) in the same order, and every send "
                       "needs its recv; batch p2p that goes both ways (batch_isend_irecv).")
        return out

    def _cycle(self, cycle: tuple[tuple[int, str, Members], ...], words: dict[int, str]) -> str:
        def at(r: int, d: str, m: Members) -> str:
            return words.get(r, f"at {group_words(d, m)}")

        kind = ("asked for groups in different orders" if not words else
                "issue their calls and requests in orders")
        if len(cycle) <= _MOST:
            waits = "; ".join(f"rank {r} waits {at(r, d, m)}" for r, d, m in cycle)
            ranks = ranks_text(tuple(r for r, _, _ in cycle), RankStyle.SPMD)
            return (f"- ranks {ranks} {kind} that wait on each other: {waits}" if words else
                    f"- ranks {ranks} asked for groups in different orders and wait on each "
                    f"other: {waits}")
        same: dict[str, list[int]] = defaultdict(list)
        for r, d, m in cycle:
            same[at(r, d, m)].append(r)
        waits = "; ".join(f"{who(tuple(ranks), self.world_size)} wait {place}"
                          for place, ranks in list(same.items())[:4])
        if len(same) > 4:
            waits += f"; and {len(same) - 4} more groups"
        if not words:
            return (f"- {len(cycle)} ranks asked for groups in different orders and wait on "
                    f"each other: {waits}")
        return f"- {len(cycle)} ranks {kind} that wait on each other: {waits}"


def _more(count: int, what: str, most: int = _MOST) -> list[str]:
    return [f"- and {count - most} more {what}"] if count > most else []


def group_words(dim: str, members: Members) -> str:
    """A group in words (a split over the world when ``members`` is empty)."""
    if not members:
        return f"the split of dim {dim!r} over the world"
    return f"the {dim!r} group {ranks_text(members, RankStyle.SPMD)}"


def who(ranks: Sequence[int], world: int) -> str:
    """Ranks in words: one, a few, or their pattern ("the even ranks (0, 2, 4, ..., 1022;
    512 ranks)").

    >>> who((3,), 8), who(tuple(range(1, 1024, 2)), 1024)
    ('rank 3', 'the odd ranks (1, 3, 5, ..., 1023; 512 ranks)')
    """
    ranks = tuple(ranks)
    n = len(ranks)
    if n == 1:
        return f"rank {ranks[0]}"
    if n <= _MOST:
        return f"ranks {ranks_text(ranks, RankStyle.SPMD)}"
    step = ranks[1] - ranks[0]
    shown = f"{ranks[0]}, {ranks[1]}, {ranks[2]}, ..., {ranks[-1]}; {n} ranks"
    if any(b - a != step for a, b in zip(ranks, ranks[1:])):
        return f"{n} ranks ({', '.join(map(str, ranks[:6]))}, ...)"
    if step == 2 and ranks[0] in (0, 1) and ranks[-1] >= world - 2:
        return f"the {('even', 'odd')[ranks[0]]} ranks ({shown})"
    if step == 1:
        return f"ranks {ranks[0]} to {ranks[-1]} ({n} ranks)"
    return f"every {step}th rank from {ranks[0]} ({shown})"

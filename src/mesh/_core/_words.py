"""The words every report shares: a list of ranks as text (:func:`ranks_text`), a collective
or p2p call as text (:func:`call_text`), "its 2nd call" (:func:`nth`), a verb agreeing with
its ranks (:func:`verb`), the sentence of a call some members never issue
(:func:`never_issued`), the name a mesh's groups carry in torch
(:func:`group_desc`), and the kinds of a finding with what each means
(:class:`FindingKind`: check_spmd's, two of which the hang reader finds too).

One routine writes every rank list in the house's messages and reports.  The reports grew
apart before they shared it, and their text is kept byte for byte, so the few real
differences are named styles (:class:`RankStyle`), each defined once here with an example,
never knobs set at a call site.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

__all__ = ["GROUP_DESC_PREFIX", "FindingKind", "RankStyle", "call_text", "finding_kind",
           "group_desc", "never_issued", "nth", "ranks_text", "verb"]

GROUP_DESC_PREFIX = "mesh_"
"""How the ``group_desc`` of a mesh's group in torch begins: ``mesh_<dim>`` (the facade's
groups, made by ``backend``, and torch's own DeviceMesh's); the hang reader reads the dim
back from it."""


@attrs.frozen
class _Form:
    """How one style writes a list: whole up to ``whole`` ranks; longer, its first ``head``
    ranks, then ``dots``, then (with ``last``) its last rank, then ``count`` formatted with
    ``n`` (the length) and ``rest`` (the ranks not shown), all between ``opening`` and
    ``closing``; a single rank as ``one`` formatted with it."""

    whole: int
    head: int
    dots: str
    last: bool
    count: str
    one: str
    opening: str = "("
    closing: str = ")"


class RankStyle(enum.Enum):
    """The styles of :func:`ranks_text`, one per kind of report (each a distinct form: two
    equal forms would be one style, as an enum aliases equal values).

    >>> ranks = range(20)
    >>> for style in RankStyle:
    ...     print(f"{style.name}: {ranks_text([3], style)} {ranks_text(ranks, style)}")
    EXPLAIN: (3) (0, 1, 2, 3, 4, 5, …, 19)
    GROUP: (3,) (0, 1, 2, 3, 4, 5, 6, …, 19; 20 ranks)
    WHO: rank 3 ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 20 ranks)
    HANG: (3) (0, 1, 2, 3, 4, 5, 6, 7, …)
    SPMD_GROUP: (3,) (0, 1, 2, 3, 4, 5, ..., 19; 20 ranks)
    SPMD: 3 (0, 1, 2, 3, 4, 5, 6, 7, ...)
    AGREE: [3] [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... 4 more]
    """

    EXPLAIN = _Form(whole=8, head=6, dots="…", last=True, count="", one="({})")
    """The plan reports (``meshlayout explain``, ``--fail``): ``(0, 1, 2, 3, 4, 5, …, 19)``."""
    GROUP = _Form(whole=8, head=7, dots="…", last=True, count="; {n} ranks", one="({},)")
    """A group in words (the hang reader, a backend's group request):
    ``(0, 1, 2, 3, 4, 5, 6, …, 19; 20 ranks)``; one rank as ``(3,)``."""
    WHO = _Form(whole=8, head=8, dots="…", last=False, count="; {n} ranks", one="rank {}",
                opening="ranks (")
    """Ranks as the subject of a hang finding: ``rank 3``, ``ranks (1, 5)``,
    ``ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 20 ranks)``."""
    HANG = _Form(whole=8, head=8, dots="…", last=False, count="", one="({})")
    """The hang reader's refusals of a plan: ``(0, 1, 2, 3, 4, 5, 6, 7, …)``."""
    SPMD_GROUP = _Form(whole=8, head=6, dots="...", last=True, count="; {n} ranks",
                       one="({},)")
    """A group in check_spmd's events: ``(0, 1, 2, 3, 4, 5, ..., 19; 20 ranks)``."""
    SPMD = _Form(whole=8, head=8, dots="...", last=False, count="", one="{}")
    """Ranks in check_spmd's reports: ``3``, ``(1, 5)``, ``(0, 1, 2, 3, 4, 5, 6, 7, ...)``."""
    AGREE = _Form(whole=16, head=16, dots="...", last=False, count=" {rest} more", one="[{}]",
                  opening="[", closing="]")
    """The ranks whose reshard plans differ, as a Python list: past sixteen ranks, the first
    sixteen and how many more, ``[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... 4
    more]``."""


def ranks_text(ranks: Sequence[int], style: RankStyle) -> str:
    """``ranks`` as text in ``style``: whole when short, else cut as the style says.

    >>> ranks_text((1, 5), RankStyle.GROUP), ranks_text(range(9), RankStyle.GROUP)
    ('(1, 5)', '(0, 1, 2, 3, 4, 5, 6, …, 8; 9 ranks)')
    """
    form, n = style.value, len(ranks)
    if n == 1:
        return form.one.format(ranks[0])
    if n <= form.whole:
        return f"{form.opening}{', '.join(map(str, ranks))}{form.closing}"
    cut = [*map(str, ranks[:form.head]), form.dots, *([str(ranks[-1])] if form.last else [])]
    count = form.count.format(n=n, rest=n - form.head)
    return f"{form.opening}{', '.join(cut)}{count}{form.closing}"


def call_text(op: str, shapes: Sequence[Sequence[int]], dtype: str, *details: str) -> str:
    """A call in words, as check_spmd and the hang reader write it: the op, its input
    ``shapes`` (``()`` when none), the ``dtype``, then each of ``details`` (what a report
    knows of the call beyond these: check_spmd's reduce op, root and peer, the hang reader's
    count of the tensors it does not show).

    >>> call_text("all_reduce", [(16, 16)], "float32", "sum")
    'all_reduce (16, 16) float32 sum'
    >>> call_text("all_gather", [(4,), ()], "bfloat16"), call_text("barrier", [], "?")
    ('all_gather (4,), () bfloat16', 'barrier () ?')
    """
    written = ", ".join(map(_shape_text, shapes)) or "()"
    return " ".join((op, written, dtype, *details))


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as Python writes a tuple: ``(4,)``, ``(4, 8)``, ``()``."""
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"


def nth(n: int) -> str:
    """``n`` as an English ordinal, as reports count a group's calls ("its 2nd call").

    >>> [nth(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102, 111)]
    ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '102nd', '111th']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def verb(ranks: Sequence[int], one: str, many: str) -> str:
    """``one`` for a single rank, else ``many``: the words that agree with ``ranks`` as a
    subject ("rank 3 issues", "ranks (1, 5) issue").

    >>> verb([3], "issues", "issue"), verb([1, 5], "it waits", "they wait")
    ('issues', 'they wait')
    """
    return one if len(ranks) == 1 else many


def never_issued(group: str, never: Sequence[int], who_never: str, n: int, call: str,
                 issuers: Sequence[int], who_issues: str, waiting: str) -> str:
    """A collective some members never issue, as check_spmd's and the hang reader's
    ``unmatched`` findings say it: on ``group``, ``who_never`` (the ranks ``never``, in the
    report's words) never issue its ``n``-th call, ``call``, which ``who_issues`` (the ranks
    ``issuers``) issue, so that they wait (``waiting``: what they wait for).

    >>> print(never_issued("the 'tp' group (0, 1)", [1], "rank 1", 2, "all_reduce () int64",
    ...                    [0], "rank 0", "rank 1 stopped"))
    the 'tp' group (0, 1): rank 1 never issues its 2nd call (all_reduce () int64), which rank 0
    issues: it waits (rank 1 stopped)
    """
    return (f"{group}: {who_never} never {verb(never, 'issues', 'issue')} its {nth(n)} call "
            f"({call}), which {who_issues} {verb(issuers, 'issues', 'issue')}: "
            f"{verb(issuers, 'it waits', 'they wait')} ({waiting})")


def group_desc(dim: str) -> str:
    """The ``group_desc`` of a mesh's group along ``dim``.

    >>> group_desc("tp")
    'mesh_tp'
    """
    return f"{GROUP_DESC_PREFIX}{dim}"


class FindingKind(enum.Enum):
    """The kind of a finding, its value the word reports and JSON write (``"desync"``), with
    what it means (:attr:`words`): every kind ``check_spmd`` finds, of which the hang reader
    finds ``DESYNC`` and ``UNMATCHED`` in a hung job's dumps.  A finding keeps the word (its
    ``kind`` is a ``str``); the enum says which words there are, once.

    >>> FindingKind.DESYNC.value, FindingKind("unmatched").words
    ('desync', 'a call some members never issue (fewer calls; a send without its recv)')
    """

    _value_: str
    words: str

    def __new__(cls, word: str, words: str) -> FindingKind:
        kind = object.__new__(cls)
        kind._value_ = word
        kind.words = words
        return kind

    DESYNC = "desync", ("members of a group issue different calls (op, shape, dtype, reduce "
                        "op, root)")
    UNMATCHED = "unmatched", ("a call some members never issue (fewer calls; a send without "
                              "its recv)")
    SPLITS = "splits", "all_to_all split sizes that do not pair up"
    CACHE_HIT = "cache_hit", ("a rank holds a family's group already and skips the creation "
                              "its peers enter")
    HIDDEN_SPLIT = "hidden_split", ("a group created by a subset where the creation is "
                                    "collective over the world (or a split of a parent group "
                                    "that some of its ranks skip)")
    LIFECYCLE = "lifecycle", ("after a failure: destroy instead of abort, a shrink from "
                              "outside, a group used after it was ended, a revoke not awaited")
    UNEVEN_HOSTS = "uneven_hosts", "a communicator with unequal ranks per host (NCCL)"
    NVLS = "nvls", ("more NVLS multicast groups in an NVLink domain than its NVSwitch has "
                    "slots")
    BUDGET = "budget", "more communicators per rank than the stated budget"
    FOREIGN = "foreign", "a call on a group the rank does not own, or is not in"
    THREADS = "threads", "calls from several threads, or threads left running"
    TIMEOUT = "timeout", "a program that ran past its per-rank time limit"
    MEMORY = "memory", "a program that grew the process past its per-rank memory bound"


def finding_kind(kind: FindingKind | str) -> str:
    """The word of ``kind`` when it is a :class:`FindingKind`, else ``kind`` as given (a
    finding's converter: the finding checks the word itself, with its own error, so a
    value of any type passes through unchanged).

    >>> finding_kind(FindingKind.DESYNC), finding_kind("desync"), finding_kind(3)
    ('desync', 'desync', 3)
    """
    return kind.value if isinstance(kind, FindingKind) else kind

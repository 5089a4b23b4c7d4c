"""What the barrier and liveness keep in the store, each kind of value with one writer and
one strict reader (see the threat model in :mod:`._rendezvous`).

Nothing read from the store is trusted as written: another job, an earlier attempt or a
misbehaving peer may have left any bytes under any key.  Each reader here bounds the bytes
before it parses them, takes exact types (a ``bool`` is not a number, a float is not a
rank), bounds every number and index (a rank below the world size, a count at most the
members, a round below :data:`MAX_COUNT`), and raises
:class:`~backend.StoreRecordError` naming the key, the writer the key or the value names,
and what is wrong.  The values are:

- the ticket counter ``t/G``: tickets x :data:`~._rounds.TICKET` (:func:`read_tickets`);
- the round values (decision ``d/G/k``, wake-up ``o/G/k``, claim ``c/G/k``): decimal
  integers (:func:`read_count`, :func:`read_outcome`, :func:`read_claim`);
- the closer's reasons ``w/G/k/<closer>``: :class:`Reasons`;
- a rank's liveness record ``r/<rank>``: :class:`LivenessRecord`, with the lost mark
  ``l/<rank>`` a peer writes when the record stops changing (:class:`LostMark`).

:func:`read_record` is the shared bounded, strict JSON read (discovery's records use it too).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

import attrs

from .._core import StoreRecordError
from ._rounds import GO, QUIT, SHOWN, TICKET

__all__ = ["MAX_COUNT", "MAX_RECORD_BYTES", "RECORD_VERSION", "LivenessRecord", "LostMark",
           "Reasons", "read_claim", "read_count", "read_json", "read_outcome", "read_record",
           "read_tickets"]

RECORD_VERSION = 1
MAX_RECORD_BYTES = 16384  # a liveness record or a closer's reasons, at most
MAX_COUNT = 1 << 53  # tickets, rounds, beats: exact in a JSON float too
_MAX_TEXT = 1000  # a description or a reason, in characters
_MAX_SECONDS = 1e9  # a span of time in a record (seconds), either way
_MAX_IN = 256  # groups one rank's threads wait in at once
T = TypeVar("T")


def read_record(key: str, raw: bytes, max_bytes: int, *, writer: int | None = None
                ) -> dict[str, Any]:
    """The JSON object stored at ``key``, read strictly (:func:`read_json`); anything but
    an object raises :class:`~backend.StoreRecordError` naming ``key`` and ``writer``.

    >>> read_record("k", b'{"v": 1}', 64)
    {'v': 1}
    >>> try:
    ...     read_record("k", b'[1, 2]', 64, writer=3)
    ... except StoreRecordError as e:
    ...     print(e.key, e.writer, e.reason)
    k 3 a JSON object was expected, found a list
    """
    found = read_json(key, raw, max_bytes, writer=writer)
    if not isinstance(found, dict):
        raise StoreRecordError(key, f"a JSON object was expected, found "
                               f"{_json_kind(found)}", writer=writer)
    return found


def read_json(key: str, raw: bytes, max_bytes: int, *, writer: int | None = None) -> Any:
    """The JSON value stored at ``key``, read strictly: at most ``max_bytes`` bytes of
    UTF-8, objects with unique keys, no ``NaN`` or ``Infinity``, numbers within 20 digits;
    anything else raises :class:`~backend.StoreRecordError` naming ``key`` and ``writer``
    (the one parser of every record the barrier, liveness and discovery read)."""
    if not isinstance(raw, (bytes, bytearray)):
        raise StoreRecordError(key, f"bytes were expected, found {type(raw).__name__}",
                               writer=writer)
    if len(raw) > max_bytes:
        raise StoreRecordError(key, f"{len(raw)} bytes, more than the {max_bytes} its "
                               "writer writes", writer=writer)
    try:
        return json.loads(bytes(raw).decode("utf-8"), parse_constant=_no_constant,
                          parse_int=_bounded_int, object_pairs_hook=_unique)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeError are both
        raise StoreRecordError(key, f"not JSON ({e})", writer=writer) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


def _bounded_int(text: str) -> int:
    if len(text) > 20:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice")
    return out


def _json_kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value),
                                                                           "something else")


def read_count(key: str, raw: bytes | None, *, writer: int | None = None) -> int:
    """A counter or round value: ASCII decimal digits, 0 to :data:`MAX_COUNT` (absent: 0).

    >>> read_count("t", b"12"), read_count("t", None)
    (12, 0)
    """
    if raw is None:
        return 0
    text = bytes(raw)
    if not 0 < len(text) <= 20 or not text.isdigit() or not text.isascii():
        raise StoreRecordError(key, f"a decimal count was expected, found {text[:40]!r}",
                               writer=writer)
    value = int(text)
    if value > MAX_COUNT:
        raise StoreRecordError(key, f"the count {value} is above {MAX_COUNT}", writer=writer)
    return value


def read_tickets(key: str, raw: bytes | None) -> int:
    """The tickets a ticket counter says were taken: a decimal count of
    :data:`~._rounds.TICKET` steps, at most :data:`~._rounds.MAX_TICKETS` (absent: 0).  A
    value that is no multiple of TICKET was not the barrier's: a plant the store's ``add``
    read as a number ("1junk" reads as 1) or a count written by hand.

    >>> read_tickets("t", str(3 * TICKET).encode()), read_tickets("t", None)
    (3, 0)
    >>> try:
    ...     read_tickets("t", str(3 * TICKET + 1).encode())
    ... except StoreRecordError as e:
    ...     print(e.reason[:45])
    it reads 3145729, no multiple of 1048576: the
    """
    value = read_count(key, raw)  # at most MAX_COUNT = MAX_TICKETS x TICKET
    if value % TICKET:
        raise StoreRecordError(key, f"it reads {value}, no multiple of {TICKET}: the counter "
                               "held a value the barrier did not write (a plant the store's "
                               "add read as a number, such as '1junk')")
    return value // TICKET


def read_outcome(key: str, raw: bytes, members: Sequence[int]) -> int:
    """A round's decision or wake-up value: ``GO``, or ``QUIT`` plus the closer's rank, which
    must be one of ``members`` (a QUIT from anyone else names that writer).

    >>> read_outcome("o", str(GO).encode(), range(4)) == GO
    True
    >>> try:
    ...     read_outcome("o", str(QUIT + 7).encode(), range(4))
    ... except StoreRecordError as e:
    ...     print(e.writer, e.reason)
    7 a round closed by rank 7, which is not one of its 4 members
    """
    value = read_count(key, raw)
    if value == GO:
        return value
    if not QUIT <= value < QUIT + MAX_COUNT:
        raise StoreRecordError(key, f"{value} is neither GO ({GO}) nor QUIT ({QUIT}) plus "
                               "a rank")
    closer = value - QUIT
    if closer not in members:
        raise StoreRecordError(key, f"a round closed by rank {closer}, which is not one of "
                               f"its {len(members)} members", writer=closer)
    return value


def read_claim(key: str, raw: bytes, members: Sequence[int]) -> int:
    """A round's close claim: the claimer's rank, one of ``members``."""
    rank = read_count(key, raw)
    if rank not in members:
        raise StoreRecordError(key, f"a claim by rank {rank}, which is not one of the round's "
                               f"{len(members)} members", writer=rank)
    return rank


# ---- fields of a JSON record ----------------------------------------------------------------
@attrs.frozen
class _Fields:
    """One record's fields as read, each taken once by its exact type and bounds."""

    key: str
    data: Mapping[str, Any]
    writer: int | None

    def bad(self, reason: str) -> StoreRecordError:
        return StoreRecordError(self.key, reason, writer=self.writer)

    def take(self, name: str, kind: type[T] | tuple[type, ...]) -> T:
        if name not in self.data:
            raise self.bad(f"the field {name!r} is missing")
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if type(value) not in kinds and not (float in kinds and type(value) is int):
            raise self.bad(f"the field {name!r} is {_json_kind(value)}, not "
                           f"{' or '.join(k.__name__ for k in kinds)}")
        return cast(T, value)  # checked against kind just above

    def integer(self, name: str, low: int, high: int) -> int:
        value: int = self.take(name, int)
        if not low <= value <= high:
            raise self.bad(f"the field {name!r} is {value}, outside [{low}, {high}]")
        return value

    def seconds(self, name: str, low: float = -_MAX_SECONDS) -> float:
        value = float(self.take(name, float))
        if not (math.isfinite(value) and low <= value <= _MAX_SECONDS):
            raise self.bad(f"the field {name!r} is {value} s, outside [{low}, {_MAX_SECONDS}]")
        return value

    def text(self, name: str, most: int = _MAX_TEXT) -> str:
        value: str = self.take(name, str)
        if len(value) > most:
            raise self.bad(f"the field {name!r} holds {len(value)} characters, more than "
                           f"{most}")
        return value

    def ranks(self, name: str, world: int, most: int) -> tuple[int, ...]:
        values: list[Any] = self.take(name, list)
        if len(values) > most:
            raise self.bad(f"the field {name!r} lists {len(values)} ranks, more than {most}")
        if any(type(r) is not int or not 0 <= r < world for r in values):
            raise self.bad(f"the field {name!r} holds a value that is not a rank below the "
                           f"world size {world}: {values[:8]}")
        return tuple(values)

    def exactly(self, names: set[str]) -> None:
        extra = sorted(set(self.data) - names)
        if extra:
            raise self.bad(f"unknown fields {extra[:5]}")
        version = self.data.get("v")
        if version != RECORD_VERSION or type(version) is not int:
            raise self.bad(f"version {version!r}, this reader reads {RECORD_VERSION}")


def _dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


# ---- a rank's liveness record ----------------------------------------------------------------
_LIVENESS_FIELDS = {"v", "rank", "life", "seq", "period", "group", "round", "size", "desc",
                    "ranks", "in", "since_s", "until_s", "creating", "left_s", "interrupted",
                    "explaining"}


@attrs.frozen
class LivenessRecord:
    """What rank ``rank`` tells its peers at ``r/<rank>`` (written only by that rank).

    Times are spans on the writer's own monotonic clock, measured when it wrote the record
    (``since_s``: how long its attempt has run; ``until_s``: how long until its deadline;
    ``left_s``: how long since it left a failed round): a reader adds them to the time it
    first saw this ``(life, seq)`` on its own clock, and never compares two hosts' clocks.
    ``seq`` counts the writer's writes (its beats), ``life`` tells its processes apart, so
    a reader judges a record stale by how long it has seen the same ``(life, seq)``.
    ``period``: the writer's beat period (None: it does not beat); ``group`` None: it is
    in no barrier (it explains a failure, or waits nowhere).
    """

    rank: int
    life: int
    seq: int
    period: float | None = None
    group: str | None = None
    round: int = -1
    size: int = 0
    desc: str = ""
    ranks: tuple[int, ...] = ()
    in_: tuple[tuple[str, int], ...] = ()
    since_s: float = 0.0
    until_s: float = 0.0
    creating: bool = False
    left_s: float | None = None
    interrupted: str | None = None
    explaining: bool = False

    def to_bytes(self) -> bytes:
        """The record as its one writer stores it (the reader's input)."""
        return _dumps({"v": RECORD_VERSION, "rank": self.rank, "life": self.life,
                       "seq": self.seq, "period": self.period, "group": self.group,
                       "round": self.round, "size": self.size, "desc": self.desc,
                       "ranks": list(self.ranks), "in": [list(g) for g in self.in_],
                       "since_s": self.since_s, "until_s": self.until_s,
                       "creating": self.creating, "left_s": self.left_s,
                       "interrupted": self.interrupted, "explaining": self.explaining})

    @classmethod
    def read(cls, key: str, raw: bytes, *, rank: int, world: int) -> LivenessRecord:
        """The record at ``key``, which only ``rank`` writes, in a world of ``world`` ranks;
        anything its writer would not have written raises :class:`~backend.StoreRecordError`.
        """
        f = _Fields(key, read_record(key, raw, MAX_RECORD_BYTES, writer=rank), rank)
        f.exactly(_LIVENESS_FIELDS)
        if f.integer("rank", 0, world - 1) != rank:
            raise f.bad(f"the record says it is rank {f.data['rank']}'s")
        group = None if f.data.get("group") is None else f.text("group", 200)
        period = None if f.data.get("period") is None else f.seconds("period", 0.0)
        left = None if f.data.get("left_s") is None else f.seconds("left_s", 0.0)
        stop = None if f.data.get("interrupted") is None else f.text("interrupted", 100)
        return cls(rank, f.integer("life", 0, MAX_COUNT), f.integer("seq", 0, MAX_COUNT),
                   period, group, f.integer("round", -1, MAX_COUNT),
                   f.integer("size", 0, world), f.text("desc"), f.ranks("ranks", world, SHOWN),
                   _rounds_in(f), f.seconds("since_s", 0.0), f.seconds("until_s"),
                   f.take("creating", bool), left, stop, f.take("explaining", bool))


def _rounds_in(f: _Fields) -> tuple[tuple[str, int], ...]:
    found: list[Any] = f.take("in", list)
    if len(found) > _MAX_IN:
        raise f.bad(f"the field 'in' lists {len(found)} rounds, more than {_MAX_IN}")
    out = []
    for item in found:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str or \
                len(item[0]) > 200 or type(item[1]) is not int or not 0 <= item[1] <= MAX_COUNT:
            raise f.bad(f"the field 'in' holds {str(item)[:60]}, not a [group, round] pair")
        out.append((item[0], item[1]))
    return tuple(out)


@attrs.frozen
class LostMark:
    """Rank ``by``'s note at ``l/<rank>`` that ``rank``'s record ``(life, seq)`` stopped
    changing while ``by`` watched it: it stands until that record changes."""

    by: int
    life: int
    seq: int

    def to_bytes(self) -> bytes:
        return _dumps({"v": RECORD_VERSION, "by": self.by, "life": self.life, "seq": self.seq})

    @classmethod
    def read(cls, key: str, raw: bytes, *, world: int) -> LostMark:
        f = _Fields(key, read_record(key, raw, 256), None)
        f.exactly({"v", "by", "life", "seq"})
        by = f.integer("by", 0, world - 1)
        return cls(by, f.integer("life", 0, MAX_COUNT), f.integer("seq", 0, MAX_COUNT))


# ---- a closer's reasons -----------------------------------------------------------------------
@attrs.frozen
class Reasons:
    """Why rank ``by`` closed a round (at ``w/G/k/<by>``, written by it alone): ``count``
    members were missing, the first of them ``missing``, and what each was doing
    (``doing``: (rank, words, kind) triples); ``bad``: a store value that was not valid
    ((key, writer, reason)), which every member raises as a
    :class:`~backend.StoreRecordError`."""

    by: int
    missing: tuple[int, ...] = ()
    count: int = 0
    doing: tuple[tuple[int, str, str], ...] = ()
    bad: tuple[str, int | None, str] | None = None

    def to_bytes(self) -> bytes:
        return _dumps({"v": RECORD_VERSION, "by": self.by, "missing": list(self.missing),
                       "count": self.count, "doing": [list(d) for d in self.doing],
                       "bad": None if self.bad is None else list(self.bad)})

    @classmethod
    def read(cls, key: str, raw: bytes, *, by: int, size: int, world: int) -> Reasons:
        """The reasons at ``key``, which only ``by`` writes, of a round of ``size`` members."""
        f = _Fields(key, read_record(key, raw, MAX_RECORD_BYTES, writer=by), by)
        f.exactly({"v", "by", "missing", "count", "doing", "bad"})
        if f.integer("by", 0, world - 1) != by:
            raise f.bad(f"the reasons say they are rank {f.data['by']}'s")
        return cls(by, f.ranks("missing", world, SHOWN), f.integer("count", 0, size),
                   _doing(f, world), _bad(f, world))


def _doing(f: _Fields, world: int) -> tuple[tuple[int, str, str], ...]:
    found: list[Any] = f.take("doing", list)
    if len(found) > SHOWN:
        raise f.bad(f"the field 'doing' lists {len(found)} ranks, more than {SHOWN}")
    out = []
    for item in found:
        if type(item) is not list or len(item) != 3 or type(item[0]) is not int or \
                not 0 <= item[0] < world or type(item[1]) is not str or \
                len(item[1]) > _MAX_TEXT or type(item[2]) is not str or \
                not item[2].isidentifier() or len(item[2]) > 20:
            raise f.bad(f"the field 'doing' holds {str(item)[:80]}, not a [rank, words, "
                        "kind] triple")
        out.append((item[0], item[1], item[2]))
    return tuple(out)


def _bad(f: _Fields, world: int) -> tuple[str, int | None, str] | None:
    found = f.data.get("bad")
    if found is None:
        return None
    if type(found) is not list or len(found) != 3 or type(found[0]) is not str or \
            len(found[0]) > 400 or not (found[1] is None or (type(found[1]) is int and
                                                              0 <= found[1] < world)) or \
            type(found[2]) is not str or len(found[2]) > _MAX_TEXT:
        raise f.bad(f"the field 'bad' holds {str(found)[:80]}, not a [key, writer, reason] "
                    "triple")
    return found[0], found[1], found[2]

"""Topology files: the versioned data of ``Topology.to_dict``, Slurm host lists and hosts files.

Pure functions between text (or plain JSON-able data) and a topology's fields, never a
:class:`~mesh.Topology` itself: ``_topology`` builds the value from the fields and checks
what they mean together (ranks adding up to the world, no device claimed twice, no host
without ranks).  Here only the form is checked, and every input is bounded before work
that grows with it: a host list is counted before it is expanded, lists are read up to
:data:`MOST_LISTED` items.

**The data** (``version`` :data:`TOPOLOGY_VERSION`; every key present, no other):

- ``world``: the number of ranks;
- ``devices_per_host``: ranks ``[h * n, (h + 1) * n)`` on host ``h`` (regular hosts), or
  null with ``ranks``: ``[[host, count, first_device], ...]``, runs of consecutive ranks
  in rank order, each on one host at consecutive devices (a host numbered node by node
  takes one run, so the data grows with the hosts, not the ranks);
- ``hosts_per_domain``: host ``h`` in fast domain ``h // n``, or null with ``domains``:
  ``[[domain, hosts], ...]``, runs of consecutive hosts (in host order) in one domain;
- ``hosts``: the hosts' names, in host order: a Slurm host list (``"node[001-128]"``), a
  list of names, or null (``host<i>``).

>>> expand_hosts("node[001-003],gpu[7,9]")
('node001', 'node002', 'node003', 'gpu7', 'gpu9')
>>> compress_hosts(["node001", "node002", "node003", "gpu7", "gpu9"])
'node[001-003],gpu[7,9]'
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from .._core import MAX_UNIVERSE, InvalidMeshDataError, TopologyError, show
from ._kinds import Runs

__all__ = ["MOST_LISTED", "TOPOLOGY_VERSION", "Fields", "HostLine", "compress_hosts",
           "data_of", "expand_hosts", "fields_of", "hosts_file_lines"]

TOPOLOGY_VERSION = 1
"""The ``version`` of :meth:`~mesh.Topology.to_dict`'s data."""

MOST_LISTED = 1 << 22
"""The most hosts a host list names, and the most runs (or lines) a topology's data (or a
hosts file) holds: a list past it is refused before it is read further."""

_KEYS = frozenset({"version", "world", "devices_per_host", "ranks", "hosts_per_domain",
                   "domains", "hosts"})
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_NAME = re.compile(r"[^\s,\[\]]+")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")



class Fields(NamedTuple):
    """A topology's fields as its data holds them (checked in form only)."""

    world: int
    devices_per_host: int | None
    ranks: Runs | None
    hosts_per_domain: int | None
    domains: Runs | None
    names: tuple[str, ...] | None

    def domains_given(self) -> int | Runs:
        """The runs of ``domains`` where given, else ``hosts_per_domain``
        (:func:`fields_of` gives exactly one)."""
        if self.domains is not None:
            return self.domains
        if self.hosts_per_domain is None:  # pragma: no cover - fields_of refuses it
            raise AssertionError("fields_of gives hosts_per_domain or domains")
        return self.hosts_per_domain


# ---- the versioned data -------------------------------------------------------------------
def fields_of(d: object) -> Fields:
    """The fields of :meth:`~mesh.Topology.to_dict`'s data, checked in form: exactly the
    keys, the version, ints where ints go, one of each pair (``devices_per_host`` or
    ``ranks``; ``hosts_per_domain`` or ``domains``); else
    :class:`~mesh.InvalidMeshDataError` naming what is wrong."""
    if type(d) is not dict or set(d) != _KEYS:
        got = show(sorted(map(show, d))) if type(d) is dict else show(d)
        raise InvalidMeshDataError(f"a Topology dict has exactly the keys {sorted(_KEYS)}; "
                                   f"got {got}")
    if type(d["version"]) is not int or d["version"] != TOPOLOGY_VERSION:
        raise InvalidMeshDataError(f"unknown Topology format version {show(d['version'])}; "
                                   f"this library reads version {TOPOLOGY_VERSION}")
    world = _count(d["world"], "'world'")
    per_host = None if d["devices_per_host"] is None else _count(d["devices_per_host"],
                                                                 "'devices_per_host'")
    ranks = None if d["ranks"] is None else _runs(d["ranks"], "'ranks'", 3)
    per_domain = None if d["hosts_per_domain"] is None else _count(d["hosts_per_domain"],
                                                                   "'hosts_per_domain'")
    domains = None if d["domains"] is None else _runs(d["domains"], "'domains'", 2)
    if (per_host is None) == (ranks is None):
        raise InvalidMeshDataError("a Topology dict gives exactly one of 'devices_per_host' "
                                   "(regular hosts) and 'ranks' (runs of ranks), the other "
                                   f"null; got {show(d['devices_per_host'])} and "
                                   f"{show(d['ranks'])}")
    if (per_domain is None) == (domains is None):
        raise InvalidMeshDataError("a Topology dict gives exactly one of 'hosts_per_domain' "
                                   "(regular domains) and 'domains' (runs of hosts), the other "
                                   f"null; got {show(d['hosts_per_domain'])} and "
                                   f"{show(d['domains'])}")
    # the hosts there are: a longer host list is refused before it is expanded
    hosts = -(-world // per_host) if per_host is not None else \
        max(r[0] for r in ranks or ()) + 1
    names = _names(d["hosts"], hosts)
    return Fields(world, per_host, ranks, per_domain, domains, names)


def data_of(f: Fields) -> dict[str, Any]:
    """The versioned data of a topology's fields (the inverse of :func:`fields_of`)."""
    return {"version": TOPOLOGY_VERSION, "world": f.world,
            "devices_per_host": f.devices_per_host,
            "ranks": None if f.ranks is None else [list(r) for r in f.ranks],
            "hosts_per_domain": f.hosts_per_domain,
            "domains": None if f.domains is None else [list(r) for r in f.domains],
            "hosts": None if f.names is None else compress_hosts(f.names)}


def _count(value: object, what: str, least: int = 1) -> int:
    if type(value) is not int or not least <= value <= MAX_UNIVERSE:
        raise InvalidMeshDataError(f"{what} must be an int in [{least}, 2**63], got "
                                   f"{show(value)}")
    return value


def _runs(value: object, what: str, width: int) -> Runs:
    """A list of runs, each a list of ``width`` ints: an index, a count, (a first device)."""
    if type(value) is not list or not value:
        raise InvalidMeshDataError(f"{what} must be a non-empty list of runs, got {show(value)}")
    if len(value) > MOST_LISTED:
        raise InvalidMeshDataError(f"{what} holds {len(value):,} runs, more than the "
                                   f"{MOST_LISTED:,} a topology may have")
    out = []
    for i, run in enumerate(value):
        if type(run) is not list or len(run) != width or any(
                type(x) is not int or not 0 <= x < MAX_UNIVERSE for x in run) or run[1] < 1:
            shape = "[host, count, first_device]" if width == 3 else "[domain, hosts]"
            raise InvalidMeshDataError(f"{what}[{i}] must be {shape}: ints >= 0 below 2**63, "
                                       f"the count >= 1; got {show(run)}")
        out.append(tuple(run))
    return tuple(out)


def _names(value: object, hosts: int) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) and type(value) is str:
        return expand_hosts(value, most=hosts)
    if type(value) is not list or not value or len(value) > MOST_LISTED or not all(
            type(n) is str and n for n in value):
        raise InvalidMeshDataError(f"'hosts' must be null, a Slurm host list (a str) or a "
                                   f"non-empty list of at most {MOST_LISTED:,} names, got "
                                   f"{show(value)}")
    return tuple(value)


# ---- Slurm host lists ------------------------------------------------------------------------
def expand_hosts(text: str, *, most: int | None = None) -> tuple[str, ...]:
    """The names of a Slurm host list, in order: items separated by commas, each a name
    with bracketed ranges (``node[001-003,7]``, ``rack[1-2]-n[1-4]``: every combination,
    the last bracket fastest); a range's numbers take the width of its first (``08-10``
    gives ``08, 09, 10``).  Counted before it is expanded: more than :data:`MOST_LISTED`
    names (or than ``most``), or malformed text, is a :class:`~mesh.TopologyError` naming
    it."""
    if not isinstance(text, str) or not text.strip():
        raise TopologyError(f"a host list must be non-empty text such as node[001-128], got "
                            f"{show(text)}")
    items = _items(text)
    parsed = [_item(item, text) for item in items]
    total = 0
    for pieces in parsed:
        count = 1
        for piece in pieces:
            if isinstance(piece, list):
                count *= sum(b - a + 1 for a, b, _ in piece)
        total += count
        if total > MOST_LISTED:
            raise TopologyError(f"the host list {_short(text)} names more than "
                                f"{MOST_LISTED:,} hosts (it was not expanded)")
        if most is not None and total > most:
            raise TopologyError(f"'hosts' {_short(text)} names more than the {most:,} hosts "
                                "the topology has (it was not expanded)")
    out: list[str] = []
    for pieces in parsed:
        names = [""]
        for piece in pieces:
            if isinstance(piece, str):
                names = [n + piece for n in names]
            else:
                numbers = [str(x).zfill(w) for a, b, w in piece for x in range(a, b + 1)]
                names = [n + x for n in names for x in numbers]
        out.extend(names)
    return tuple(out)


def _items(text: str) -> list[str]:
    """The top-level items of a host list (commas inside brackets belong to ranges)."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
            if depth > 1:
                raise TopologyError(f"the host list {_short(text)} nests brackets")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise TopologyError(f"the host list {_short(text)} closes a bracket it did "
                                    "not open")
        elif c == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise TopologyError(f"the host list {_short(text)} leaves a bracket open")
    items.append(text[start:].strip())
    if not all(items):
        raise TopologyError(f"the host list {_short(text)} has an empty item")
    return items


def _item(item: str, text: str) -> list[str | list[tuple[int, int, int]]]:
    """One item as pieces: literal text, and the ranges of each bracket."""
    pieces: list[str | list[tuple[int, int, int]]] = []
    at = 0
    for m in _BRACKETS.finditer(item):
        if m.start() > at:
            pieces.append(_literal(item[at:m.start()], text))
        pieces.append(_ranges(m.group(1), text))
        at = m.end()
    if at < len(item):
        pieces.append(_literal(item[at:], text))
    return pieces


def _literal(part: str, text: str) -> str:
    if not _NAME.fullmatch(part):
        raise TopologyError(f"the host list {_short(text)} has {part!r}, not a host name")
    return part


def _ranges(body: str, text: str) -> list[tuple[int, int, int]]:
    """``001-003,7``: ``(first, last, width)`` per range."""
    out = []
    for r in body.split(","):
        first, dash, last = r.strip().partition("-")
        ok = first.isascii() and first.isdigit() and len(first) <= 18 and (
            not dash or (last.isascii() and last.isdigit() and len(last) <= 18))
        a = int(first) if ok else 0
        b = int(last) if ok and dash else a
        if not ok or b < a:
            raise TopologyError(f"the host list {_short(text)} has the range {r.strip()!r} "
                                "(valid: N or A-B with digits, A <= B)")
        out.append((a, b, len(first)))
    return out


def compress_hosts(names: tuple[str, ...] | list[str]) -> str | list[str]:
    """``names`` as a Slurm host list that expands to exactly them (consecutive numbered
    names sharing a prefix become one bracketed item), or the list itself where no host
    list can say it (a name with a bracket, a comma or a space, or one that the host list
    would merge differently)."""
    groups: list[tuple[str, list[tuple[int, int, int]]]] = []  # (prefix, ranges)
    for name in names:
        m = _TRAILING_DIGITS.match(name)
        if not _NAME.fullmatch(name) or m is None or len(m.group(2)) > 18:
            groups.append((name, []))
            continue
        prefix, digits = m.group(1), m.group(2)
        n, width = int(digits), len(digits)
        if groups and groups[-1][0] == prefix and groups[-1][1]:
            ranges = groups[-1][1]
            a, b, w = ranges[-1]
            if n == b + 1 and str(n).zfill(w) == digits:
                ranges[-1] = (a, n, w)
                continue
            if str(n).zfill(width) == digits:
                ranges.append((n, n, width))
                continue
        groups.append((prefix, [(n, n, width)]))
    text = ",".join(p if not rs else p + "[" + ",".join(
        str(a).zfill(w) if a == b else f"{str(a).zfill(w)}-{str(b).zfill(w)}"
        for a, b, w in rs) + "]" for p, rs in groups)
    try:
        same = expand_hosts(text) == tuple(names)
    except TopologyError:
        same = False
    return text if same else list(names)


def _short(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


# ---- hosts files -----------------------------------------------------------------------------
class HostLine(NamedTuple):
    """One line of a hosts file: a host, how many ranks it takes next (None: the default),
    its fast domain (None: not given)."""

    name: str
    slots: int | None
    domain: str | None


def hosts_file_lines(text: str, what: str) -> list[HostLine]:
    """The lines of a hosts file: one host per line, in rank order: ``HOST``, then
    optionally ``slots=N`` (the next N ranks run there) and ``domain=NAME`` (its fast
    domain); blank lines and ``#`` comments are skipped.  At most :data:`MOST_LISTED`
    lines; anything else is a :class:`~mesh.TopologyError` naming the line."""
    out: list[HostLine] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(out) >= MOST_LISTED:
            raise TopologyError(f"{what} has more than {MOST_LISTED:,} hosts")
        name, *options = line.split()
        slots: int | None = None
        domain: str | None = None
        for opt in options:
            key, eq, value = opt.partition("=")
            if key == "slots" and eq and value.isascii() and value.isdigit() and \
                    len(value) <= 18 and int(value) >= 1 and slots is None:
                slots = int(value)
            elif key == "domain" and eq and value and domain is None:
                domain = value
            else:
                raise TopologyError(f"{what}, line {number}: {opt!r} is not slots=N (N >= 1) or "
                                    f"domain=NAME, each at most once (a line is HOST "
                                    f"[slots=N] [domain=NAME]); the line is {_short(raw)}")
        if not _NAME.fullmatch(name):
            raise TopologyError(f"{what}, line {number}: {name!r} is not a host name")
        out.append(HostLine(name, slots, domain))
    if not out:
        raise TopologyError(f"{what} names no host (one host per line, in rank order)")
    return out

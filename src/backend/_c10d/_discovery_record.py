"""The records discovery writes to the store, each a frozen, versioned value with one writer
(``encode``) and one strict reader (``read``): bounded in size and in every index it carries
(by the world), anything else a :class:`~backend.DiscoveryError` naming the key and, where
known, the rank that wrote it.  The protocol that writes them is in ``_discover``.

- :class:`Digest` (``<ns>/r/<rank>``, 33 bytes at most with a 6-digit local rank): a rank's
  host and fast domain as two 12-hex-digit hashes, and its local rank (``-``: unknown);
- :class:`RunLine` (one line of ``<ns>/runs`` per run of ranks): the full record of the
  rank that starts a run;
- :class:`Answer` (``<ns>/answer``, written once): the machine's ``Topology.to_dict()`` data
  with a fresh random nonce (so no value written before the call can name it), or the fault
  that stopped the call;
- ``<ns>/ok/<nonce>/<rank>``: a rank's mark that it checked the answer of that nonce (its
  presence is all it says; only read to name who did not check);
- :class:`RollCall` (an answer, written once, only after a timeout with every digest there
  but not every rank counted): a fresh nonce and how many answers to wait for; each rank
  that reads it sets ``<ns>/roll/<nonce>/<rank>`` (its presence is all it says) and counts
  itself in ``<ns>/roll/<nonce>/n``; the one that reaches the number sets
  ``<ns>/roll/<nonce>/all``;
- :class:`Verdict` (``<ns>/verdict``, written once): what every rank adopts: the answer
  (by its SHA-256) or a :class:`Fault`.

>>> d = Digest("0123456789ab", "ba9876543210", 3)
>>> Digest.read(d.encode(), "k", 8) == d, d.encode()
(True, b'1:0123456789ab:ba9876543210:3')
>>> try:
...     Digest.read(b"1:0123456789ab:ba9876543210:9", "ns/r/2", 8)
... except DiscoveryError as e:
...     print(e)
key 'ns/r/2' (claimed as rank 2's): the local rank 9 is past the world
(valid: 0 <= local rank < 8 or '-')
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import attrs

from layout import show

from .._core import DiscoveryError, StoreRecordError
from ._records import read_json

__all__ = ["MOST_ANSWER_BYTES", "VERSION", "Answer", "Digest", "Fault", "RollCall", "RunLine",
           "Verdict", "sha"]

VERSION = 1
"""The version every discovery record carries."""

MOST_ANSWER_BYTES = 1 << 24
"""The largest answer read (as the largest topology file the command reads)."""

_HEX12 = re.compile(r"[0-9a-f]{12}")
_NONCE = re.compile(r"[0-9a-f]{16}")
_MOST_TEXT = 256  # a hostname, a domain label, a call's namespace
_MOST_REASON = 2000
_MOST_LINE = 4096  # a line of the longest texts a DiscoveryRecord takes, each escaped


def sha(raw: bytes) -> str:
    """The SHA-256 of ``raw``, in hex: what a verdict binds an answer by."""
    return hashlib.sha256(raw).hexdigest()


def _bad(key: str, writer: int | None, why: str) -> DiscoveryError:
    """The error of a bad value at ``key``; ``writer``: the rank it claims to be from (a
    claim: the store is not trusted, and a value planted as that rank's reads alike)."""
    who = f" (claimed as rank {writer}'s)" if writer is not None else ""
    return DiscoveryError(f"key {key!r}{who}: {why}")


def _text(value: object, key: str, what: str, writer: int | None = None, *,
          most: int = _MOST_TEXT) -> str:
    if type(value) is not str or not 0 < len(value) <= most or "\n" in value:
        raise _bad(key, writer, f"{what} must be a str of 1 to {most} characters without "
                                f"newlines, got {show(value)}")
    return value


def _index(value: object, key: str, what: str, world: int, writer: int | None = None) -> int:
    if type(value) is not int or not 0 <= value < world:
        raise _bad(key, writer, f"{what} {show(value)} is past the world (valid: 0 <= "
                                f"{what} < {world:,})")
    return value


def _json(raw: bytes, key: str, most: int, writer: int | None = None) -> Any:
    """``raw`` as JSON, at most ``most`` bytes, read by the store's one strict parser
    (:func:`~._records.read_json`), its refusal a :class:`~backend.DiscoveryError`."""
    try:
        return read_json(key, raw, most, writer=writer)
    except StoreRecordError as e:
        raise _bad(key, writer, f"is {e.reason}: {show(bytes(raw[:80]))}") from None


@attrs.frozen
class Digest:
    """A rank's host and domain hashes (12 hex digits each) and its local rank (None:
    unknown): what its neighbour compares, and what a rank checks an answer against."""

    host: str
    domain: str
    local_rank: int | None

    def encode(self) -> bytes:
        local = "-" if self.local_rank is None else str(self.local_rank)
        return f"{VERSION}:{self.host}:{self.domain}:{local}".encode()

    @classmethod
    def read(cls, raw: bytes, key: str, world: int) -> Digest:
        """The digest at ``key`` (rank ``key``'s last part wrote it), strictly."""
        writer = _writer(key)
        parts = raw.split(b":") if len(raw) <= 64 else []
        if len(parts) != 4 or parts[0] != str(VERSION).encode() or not all(
                _HEX12.fullmatch(p.decode("ascii", "replace")) for p in parts[1:3]):
            raise _bad(key, writer, f"is not a version-{VERSION} digest "
                                    f"(1:<12 hex>:<12 hex>:<local rank or ->): {show(raw[:80])}")
        local = parts[3].decode("ascii", "replace")
        if local == "-":
            return cls(parts[1].decode(), parts[2].decode(), None)
        if not (local.isascii() and local.isdigit() and len(local) <= 19
                and int(local) < world):
            raise _bad(key, writer, f"the local rank {local} is past the world (valid: 0 <= "
                                    f"local rank < {world:,} or '-')")
        return cls(parts[1].decode(), parts[2].decode(), int(local))

    def continues(self, prev: Digest) -> bool:
        """Whether a rank with this digest continues the run of the rank before it: the same
        host and domain, and the next device (or both devices unknown)."""
        if (self.host, self.domain) != (prev.host, prev.domain):
            return False
        if self.local_rank is None or prev.local_rank is None:
            return self.local_rank == prev.local_rank
        return prev.local_rank + 1 == self.local_rank


def _writer(key: str) -> int | None:
    last = key.rsplit("/", 1)[-1]
    return int(last) if last.isascii() and last.isdigit() and len(last) < 20 else None


@attrs.frozen
class RunLine:
    """The record of the rank that starts a run of ranks: its rank, host identity (16 hex
    digits), hostname, local rank and fast domain (None: the host alone)."""

    rank: int
    host: str
    hostname: str
    local_rank: int | None
    domain: str | None

    def encode(self) -> bytes:
        return (json.dumps([VERSION, self.rank, self.host, self.hostname, self.local_rank,
                            self.domain]) + "\n").encode()

    @classmethod
    def read(cls, line: bytes, key: str, number: int, world: int) -> RunLine:
        """Line ``number`` (from 1) of ``key``, strictly."""
        where = f"{key}, line {number}"
        data = _json(line, where, _MOST_LINE)
        if type(data) is not list or len(data) != 6 or data[0] != VERSION or \
                type(data[0]) is not int:
            raise _bad(where, None, f"is not a version-{VERSION} run record [1, rank, host, "
                                    f"hostname, local_rank, domain]: {show(line[:80])}")
        _, rank, host, hostname, local, domain = data
        rank = _index(rank, where, "rank", world)
        return cls(rank, _text(host, where, "the host's identity", rank, most=64),
                   _text(hostname, where, "the hostname", rank),
                   None if local is None else _index(local, where, "local rank", world, rank),
                   None if domain is None else _text(domain, where, "the domain", rank,
                                                     most=_MOST_TEXT + 16))

    @classmethod
    def read_all(cls, raw: bytes, key: str, world: int) -> list[RunLine]:
        """Every line of ``key``, in rank order; a rank on two lines, or no line for rank 0,
        is refused (a stale or planted line)."""
        if len(raw) > world * _MOST_LINE:
            raise _bad(key, None, f"holds {len(raw):,} bytes, more than {world:,} runs of "
                                  f"at most {_MOST_LINE:,} bytes")
        lines = [cls.read(line, key, i, world)
                 for i, line in enumerate(raw.split(b"\n"), 1) if line]
        lines.sort(key=lambda r: r.rank)
        for a, b in zip(lines, lines[1:]):
            if a.rank == b.rank:
                raise _bad(key, a.rank, f"rank {a.rank} starts a run on two lines")
        if not lines or lines[0].rank != 0:
            raise _bad(key, None, "no run starts at rank 0")
        return lines


def _clip(text: str, most: int) -> str:
    """``text`` as one line of at most ``most`` characters (what the reader accepts)."""
    text, cut = text.replace("\n", " "), " ... (cut to fit a record)"
    return text if len(text) <= most else text[:most - len(cut)] + cut


def _clip_reason(reason: str) -> str:
    return _clip(reason, _MOST_REASON)


def _clip_key(key: str | None) -> str | None:
    return None if key is None else _clip(key, _MOST_TEXT)


@attrs.frozen
class Fault:
    """Why a discovery call failed: the rank and the key at fault, where known.  The reason
    and key are cut to what :meth:`of` reads, so a fault always fits its verdict."""

    reason: str = attrs.field(converter=_clip_reason)
    rank: int | None = None
    key: str | None = attrs.field(default=None, converter=_clip_key)

    def data(self) -> dict[str, Any]:
        return {"reason": self.reason, "rank": self.rank, "key": self.key}

    @classmethod
    def of(cls, data: object, key: str, world: int) -> Fault:
        if type(data) is not dict or set(data) != {"reason", "rank", "key"}:
            raise _bad(key, None, f"a fault is {{reason, rank, key}}, got {show(data)}")
        return cls(_text(data["reason"], key, "the reason", most=_MOST_REASON),
                   None if data["rank"] is None else _index(data["rank"], key, "rank", world),
                   None if data["key"] is None else _text(data["key"], key, "the key"))

    def __str__(self) -> str:
        return self.reason


def _header(data: object, key: str, call: str, world: int, fields: set[str]) -> dict[str, Any]:
    """A record's ``{"v", "call", "world", ...}`` checked against this call."""
    want = {"v", "call", "world", *fields}
    if type(data) is not dict or set(data) != want:
        raise _bad(key, None, f"is not a version-{VERSION} record of this call (keys "
                              f"{sorted(want)}): {show(data)}")
    if data["v"] != VERSION or type(data["v"]) is not int:
        raise _bad(key, None, f"has version {show(data['v'])}; this library reads {VERSION}")
    if data["call"] != call or data["world"] != world or type(data["world"]) is not int:
        raise _bad(key, None, f"belongs to another call or world ({show(data['call'])}, world "
                              f"{show(data['world'])}), not {call!r} of {world:,} ranks: a "
                              "stale or planted value")
    return data


@attrs.frozen
class RollCall:
    """A roll call: written as the answer by the first rank to time out when every rank's
    digest is there but not every rank counted itself (a digest written before the call for
    a rank that never came reads as one its rank wrote); ``nonce`` (16 hex digits, drawn
    then: no value written before the call names its keys) and ``expect``, the answers its
    caller waits for (the ranks counted, less itself)."""

    nonce: str
    expect: int

    def data(self) -> dict[str, Any]:
        return {"nonce": self.nonce, "expect": self.expect}

    @classmethod
    def of(cls, data: object, key: str, world: int) -> RollCall:
        if type(data) is not dict or set(data) != {"nonce", "expect"}:
            raise _bad(key, None, f"a roll call is {{nonce, expect}}, got {show(data)}")
        if type(data["nonce"]) is not str or not _NONCE.fullmatch(data["nonce"]):
            raise _bad(key, None, f"the nonce must be 16 hex digits, got {show(data['nonce'])}")
        return cls(data["nonce"], _index(data["expect"], key, "expect", world))


@attrs.frozen
class Answer:
    """The machine the last rank to arrive built (its ``Topology.to_dict()`` data) and the
    nonce it drew for it (16 hex digits), or the fault that stopped the call, or a
    :class:`RollCall`."""

    call: str
    world: int
    topology: dict[str, Any] | None
    fault: Fault | None
    nonce: str | None = None
    roll: RollCall | None = None

    def encode(self) -> bytes:
        body: dict[str, Any] = {"topology": self.topology, "nonce": self.nonce}
        if self.fault is not None:
            body = {"fault": self.fault.data()}
        elif self.roll is not None:
            body = {"roll": self.roll.data()}
        return json.dumps({"v": VERSION, "call": self.call, "world": self.world, **body}
                          ).encode()

    @classmethod
    def read(cls, raw: bytes, key: str, call: str, world: int) -> Answer:
        """The answer at ``key``, strictly (the topology's own data is read by
        ``Topology.from_dict``, which bounds every index by the world)."""
        data = _json(raw, key, MOST_ANSWER_BYTES)
        which = {"topology", "nonce"}
        if type(data) is dict:
            which = {"fault"} if "fault" in data else {"roll"} if "roll" in data else which
        data = _header(data, key, call, world, which)
        if "fault" in data:
            return cls(call, world, None, Fault.of(data["fault"], key, world))
        if "roll" in data:
            return cls(call, world, None, None, roll=RollCall.of(data["roll"], key, world))
        if type(data["topology"]) is not dict:
            raise _bad(key, None, f"the topology must be a dict, got {show(data['topology'])}")
        if type(data["nonce"]) is not str or not _NONCE.fullmatch(data["nonce"]):
            raise _bad(key, None, f"the nonce must be 16 hex digits, got {show(data['nonce'])}")
        return cls(call, world, data["topology"], None, data["nonce"])


@attrs.frozen
class Verdict:
    """What every rank of the call adopts: the answer whose SHA-256 is ``answer``, or the
    fault."""

    call: str
    world: int
    answer: str | None
    fault: Fault | None

    def encode(self) -> bytes:
        body = {"answer": self.answer} if self.fault is None else {"fault": self.fault.data()}
        return json.dumps({"v": VERSION, "call": self.call, "world": self.world, **body}
                          ).encode()

    @classmethod
    def read(cls, raw: bytes, key: str, call: str, world: int) -> Verdict:
        data = _json(raw, key, 16 * _MOST_REASON)  # a fault's text, each character escaped
        which = {"fault"} if type(data) is dict and "fault" in data else {"answer"}
        data = _header(data, key, call, world, which)
        if "fault" in data:
            return cls(call, world, None, Fault.of(data["fault"], key, world))
        if type(data["answer"]) is not str or not re.fullmatch(r"[0-9a-f]{64}", data["answer"]):
            raise _bad(key, None, f"the answer's SHA-256 must be 64 hex digits, got "
                                  f"{show(data['answer'])}")
        return cls(call, world, data["answer"], None)

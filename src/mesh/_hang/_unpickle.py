"""A pickle of builtins read in bounded work: :func:`load_builtins`.

Python's unpickler builds whatever the bytes say, in C, without a way to stop it: a dict
key that is a tuple shared with itself 48 times over (about 300 bytes) is hashed 2**48 times; a
64 MiB file of empty lists is 64 million lists (more than 3 GiB).  So a dump's pickle is run
here, opcode by opcode (:func:`pickletools.genops` parses them), by a small machine that
builds only builtin containers and scalars and counts as it builds:

- every opcode costs one unit, and a container put into another costs one unit the first
  time and its whole size each time after (a shared list counts at every use), so nothing
  built is larger than :data:`MAX_DUMP_UNITS` however it is walked, and the memory is
  about 100 bytes a unit at most (64 MiB of empty lists: about 400 MiB, then refused);
- a container, once put into another, is never filled again (a cycle, or a forged pickle
  growing a list it has already shared, is refused), so those sizes stay exact;
- containers nest at most :data:`MAX_DUMP_DEPTH` deep; the memo is numbered in order (as
  Python's and torch's picklers number it);
- dict keys and set items are ``str``, ``bytes``, ``None``, ``bool``, ``float`` or an
  ``int`` of at most 64 bits: hashing each costs its own size, once;
- every global (a class, a function) and every opcode that calls one is refused, so no
  code the file names can run.

All of it is Python: Ctrl-C stops it at the next opcode.  A torch dump of its full 2,000-call
ring with 20-frame stacks (1.9 MB) is about 630,000 units and 0.7 s on an idle machine
(the C unpickler: 0.06 s).
"""

from __future__ import annotations

import pickletools
from collections.abc import Callable, Iterator
from typing import Any

from .._core import FlightRecordError, show

__all__ = ["MAX_DUMP_DEPTH", "MAX_DUMP_UNITS", "load_builtins"]

MAX_DUMP_UNITS = 1 << 22
"""The most work one pickled dump may take (4,194,304 units: one an opcode, and a shared
container's whole size at each use; torch's full 2,000-call ring with 20-frame stacks takes
about 630,000, so a ring of about 13,000 calls with stacks, or 57,000 without, fits)."""

MAX_DUMP_DEPTH = 32
"""The deepest a pickled dump's containers may nest (torch's nest 5 deep)."""

_KEYS = (str, bytes, float, bool, type(None))
_SCALARS = frozenset({
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES",
    "BINBYTES8", "BYTEARRAY8"})
_CONSTANT: dict[str, Any] = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_EMPTY: dict[str, Callable[[], Any]] = {"EMPTY_LIST": list, "EMPTY_DICT": dict,
                                        "EMPTY_SET": set, "EMPTY_TUPLE": tuple}


_FRESH = -1
"""The meta of every empty container not yet shared nor filled: none of its own (64 million
empty lists cost their own memory only)."""

Meta = int | None
"""What is known of a value on the stack or in the memo: None for a scalar, :data:`_FRESH`,
or the index of the container in the machine's ``sizes``, ``depths`` and ``placed`` (plain
ints and bytes, which the garbage collector does not walk)."""


class _Machine:
    """The pickle machine: a stack of values and beside it their metas, the marks, the
    memo (values and metas by index), and the units left."""

    def __init__(self, units: int) -> None:
        self.stack: list[Any] = []
        self.metas: list[Meta] = []
        self.marks: list[int] = []
        self.memo: list[Any] = []  # by index: pickles number their memo 0, 1, 2...
        self.memo_metas: list[Meta] = []
        self.sizes: list[int] = []  # per container: its size in units,
        self.depths: list[int] = []  # how deep it nests,
        self.placed = bytearray()  # whether it is in another (then it is never filled again)
        self.left = units

    def run(self, data: bytes) -> Any:
        stack, metas, memo, memo_metas = self.stack, self.metas, self.memo, self.memo_metas
        ops: Iterator[tuple[Any, Any, Any]] = pickletools.genops(data)
        for op, arg, at in ops:
            self.left -= 1
            if self.left < 0:
                raise FlightRecordError(f"takes more than {MAX_DUMP_UNITS:,} units of work "
                                        "to read (opcodes, and a shared value's whole size "
                                        "at each use; torch's full 2,000-call ring takes "
                                        "about 630,000): not a dump torch writes")
            kind = _KIND.get(op.name)
            if kind is _SCALAR:  # the common opcodes inline: a dump is mostly these
                stack.append(_CONSTANT.get(op.name, arg))
                metas.append(None)
            elif kind is _MEMOIZE and stack:
                memo_metas.append(self.shareable())
                memo.append(stack[-1])
            elif kind is _GET and 0 <= arg < len(memo):
                stack.append(memo[arg])
                metas.append(memo_metas[arg])
            elif op.name in _EMPTY:
                stack.append(_EMPTY[op.name]())
                metas.append(_FRESH)
            elif kind is not _NOTHING:
                _OPS.get(op.name, _refused)(self, op.name, arg, at)
        if not self.stack:
            raise FlightRecordError("cannot be decoded (its pickle ends with nothing built)")
        return self.stack[-1]

    def new(self) -> int:
        """A container's own meta: size 1, depth 1, not placed."""
        self.sizes.append(1)
        self.depths.append(1)
        self.placed.append(0)
        return len(self.sizes) - 1

    def shareable(self) -> Meta:
        """The meta of the value on top, its own (not :data:`_FRESH`): it is about to be
        shared (memoized or duplicated) or filled."""
        if self.metas[-1] == _FRESH:
            self.metas[-1] = self.new()
        return self.metas[-1]

    def push(self, value: Any, meta: Meta) -> None:
        self.stack.append(value)
        self.metas.append(meta)

    def pop(self, n: int) -> tuple[list[Any], list[Meta]]:
        """The top ``n`` values and their metas (none of them below the last mark)."""
        floor = self.marks[-1] if self.marks else 0
        if len(self.stack) - n < floor:
            raise FlightRecordError("cannot be decoded (its pickle pops an empty stack)")
        return self.cut(len(self.stack) - n)

    def pop_mark(self) -> tuple[list[Any], list[Meta]]:
        """The values above the last mark and their metas; the mark goes."""
        if not self.marks:
            raise FlightRecordError("cannot be decoded (its pickle uses a mark it never set)")
        return self.cut(self.marks.pop())

    def cut(self, at: int) -> tuple[list[Any], list[Meta]]:
        values, metas = self.stack[at:], self.metas[at:]
        del self.stack[at:], self.metas[at:]
        return values, metas

    def top(self, kind: type) -> tuple[Any, int]:
        """The container on top of the stack, of ``kind``, that may still be filled."""
        if not self.stack or type(self.stack[-1]) is not kind:
            raise FlightRecordError(f"cannot be decoded (its pickle fills a "
                                    f"{kind.__name__} that is not there)")
        meta = self.shareable()
        assert meta is not None, "a container's meta is an int"
        if self.placed[meta]:
            raise FlightRecordError(f"fills a {kind.__name__} after using it (a cycle, or a "
                                    "shared value changed): no dump does")
        return self.stack[-1], meta

    def placed_all(self, into: int, values: list[Any], metas: list[Meta],
                   key: bool = False) -> list[Any]:
        """``values`` (with their ``metas``), counted into the container ``into``."""
        if not key and metas.count(None) == len(metas):  # scalars: nothing to count
            return values
        return [self.place(into, v, m, key) for v, m in zip(values, metas)]

    def place(self, into: int, value: Any, meta: Meta, key: bool = False) -> Any:
        """``value``, counted into the container ``into``: its size (the whole of it if it
        was used before) and its depth; as a key, it must be hashable in its own size."""
        if key and not (isinstance(value, _KEYS) or (type(value) is int and
                                                     -(1 << 63) <= value < 1 << 63)):
            raise FlightRecordError(f"has a dict key or set item of type "
                                    f"{type(value).__name__}: a dump's are names and small "
                                    "numbers")
        if meta is None:
            return value
        if meta == into:
            raise FlightRecordError("holds a container inside itself: no dump does")
        size, depth = (1, 1) if meta == _FRESH else (self.sizes[meta], self.depths[meta])
        if meta != _FRESH and self.placed[meta]:  # a shared value: its whole size again
            self.left -= size - 1
        elif meta != _FRESH:
            self.placed[meta] = 1
        self.sizes[into] += size
        if depth >= self.depths[into]:
            self.depths[into] = depth + 1
            if depth + 1 > MAX_DUMP_DEPTH:
                raise FlightRecordError(f"nests containers more than {MAX_DUMP_DEPTH} deep "
                                        "(torch's nest 5 deep): not a dump torch writes")
        return value


def _built(m: _Machine, name: str, arg: Any, at: int) -> None:
    """LIST, TUPLE, DICT, FROZENSET and TUPLE1-3: a new container of the items above the
    mark (or the top 1-3)."""
    values, metas = m.pop(int(name[-1])) if name[-1].isdigit() else m.pop_mark()
    meta = m.new()
    if name == "DICT":
        m.push(dict(_pairs(m, meta, values, metas)), meta)
    elif name == "FROZENSET":
        m.push(frozenset(m.placed_all(meta, values, metas, key=True)), meta)
    else:
        placed = m.placed_all(meta, values, metas)
        m.push(placed if name == "LIST" else tuple(placed), meta)


def _pairs(m: _Machine, meta: int, values: list[Any], metas: list[Meta]
           ) -> list[tuple[Any, Any]]:
    """A dict's items (keys and values taking turns), counted into the dict ``meta``."""
    if len(values) % 2:
        raise FlightRecordError("cannot be decoded (a dict of an odd number of items)")
    keys = m.placed_all(meta, values[::2], metas[::2], key=True)
    return list(zip(keys, m.placed_all(meta, values[1::2], metas[1::2])))


def _filled(m: _Machine, name: str, arg: Any, at: int) -> None:
    """APPEND(S), SETITEM(S), ADDITEMS: items put into the container below them."""
    values, metas = m.pop({"APPEND": 1, "SETITEM": 2}[name]) if name in ("APPEND", "SETITEM") \
        else m.pop_mark()
    if name.startswith("APPEND"):
        into, meta = m.top(list)
        into.extend(m.placed_all(meta, values, metas))
    elif name.startswith("SETITEM"):
        into, meta = m.top(dict)
        into.update(_pairs(m, meta, values, metas))
    else:
        into, meta = m.top(set)
        into.update(m.placed_all(meta, values, metas, key=True))


def _memo(m: _Machine, name: str, arg: Any, at: int) -> None:
    """PUT, MEMOIZE, GET and their binary forms; DUP; MARK, POP, POP_MARK."""
    if name in ("MARK", "POP_MARK"):
        m.marks.append(len(m.stack)) if name == "MARK" else m.pop_mark()
    elif name == "POP":
        m.pop(1)
    elif name.endswith("GET") or name == "DUP":
        got = ((m.memo[arg], m.memo_metas[arg]) if 0 <= arg < len(m.memo) else None) \
            if name != "DUP" else (m.stack[-1], m.shareable()) if m.stack else None
        if got is None:
            raise FlightRecordError(f"cannot be decoded (its pickle reads memo {arg!r}, "
                                    "never written)")
        m.push(*got)
    elif not m.stack or (name != "MEMOIZE" and not 0 <= arg <= len(m.memo)):
        raise FlightRecordError(f"cannot be decoded (its pickle memoizes an empty stack or "
                                f"at {arg!r}, past the memo's end)")
    elif name == "MEMOIZE" or arg == len(m.memo):
        m.memo_metas.append(m.shareable())
        m.memo.append(m.stack[-1])
    else:
        m.memo_metas[arg] = m.shareable()
        m.memo[arg] = m.stack[-1]


def _refused(m: _Machine, name: str, arg: Any, at: int) -> None:
    """Every opcode that names a global, calls one or reads outside the file."""
    if name in ("GLOBAL", "INST") and isinstance(arg, str):
        raise FlightRecordError(f"names the object {arg.replace(' ', '.')}")
    if name == "STACK_GLOBAL" and len(m.stack) >= 2:
        raise FlightRecordError(f"names the object {show(m.stack[-2])[:80]}."
                                f"{show(m.stack[-1])[:80]}".replace("'", ""))
    raise FlightRecordError(f"uses the pickle opcode {name} at byte {at}: a dump holds only "
                            "builtin containers and scalars")


_OPS: dict[str, Callable[[_Machine, str, Any, int], None]] = {
    **dict.fromkeys(("LIST", "TUPLE", "DICT", "FROZENSET", "TUPLE1", "TUPLE2", "TUPLE3"),
                    _built),
    **dict.fromkeys(("APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS"), _filled),
    **dict.fromkeys(("MARK", "POP", "POP_MARK", "DUP", "PUT", "BINPUT", "LONG_BINPUT",
                     "MEMOIZE", "GET", "BINGET", "LONG_BINGET"), _memo),
}
_SCALAR, _MEMOIZE, _GET, _NOTHING = "scalar", "memoize", "get", "nothing"
_KIND: dict[str, object] = {
    **dict.fromkeys(_SCALARS, _SCALAR), **dict.fromkeys(_EMPTY, _NOTHING),
    **dict.fromkeys(("PROTO", "FRAME", "STOP"), _NOTHING), "MEMOIZE": _MEMOIZE,
    "GET": _GET, "BINGET": _GET, "LONG_BINGET": _GET}
"""The opcodes :meth:`_Machine.run` does inline (the most of a dump); the others go to their
function in :data:`_OPS` (a MEMOIZE on an empty stack or a GET of a memo never written
falls to :func:`_memo`, which refuses it), or, absent there, are refused."""


def load_builtins(data: bytes) -> Any:
    """The value pickled in ``data``: builtin containers and scalars only, in work bounded
    by :data:`MAX_DUMP_UNITS` and nesting by :data:`MAX_DUMP_DEPTH`; anything else is a
    :class:`~mesh.FlightRecordError` whose words complete "it ...".  A damaged pickle raises
    what :func:`pickletools.genops` raises for it (``ValueError``)."""
    return _Machine(MAX_DUMP_UNITS).run(data)

"""What a rank's program reads that depends on its rank, recorded so that the ranks whose
programs behave alike can be found without running them (``_classes``).

Under automatic classes, a program's rank-dependent reads answer with :class:`Sym` values:
its rank (``backend.rank``, ``mesh.get_rank()``, ``dist.get_rank()``) and its coordinates
(``mesh.get_coordinate()``, ``mesh.get_local_rank(dim)``).  A ``Sym`` is not an ``int``: it
keeps the expression it was computed by (``stage + 1``, ``rank % 8 == 3``) and every use
of it that can steer the program is recorded in :class:`Reads` with its answer on this
rank: a comparison or truth test (its outcome), and anything that needs the number itself
(an index, a hash, a shape, a format: the value).  Arithmetic with ints makes another
``Sym``.  Since a ``Sym`` exposes its value only through those methods, what the program
learns of its rank is exactly the recorded answers: a rank on which every recorded
expression gives the same answer takes the same path (a deterministic program), so its
run is this rank's, moved to its own groups.

Every expression is evaluated for all ranks at once (:class:`Evaluator`: NumPy over a
coordinate table per view and dim, built once from the layout's groups), so grouping the
world costs O(world x distinct reads) array work (NumPy, imported only then).  A read from
the environment (``RANK``) is recorded as the rank itself.  Ints stay within +-2^61
(beyond, a rank is not grouped: it runs itself).

>>> reads = Reads(5)
>>> r = reads.rank()
>>> (r % 4 == 1, r // 4 + 1 >= 1)
(True, True)
>>> Evaluator(8).matching(reads, range(8)).tolist()  # ranks with the same answers
[False, True, False, False, False, True, False, False]
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from mesh import MeshView

if TYPE_CHECKING:
    import numpy as np

from ._events import library_dirs

__all__ = ["Evaluator", "Reads", "Sym", "asked_by_program", "plain", "watched_environment"]

Expr = Any  # ("rank",) | ("coord", view, k) | ("in", view) | (op, a[, b]); a, b: Expr | int
_BIG = 1 << 61


_BACKEND = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def asked_by_program(depth: int) -> bool:
    """Whether the first frame ``depth`` up outside the standard library and the facade's
    ``get_rank`` is the program's own (not torch's or meshlayout's).  (``_events.
    program_reads`` answers whether the program reads at all; this one also looks through
    the facade's ``get_rank`` called by the library itself, e.g. for ``mesh.mesh``.)"""
    frame = sys._getframe(depth)
    while frame.f_back is not None:
        name = frame.f_code.co_filename
        stdlib = name.startswith(_STDLIB) and "site-packages" not in name
        if not (stdlib or (frame.f_code.co_name == "get_rank" and name.startswith(_BACKEND))):
            break
        frame = frame.f_back
    return not frame.f_code.co_filename.startswith(library_dirs())


class Reads:
    """One rank's rank-dependent reads: each expression with its answer on that rank, in
    order of first use (``seen``)."""

    def __init__(self, rank: int) -> None:
        self.rank_value = rank
        self.seen: dict[Expr, Any] = {}

    def note(self, expr: Expr, answer: Any) -> Any:
        """Record that the program learnt ``expr``'s ``answer``; returns the answer."""
        self.seen.setdefault(expr, answer)
        return answer

    def rank(self) -> Sym:
        """The rank, as the program reads it."""
        return Sym(self, ("rank",), self.rank_value)

    def coordinate(self, view: MeshView, coordinate: tuple[int, ...] | None,
                   depth: int = 3) -> tuple[Any, ...] | None:
        """``view``'s coordinate as the program reads it (``Sym`` values for the program;
        for the library's own reads, plain ints with each answer recorded)."""
        self.note(("in", view), coordinate is not None)
        if coordinate is None:
            return None
        exprs = [("coord", view, k) for k in range(len(coordinate))]
        if asked_by_program(depth):
            return tuple(Sym(self, e, c) for e, c in zip(exprs, coordinate))
        for e, c in zip(exprs, coordinate):
            self.note(e, c)
        return coordinate

    def local(self, view: MeshView, k: int, value: int, depth: int = 3) -> Any:
        """``view``'s coordinate along dim ``k`` as the program reads it."""
        self.note(("in", view), True)
        if asked_by_program(depth):
            return Sym(self, ("coord", view, k), value)
        return self.note(("coord", view, k), value)


def plain(x: Any) -> Any:
    """``x``, a ``Sym`` made an int (its value recorded as read)."""
    return x.__index__() if isinstance(x, Sym) else x


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "<<": operator.lshift, ">>": operator.rshift}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge}


class Sym:
    """A rank-dependent int the program read: arithmetic with ints gives another ``Sym``;
    every other use is recorded in its :class:`Reads` with this rank's answer."""

    __slots__ = ("_expr", "_reads", "_value")

    def __init__(self, reads: Reads, expr: Expr, value: int) -> None:
        self._reads, self._expr, self._value = reads, expr, value

    def _exact(self) -> int:
        value: int = self._reads.note(self._expr, self._value)
        return value

    def __index__(self) -> int:
        return self._exact()

    __int__ = __index__

    def __hash__(self) -> int:
        return hash(self._exact())

    def __float__(self) -> float:
        return float(self._exact())

    def __repr__(self) -> str:
        return repr(self._exact())

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(self._exact(), spec)

    def __bool__(self) -> bool:
        return bool(self._reads.note(("!=", self._expr, 0), self._value != 0))

    def __neg__(self) -> Any:
        return Sym(self._reads, ("-", 0, self._expr), -self._value)

    def __pos__(self) -> Any:
        return self

    def __abs__(self) -> Any:
        return abs(self._exact())

    def __truediv__(self, other: Any) -> Any:
        return self._exact() / plain(other)

    def __rtruediv__(self, other: Any) -> Any:
        return plain(other) / self._exact()

    def __pow__(self, other: Any) -> Any:
        return self._exact() ** plain(other)

    def __rpow__(self, other: Any) -> Any:
        return plain(other) ** self._exact()

    def __round__(self, digits: int | None = None) -> Any:
        return round(self._exact(), digits)

    def __reduce__(self) -> Any:
        return (int, (self._exact(),))


def _operand(x: Any) -> tuple[Expr, int] | None:
    if isinstance(x, Sym):
        return x._expr, x._value
    if type(x) is int or type(x) is bool:
        return int(x), int(x)
    return None


def _arith(op: str, flipped: bool) -> Callable[[Sym, Any], Any]:
    fn = _ARITH[op]

    def method(self: Sym, other: Any) -> Any:
        found = _operand(other)
        if found is None:  # a float, a tensor...: the value itself is read
            return fn(other, self._exact()) if flipped else fn(self._exact(), other)
        expr, value = found
        a, b = ((expr, value), (self._expr, self._value)) if flipped else \
            ((self._expr, self._value), (expr, value))
        result = fn(a[1], b[1])
        if abs(result) >= _BIG or abs(a[1]) >= _BIG or abs(b[1]) >= _BIG:
            return self._reads.note((op, a[0], b[0]), result)
        return Sym(self._reads, (op, a[0], b[0]), result)
    return method


def _compare(op: str) -> Callable[[Sym, Any], Any]:
    fn = _COMPARE[op]

    def method(self: Sym, other: Any) -> Any:
        found = _operand(other)
        if found is None:
            if isinstance(other, (float, complex)) or hasattr(other, "__index__"):
                return fn(self._exact(), other)
            return NotImplemented
        return self._reads.note((op, self._expr, found[0]), fn(self._value, found[1]))
    return method


for _op in _ARITH:
    _name = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod", "&": "and",
             "|": "or", "^": "xor", "<<": "lshift", ">>": "rshift"}[_op]
    setattr(Sym, f"__{_name}__", _arith(_op, False))
    setattr(Sym, f"__r{_name}__", _arith(_op, True))
for _op, _name in (("==", "eq"), ("!=", "ne"), ("<", "lt"), ("<=", "le"), (">", "gt"),
                   (">=", "ge")):
    setattr(Sym, f"__{_name}__", _compare(_op))


class Evaluator:
    """Evaluates recorded expressions for many ranks at once (NumPy), with each view's
    coordinate tables built once (O(world) each)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self._tables: dict[tuple[MeshView, int], np.ndarray] = {}

    def matching(self, reads: Reads, ranks: Iterable[int]) -> np.ndarray:
        """For each of ``ranks``, whether every expression of ``reads`` gives its answer."""
        import numpy as np
        idx = np.asarray(list(ranks) if not isinstance(ranks, np.ndarray) else ranks,
                         dtype=np.int64)
        ok = np.ones(len(idx), dtype=bool)
        memo: dict[Expr, np.ndarray] = {}
        for expr, answer in reads.seen.items():
            if not ok.any():
                break
            values, valid = self._value(expr, idx, memo)
            ok &= valid & (values == answer)
        return ok

    def _value(self, expr: Expr, idx: np.ndarray, memo: dict[Expr, Any]
               ) -> tuple[np.ndarray, np.ndarray]:
        """``expr`` at every rank of ``idx``, and where it is defined (no division by zero,
        no overflow)."""
        import numpy as np

        if isinstance(expr, int):
            return np.full(len(idx), expr, dtype=np.int64), np.ones(len(idx), dtype=bool)
        found = memo.get(expr)
        if found is None:
            found = memo[expr] = self._compute(expr, idx, memo)
        return found

    def _compute(self, expr: Expr, idx: np.ndarray, memo: dict[Expr, Any]
                 ) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        head = expr[0]
        every = np.ones(len(idx), dtype=bool)
        if head == "rank":
            return idx, every
        if head in ("coord", "in"):
            table = self._table(expr[1], expr[2] if head == "coord" else 0)[idx]
            return (table if head == "coord" else table >= 0), every
        (a, va), (b, vb) = (self._value(expr[1], idx, memo), self._value(expr[2], idx, memo))
        valid = va & vb & (np.abs(a) < _BIG) & (np.abs(b) < _BIG)
        if head in _COMPARE:
            return _COMPARE[head](a, b), valid
        if head in ("//", "%"):
            valid &= b != 0
            b = np.where(b == 0, 1, b)
        elif head == ">>":  # any count >= 0 is Python's (0 or -1 past the width)
            valid &= b >= 0
            b = np.clip(b, 0, 63)
        elif head == "<<":
            valid &= (b >= 0) & (b < 31) & (np.abs(a) < 1 << 30)
            b = np.clip(b, 0, 30)
        if head == "*":
            valid &= (np.abs(a) < 1 << 30) & (np.abs(b) < 1 << 30)
        with np.errstate(all="ignore"):
            return _ARITH[head](a, b), valid

    def _table(self, view: MeshView, k: int) -> np.ndarray:
        """Every rank's coordinate along ``view``'s dim ``k`` (-1: not in the universe)."""
        import numpy as np

        table = self._tables.get((view, k))
        if table is None:
            table = np.full(max(self.world, view.ranks.size), -1, dtype=np.int64)
            groups = np.asarray(view.groups(k, limit=table.size), dtype=np.int64)
            table[groups] = np.arange(view.shape[k], dtype=np.int64)
            self._tables[(view, k)] = table
        return table


_ENV_RANKS = ("RANK", "GROUP_RANK", "LOCAL_RANK", "ROLE_RANK")


@contextlib.contextmanager
def watched_environment(rank: int, world: int, reads: Reads | None) -> Iterator[None]:
    """For one rank's run: ``RANK`` and ``WORLD_SIZE`` set as torchrun sets them, and with
    ``reads``, a read of ``RANK`` by the program recorded (as the rank itself)."""
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    original = os.environ
    if reads is not None:
        os.environ = _Watched(original, reads)  # noqa: B003 (os.getenv reads it too; the same variables)
    try:
        yield
    finally:
        os.environ = original  # noqa: B003 (the real mapping back)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Watched(os._Environ[str]):
    """``os.environ`` for a run: the same variables; a program's read of its rank noted."""

    def __init__(self, env: Any, reads: Reads) -> None:
        super().__init__(env._data, env.encodekey, env.decodekey, env.encodevalue,
                         env.decodevalue)
        self._reads = reads

    def __getitem__(self, key: str) -> str:
        if key in _ENV_RANKS and asked_by_program(2):
            self._reads.note(("rank",), self._reads.rank_value)
        value: str = super().__getitem__(key)
        return value

"""The machinery of the layout fuzz (``test_layout_fuzz_*.py``): junk written as source,
strategies, a reference reader of values, one oracle per public function and method.

Fuzz laws: every bad input to the layout algebra raises a ``LayoutError`` that names it.

For every public function of :mod:`layout` and every public method of
:class:`~layout.Layout`, called with arbitrary junk, the call either returns a
correct value or raises a :class:`~layout.LayoutError` subclass: never a bare
``TypeError``, ``RecursionError``, ``IndexError``, ``OverflowError`` ... nor
Python's "Exceeds the limit (4300 digits)" ``ValueError``.  Junk is never
silently accepted (strings, bytes, sets, dicts, lists where a tuple is
required, bools, floats, negative sizes or strides); integer-likes (NumPy ints)
may be accepted but come back as plain ``int``; nesting deeper than
``layout.MAX_DEPTH`` is refused; every layout that exists prints, measures and
hashes; messages stay short, even for huge ints; a pickle goes back through
validation.

Arguments are drawn as Python *source* (:class:`Junk`), so a failure prints a
call that can be pasted into a shell with this module's names imported, such as
``flatten('ab')`` or ``Layout(deep(497))``.  Each failure class (an exception
leaked from a given place, junk accepted, valid input refused, a wrong result)
raises its own exception type, so Hypothesis shrinks and reports each one
separately.
"""

from __future__ import annotations

import copy
import copyreg
import math
import operator
import pickle
import re
import reprlib
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple, NoReturn

import brute
import hostile
import numpy as np
from hostile import deep_tuple
from hypothesis import strategies as st

import layout
from layout import Layout, LayoutError

MAX_DEPTH: int = getattr(layout, "MAX_DEPTH", 64)


MESSAGE_LIMIT = 2000


BIG = 10**5000


# ---- the names junk is written with -------------------------------------------------------

def deep(n: int, leaf: object = 2) -> object:
    """``leaf`` wrapped in ``n`` 1-tuples (depth ``n`` for an int leaf)."""
    return deep_tuple(n, leaf)


def nest_layout(n: int) -> Layout:
    """``Layout(2)`` wrapped ``n`` times by ``make_layout``: a depth-``n`` layout built by an op."""
    L = Layout(2)
    for _ in range(n):
        L = layout.make_layout(L)
    return L


class Pair(NamedTuple):
    a: object
    b: object


class Junk(hostile.Junk):
    NS: ClassVar[dict[str, object]] = {
        **{name: getattr(layout, name) for name in layout.__all__}, **hostile.HOSTILE,
        "np": np, "Fraction": Fraction, "MAX_DEPTH": MAX_DEPTH, "deep": deep,
        "nest_layout": nest_layout, "Pair": Pair,
    }


# ---- strategies (of source strings) -------------------------------------------------------

_JUNK_LEAVES = (
    "0", "1", "-1", "2", "3", "-3", "2**63", "2**200", "-(2**200)", "10**5000", "-(10**5000)",
    "True", "False", "2.0", "float('nan')", "float('inf')", "None", "'ab'", "''", "'4'",
    "b'x'", "b''", "bytearray(b'\\x02')", "[2, 3]", "[]", "[[2]]", "{2, 3}", "set()",
    "frozenset({4})", "{2: 3}", "{}", "range(3)", "iter((2, 3))", "np.int64(3)", "np.int64(-2)",
    "np.uint8(4)", "np.bool_(True)", "np.float64(2.0)", "np.array(3)", "np.array([2, 3])",
    "IntSub(3)", "Color.RED", "Pair(2, 3)", "BadIndex()", "NonIntIndex()", "RaisingIndex()",
    "HostileRepr()", "Fraction(3)", "3j", "selfref_list()", "slice(1, 2)", "Ellipsis",
    "object()", "Layout(4)", "Layout((2, 4))",
)


_LAYOUT_LEAVES = (
    "Layout(4)", "Layout((2, 4))", "Layout((2, (2, 2)), (1, (4, 2)))", "Layout(())",
    "Layout(1, 0)", "Layout((3, 6), (7, 21))", "Layout((6, 4), (5, 1))", "Layout(10**5000)",
    "Layout((2**200, 3), (3, 2**200))", "Layout((2, 2**63), (0, 1))", "Layout((np.int64(2), 3))",
    "Layout((2, 10**5000), (0, 1))", "Layout((10**5000, 2), (1, 1))",
    "Layout(deep(MAX_DEPTH, 2), deep(MAX_DEPTH, 1))", "Layout(deep(MAX_DEPTH - 1, (2, 3)))",
    "nest_layout(MAX_DEPTH)", "make_layout()",
)


_BIG_INTS = ("2**63", "2**200", "10**5000", "-(10**5000)", "np.int64(5)")


depths = st.one_of(
    st.sampled_from(sorted({1, 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 490, 497, 1000})),
    st.integers(1, 1100))


def _tup(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _deep_src(t: tuple[int, str]) -> str:
    return f"deep({t[0]}, {t[1]})"


def _nested(leaf: st.SearchStrategy[str], lists: bool = False,
            max_leaves: int = 6) -> st.SearchStrategy[str]:
    """Tuples (and, with ``lists``, lists) of ``leaf`` and ``deep(n, ...)`` nests of them."""
    def extend(kids: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        out = [st.lists(kids, max_size=4).map(_tup), st.tuples(depths, kids).map(_deep_src)]
        if lists:
            out.append(st.lists(kids, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"))
        return st.one_of(out)
    return st.recursive(leaf, extend, max_leaves=max_leaves)


junk_leaves = st.one_of(st.sampled_from(_JUNK_LEAVES), st.integers(-4, 8).map(str))


junk = _nested(junk_leaves, lists=True)


_sizes = st.sampled_from(["1", "2", "3", "4", "5", "6", "2", "4", "10**5000"])


_strides = st.sampled_from([*map(str, range(13)), "10**5000"])


_shape_trees = st.recursive(_sizes, lambda k: st.lists(k, min_size=1, max_size=3).map(tuple),
                            max_leaves=5)


def _src(tree: Any) -> str:
    return tree if isinstance(tree, str) else _tup([_src(t) for t in tree])


@st.composite
def small_layouts(draw: st.DrawFn) -> str:
    """``Layout(shape, stride)`` source: sizes 1..6 (or 10**5000), strides 0..12 (or 10**5000)."""
    shape = draw(_shape_trees)

    def strides(t: Any) -> Any:
        return draw(_strides) if isinstance(t, str) else tuple(map(strides, t))
    return f"Layout({_src(shape)}, {_src(strides(shape))})"


layouts = st.one_of(small_layouts(), st.sampled_from(_LAYOUT_LEAVES))


int_tuples = st.one_of(st.just("()"), _nested(st.one_of(
    st.integers(-2, 6).map(str), st.sampled_from(_BIG_INTS)), max_leaves=5))


tilers = _nested(st.one_of(layouts, st.integers(-1, 6).map(str), st.just("None")), max_leaves=4)


coords = _nested(st.one_of(st.integers(-1, 6).map(str), st.just("None"),
                           st.sampled_from(_BIG_INTS)), max_leaves=5)


profiles = _nested(st.sampled_from(["1", "None", "0", "-1", "2"]), max_leaves=4)


ints = st.one_of(st.integers(-3, 40).map(str), st.sampled_from(_BIG_INTS))


_slice_part = st.one_of(st.just("None"), st.integers(-3, 3).map(str), junk_leaves)


keys = st.one_of(st.integers(-4, 4).map(str), st.sampled_from(_BIG_INTS),
                 st.tuples(_slice_part, _slice_part, _slice_part).map(
                     lambda t: f"slice({t[0]}, {t[1]}, {t[2]})"))


def _or_junk(s: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(s, junk)


# ---- reading values without the code under test -------------------------------------------

def _int_like(x: object) -> int | None:
    """``x`` as an int if it is an integer-like the law allows (never a bool), else None."""
    if isinstance(x, (bool, np.bool_)):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return int(operator.index(x))  # type: ignore[arg-type]
        except Exception:
            return None


@dataclass
class _Tree:
    """What an iterative walk of a would-be int tuple found."""

    leaves: list[int] = field(default_factory=list)
    depth: int = 0
    junk: str | None = None  # the type name of the first junk node
    plain: bool = True  # only exact ints and tuples (no NumPy ints, no tuple subclasses)


def _walk(x: object, allow_none: bool = False) -> _Tree:
    t = _Tree()
    stack: list[tuple[object, int]] = [(x, 0)]
    while stack:
        v, d = stack.pop()
        if type(v) is int:
            t.leaves.append(v)
        elif isinstance(v, tuple):
            t.plain &= type(v) is tuple
            t.depth = max(t.depth, d + 1)
            stack.extend((c, d + 1) for c in reversed(v))
        elif v is None and allow_none:
            pass
        elif (i := _int_like(v)) is not None:
            t.plain = False
            t.leaves.append(i)
        elif t.junk is None:
            t.junk = type(v).__name__
    return t


def _plain(x: object) -> Any:
    """``x`` with tuples and integer-likes made plain (only for trees of depth <= MAX_DEPTH)."""
    if isinstance(x, tuple):
        return tuple(_plain(c) for c in x)
    return None if x is None else _int_like(x)


def _congruent(a: Any, b: Any) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(map(_congruent, a, b))


class _Refuse(Exception):
    """The reference says the input is not valid."""


def _crd2idx(crd: object, shape: Any, stride: Any, allow_none: bool) -> int:
    """Offset of ``crd`` in ``shape:stride`` (None is 0 where allowed), or :class:`_Refuse`."""
    if crd is None and allow_none:
        return 0
    if isinstance(crd, tuple):
        if isinstance(shape, int) or len(crd) != len(shape):
            raise _Refuse("the coordinate does not match the shape")
        return sum(_crd2idx(c, s, d, allow_none) for c, s, d in zip(crd, shape, stride))
    c = _int_like(crd)
    if c is None or not 0 <= c < brute.prod(shape):
        raise _Refuse(f"coordinate {type(crd).__name__} is junk or out of range")
    return brute.dot(brute.idx2crd(c, shape), stride)


def _refusal(t: _Tree, what: str, low: int) -> str | None:
    """Why a shape (``low=1``) or stride (``low=0``) must be refused, or None if it is valid."""
    if t.junk is not None:
        return f"{what} holds a {t.junk}"
    if t.depth > MAX_DEPTH:
        return f"{what} is nested {t.depth} > MAX_DEPTH deep"
    if any(x < low for x in t.leaves):
        return f"{what} has a leaf < {low}"
    return None


def _modes(L: Layout) -> list[tuple[Any, Any]]:
    if isinstance(L.shape, int):
        return [(L.shape, L.stride)]
    shape: Any = L.shape
    stride: Any = L.stride
    return list(zip(shape, stride))


# ---- failures: one exception type per class, so Hypothesis reports each --------------------

_FAILURES: dict[str, type[AssertionError]] = {}


def _fail(kind: str, detail: str) -> NoReturn:
    name = re.sub(r"\W+", "_", kind).strip("_")
    cls = _FAILURES.setdefault(name, type(name, (AssertionError,), {"__module__": __name__}))
    raise cls(detail) from None  # the leaked exception stays __context__, for Hypothesis


def _where(e: BaseException) -> str:
    """The innermost frame of the traceback inside the layout package (else the last one)."""
    frames = [(f.f_code, n) for f, n in traceback.walk_tb(e.__traceback__)]  # no source reads
    inside = [f for f in frames if "/layout/" in f[0].co_filename.replace("\\", "/")]
    if not (inside or frames):
        return "?"
    code, line = (inside or frames)[-1]
    return f"{code.co_filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}({code.co_name})"


def _short(s: str, n: int = 240) -> str:
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def _leak(call: str, what: str, e: BaseException) -> NoReturn:
    where = _where(e)
    # Where a RecursionError strikes depends on the stack depth (and on warm caches), so
    # its class is one per call site, not per line: a replay then fails the same way.
    at = "" if isinstance(e, RecursionError) else f"_at_{where}"
    _fail(f"{what}_leaked_{type(e).__name__}{at}",
          f"{call}: {what} raised {type(e).__name__} at {where}: {_short(str(e))}")


@dataclass(frozen=True)
class Expect:
    """What the law demands of one call."""

    must_raise: str | None = None  # why the call must raise a LayoutError
    must_return: bool = False  # the input is valid (and plain): refusing it is a bug
    check: Callable[[object], object] | None = None  # what a returned value must satisfy


def _call(call: str, fn: Callable[[], object], expect: Expect) -> None:
    """Run one call and hold it to ``expect`` and to the law."""
    try:
        out = fn()
    except LayoutError as e:
        msg = str(e)
        if len(msg) >= MESSAGE_LIMIT:
            _fail(f"long_message_{type(e).__name__}_at_{_where(e)}",
                  f"{call}: a {len(msg)}-character message: {_short(msg)}")
        if expect.must_return:
            _fail("refused_valid_input", f"{call} is valid but raised {type(e).__name__}: "
                  f"{_short(msg)}")
        return
    except Exception as e:
        _leak(call, "the call", e)
    if expect.must_raise is not None:
        _fail("accepted_junk", f"{call} returned {_short(_safe_str(out))} although "
              f"{expect.must_raise}")
    if expect.check is not None:
        try:
            expect.check(out)
        except AssertionError as e:
            if type(e).__name__ in _FAILURES:  # from a probe of a returned layout: name the call
                raise type(e)(f"{call} returned a layout, but {e}") from None
            _fail("wrong_result", f"{call} returned {_short(_safe_str(out))}: {e}")
        except LayoutError as e:
            _fail("unusable_result", f"{call} returned {_short(_safe_str(out))}, and using it "
                  f"raised {type(e).__name__}: {_short(str(e))}")
        except Exception as e:
            _leak(call, "using the result", e)


class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return str(x) if x.bit_length() < 256 else f"<int of {x.bit_length()} bits>"


def _r(x: object) -> str:
    """A short repr of a value for this file's own messages (huge ints abbreviated)."""
    try:
        return _ShortRepr().repr(x)
    except Exception:
        return f"<{type(x).__name__}>"


def _safe_str(x: object) -> str:
    try:
        return str(x)
    except Exception as e:
        return f"<unprintable {type(x).__name__}: {type(e).__name__}>"


def _check_int(x: object, expected: int | None = None) -> None:
    assert type(x) is int, f"a {type(x).__name__}, not a plain int"
    assert expected is None or x == expected, f"expected {_r(expected)}"


def _check_plain_tuple(x: object) -> None:
    t = _walk(x)
    assert t.plain and t.junk is None, "not a nested tuple of plain ints"


def _check_layout(L: object, call: str = "the result") -> Layout:
    """``L`` is a valid Layout of plain ints, no deeper than MAX_DEPTH, that prints and measures."""
    assert type(L) is Layout, f"a {type(L).__name__}, not a Layout"
    s, d = _walk(L.shape), _walk(L.stride)
    assert s.plain and d.plain and s.junk is None and d.junk is None, "leaves are not plain ints"
    if s.depth > MAX_DEPTH:
        _fail("result_deeper_than_MAX_DEPTH", f"{call}: a layout of depth {s.depth} exists")
    assert _congruent(L.shape, L.stride), "shape and stride are not congruent"
    assert all(x >= 1 for x in s.leaves) and all(x >= 0 for x in d.leaves), "bad sizes/strides"
    expected = {"size": math.prod(s.leaves), "depth": s.depth,
                "cosize": sum((a - 1) * b for a, b in zip(s.leaves, d.leaves)) + 1,
                "rank": 1 if isinstance(L.shape, int) else len(L.shape)}
    probes: dict[str, Callable[[], object]] = {
        "str": lambda: str(L), "repr": lambda: repr(L), "hash": lambda: hash(L),
        **{k: (lambda k=k: getattr(L, k)) for k in expected}}  # type: ignore[misc]
    for what, probe in probes.items():
        try:
            got = probe()
        except Exception as e:
            _leak(call, f"{what}()", e)
        if what in expected:
            _check_int(got, expected[what])
    return L


def _small(L: Layout, n: int = 32) -> range:
    return range(min(L.size, n))


# ---- the oracles: what each public function must do --------------------------------------

Args = list[object]


def _need_layouts(a: Args, *idx: int) -> str | None:
    bad = [type(a[i]).__name__ for i in idx if not isinstance(a[i], Layout)]
    return f"a {bad[0]} is passed where a Layout is required" if bad else None


def _o_layout(a: Args) -> Expect:
    s = _walk(a[0])
    why = _refusal(s, "the shape", 1)
    if why:
        return Expect(why)
    shape = _plain(a[0])
    if a[1] is None:
        stride, plain = brute.suffix(shape), s.plain
    else:
        d = _walk(a[1])
        why = _refusal(d, "the stride", 0)
        if why:
            return Expect(why)
        stride, plain = _plain(a[1]), s.plain and d.plain
        if not _congruent(shape, stride):
            return Expect("shape and stride are not congruent")

    def check(out: object) -> None:
        L = _check_layout(out)
        assert (L.shape, L.stride) == (shape, stride), "not the shape and stride given"
    return Expect(must_return=plain, check=check)


def _o_make_layout(a: Args) -> Expect:
    why = _need_layouts(a, *range(len(a)))
    if why:
        return Expect(why)
    depth = 1 + max((_walk(L.shape).depth for L in a), default=0)  # type: ignore[attr-defined]
    if depth > MAX_DEPTH:
        return Expect(f"the result would be nested {depth} > MAX_DEPTH deep")

    def check(out: object) -> None:
        L = _check_layout(out)
        assert L.shape == tuple(x.shape for x in a), "wrong shape"  # type: ignore[attr-defined]
    return Expect(must_return=True, check=check)


def _tiler_refusal(x: object) -> tuple[str | None, bool]:
    """Why a tiler (Layout, int >= 1, None, or a by-mode tuple of them) must be refused."""
    plain, stack = True, [(x, 0)]
    while stack:
        v, d = stack.pop()
        if v is None or isinstance(v, Layout):
            continue
        if isinstance(v, tuple):
            if d >= MAX_DEPTH:
                return "the by-mode tuple is nested deeper than MAX_DEPTH", plain
            plain &= type(v) is tuple
            stack.extend((c, d + 1) for c in v)
            continue
        i = _int_like(v)
        if i is None:
            return f"a {type(v).__name__} is passed as a tiler", plain
        plain &= type(v) is int
        if i < 1:
            return "an int tiler is < 1", plain
    return None, plain


def _o_tiling(a: Args) -> Expect:
    why = _need_layouts(a, 0) or _tiler_refusal(a[1])[0]
    return Expect(why, check=_check_layout)


def _o_composition(a: Args) -> Expect:
    why = _need_layouts(a, 0) or _tiler_refusal(a[1])[0]
    A, B = a

    def check(out: object) -> None:
        L = _check_layout(out)
        if isinstance(B, Layout):  # checked on A's domain (beyond it, CuTe extends A)
            assert L.size == B.size, "size(A o B) != size(B)"
            assert all(L(i) == A(B(i)) for i in _small(L)  # type: ignore[operator]
                       if B(i) < A.size), "(A o B)(i) != A(B(i))"  # type: ignore[attr-defined]
        elif B is None:
            assert L == A, "A o None != A"
    return Expect(why, check=check)


def _o_coalesce(a: Args) -> Expect:
    p = _walk(a[1], allow_none=True)
    why = _need_layouts(a, 0) or (
        f"the profile holds a {p.junk}" if p.junk else
        "the profile is nested deeper than MAX_DEPTH" if p.depth > MAX_DEPTH else None)
    L0 = a[0]

    def check(out: object) -> None:
        L = _check_layout(out)
        assert isinstance(L0, Layout) and L.size == L0.size, "coalesce changed the size"
        if a[1] is None:
            assert L.depth <= 1, "coalesce(L) is not flat"
            assert all(L(i) == L0(i) for i in _small(L)), "coalesce(L)(i) != L(i)"
    return Expect(why, must_return=why is None and a[1] is None, check=check)


def _o_one_layout(a: Args) -> Expect:
    return Expect(_need_layouts(a, 0), must_return=isinstance(a[0], Layout), check=_check_layout)


def _o_complement(a: Args) -> Expect:
    m = _int_like(a[1])
    why = _need_layouts(a, 0) or (
        f"the cotarget {type(a[1]).__name__} is not an int" if m is None else
        "the cotarget is < 1" if m < 1 else None)
    return Expect(why, check=_check_layout)


def _o_right_inverse(a: Args) -> Expect:
    L0 = a[0]

    def check(out: object) -> None:
        R = _check_layout(out)
        assert isinstance(L0, Layout) and all(L0(R(i)) == i for i in _small(R)), "L(R(i)) != i"
    return Expect(_need_layouts(a, 0), must_return=isinstance(L0, Layout), check=check)


def _o_left_inverse(a: Args) -> Expect:
    L0 = a[0]

    def check(out: object) -> None:
        R = _check_layout(out)
        assert isinstance(L0, Layout) and all(R(L0(i)) == i for i in _small(L0)), "R(L(i)) != i"
    return Expect(_need_layouts(a, 0), check=check)


def _o_two_layouts(a: Args) -> Expect:
    return Expect(_need_layouts(a, 0, 1), check=_check_layout)


def _o_slice_and_offset(a: Args) -> Expect:
    crd, L = a
    why = _need_layouts(a, 1)
    if why:
        return Expect(why)
    assert isinstance(L, Layout)
    try:
        offset = _crd2idx(crd, L.shape, L.stride, allow_none=True)
    except _Refuse as e:
        return Expect(str(e))

    def check(out: object) -> None:
        assert type(out) is tuple and len(out) == 2, "not a (layout, offset) pair"
        _check_layout(out[0])
        _check_int(out[1], offset)
    # the sliced layout nests the kept modes one level down: a MAX_DEPTH-deep L may be refused
    ok = _walk(crd, allow_none=True).plain and _walk(L.shape).depth < MAX_DEPTH
    return Expect(must_return=ok, check=check)


def _o_crd2idx(a: Args) -> Expect:
    crd, shape0, stride0 = a
    s = _walk(shape0)
    d = _walk(stride0) if stride0 is not None else _Tree()
    why = _refusal(s, "the shape", 1) or _refusal(d, "the stride", 0)
    if why:
        return Expect(why)
    shape = _plain(shape0)
    stride = brute.suffix(shape) if stride0 is None else _plain(stride0)
    if not _congruent(shape, stride):
        return Expect("shape and stride are not congruent")
    try:
        want = _crd2idx(crd, shape, stride, allow_none=True)
    except _Refuse as e:
        return Expect(str(e))
    plain = s.plain and d.plain and _walk(crd, allow_none=True).plain
    return Expect(must_return=plain, check=lambda out: _check_int(out, want))


def _o_idx2crd(a: Args) -> Expect:
    s, i = _walk(a[1]), _int_like(a[0])
    why = _refusal(s, "the shape", 1) or ("the index is not an int" if i is None else None)
    if why or i is None:
        return Expect(why)
    shape = _plain(a[1])
    if not 0 <= i < brute.prod(shape):
        return Expect("the index is out of range")
    want = brute.idx2crd(i, shape)

    def check(out: object) -> None:
        _check_plain_tuple(out)
        assert out == want, f"expected {_r(want)}"
    return Expect(must_return=s.plain and type(a[0]) is int, check=check)


def _helper_refusal(t: _Tree, what: str) -> str | None:
    """Helpers must refuse junk and negative leaves; deep or nested-() input may go either way."""
    if t.junk is not None:
        return f"{what} holds a {t.junk}"
    return f"{what} has a negative leaf" if any(x < 0 for x in t.leaves) else None


def _helper_ok(t: _Tree) -> bool:
    """Plain, valid input that a helper must not refuse."""
    return (t.plain and t.junk is None and t.depth <= MAX_DEPTH
            and all(x >= 0 for x in t.leaves))


def _o_flatten(a: Args) -> Expect:
    t = _walk(a[0])

    def check(out: object) -> None:
        assert type(out) is tuple and all(type(x) is int for x in out), "not a tuple of ints"
        assert list(out) == t.leaves, f"expected {tuple(t.leaves)}"
    return Expect(_helper_refusal(t, "the int tuple"), must_return=_helper_ok(t), check=check)


def _o_product(a: Args) -> Expect:
    t = _walk(a[0])
    return Expect(_helper_refusal(t, "the int tuple"), must_return=_helper_ok(t),
                  check=lambda out: _check_int(out, math.prod(t.leaves)))


def _o_suffix_product(a: Args) -> Expect:
    t, init = _walk(a[0]), _int_like(a[1])
    why = _helper_refusal(t, "the shape") or (
        "init is not an int" if init is None else "init is negative" if init < 0 else None)
    ok = why is None and _helper_ok(t) and all(x >= 1 for x in t.leaves) and type(a[1]) is int

    def check(out: object) -> None:
        _check_plain_tuple(out)
        if t.depth <= MAX_DEPTH:
            assert out == brute.suffix(_plain(a[0]), init or 0), "not the row-major compact stride"
    return Expect(why, must_return=ok, check=check)


def _o_pair_helper(a: Args) -> Expect:
    why = _helper_refusal(_walk(a[0]), "the first argument") or _helper_refusal(
        _walk(a[1]), "the second argument")
    return Expect(why, check=_check_plain_tuple)


def _o_as_int(a: Args) -> Expect:
    i = _int_like(a[0])
    return Expect(None if i is not None else f"a {type(a[0]).__name__} is not an int",
                  must_return=type(a[0]) is int, check=lambda out: _check_int(out, i))


def _o_show(a: Args) -> Expect:
    def check(out: object) -> None:
        assert type(out) is str and len(out) < MESSAGE_LIMIT, "not a short str"
    return Expect(must_return=True, check=check)


def _o_predicate(truth: Callable[..., bool] | None, n: int = 1) -> Callable[[Args], Expect]:
    def oracle(a: Args) -> Expect:
        def check(out: object) -> None:
            assert type(out) is bool, f"a {type(out).__name__}, not a bool"
            if truth is not None and all(isinstance(L, Layout) and L.size <= 64 for L in a):
                assert out == truth(*a), "disagrees with enumeration"
        return Expect(_need_layouts(a, *range(n)), check=check)
    return oracle


def _same(a: Layout, b: Layout) -> bool:
    return brute.size(a) == brute.size(b) and brute.image(a) == brute.image(b)


# ---- the specs: parameters (name, strategy, default) and an oracle ------------------------

@dataclass(frozen=True)
class Param:
    name: str
    src: st.SearchStrategy[str]
    default: str | None = None  # source of the default; None: required


@dataclass(frozen=True)
class Spec:
    params: tuple[Param, ...]
    oracle: Callable[[Args], Expect]
    varargs: bool = False


def _p(name: str, src: st.SearchStrategy[str], default: str | None = None) -> Param:
    return Param(name, _or_junk(src), default)


_A, _L = _p("A", layouts), _p("layout", layouts)


_TILER = _p("tiler", tilers)


SPECS: dict[str, Spec] = {
    "Layout": Spec((_p("shape", int_tuples), _p("stride", int_tuples, "None")), _o_layout),
    "make_layout": Spec((_L,), _o_make_layout, varargs=True),
    "coalesce": Spec((_L, _p("profile", profiles, "None")), _o_coalesce),
    "filter": Spec((_L,), _o_one_layout),
    "composition": Spec((_A, _p("B", tilers)), _o_composition),
    "complement": Spec((_A, _p("cotarget", ints, "1")), _o_complement),
    "right_inverse": Spec((_L,), _o_right_inverse),
    "left_inverse": Spec((_L,), _o_left_inverse),
    **{name: Spec((_A, _TILER), _o_tiling) for name in (
        "logical_divide", "zipped_divide", "tiled_divide",
        "logical_product", "zipped_product", "tiled_product")},
    "blocked_product": Spec((_p("block", layouts), _L), _o_two_layouts),
    "raked_product": Spec((_p("block", layouts), _L), _o_two_layouts),
    "slice_and_offset": Spec((_p("crd", coords), _L), _o_slice_and_offset),
    "crd2idx": Spec((_p("crd", coords), _p("shape", int_tuples), _p("stride", int_tuples, "None")),
                    _o_crd2idx),
    "idx2crd": Spec((_p("idx", ints), _p("shape", int_tuples)), _o_idx2crd),
    "flatten": Spec((_p("t", int_tuples),), _o_flatten),
    "product": Spec((_p("t", int_tuples),), _o_product),
    "suffix_product": Spec((_p("shape", int_tuples), _p("init", ints, "1")), _o_suffix_product),
    "shape_div": Spec((_p("a", int_tuples), _p("b", int_tuples)), _o_pair_helper),
    "inner_product": Spec((_p("a", int_tuples), _p("b", int_tuples)), _o_pair_helper),
    "as_int": Spec((_p("value", ints), Param("what", st.just("'a size'"))), _o_as_int),
    "show": Spec((Param("value", junk),), _o_show),
    "show_error": Spec((Param("error", st.one_of(junk, st.sampled_from((
        "ValueError('bad')", "KeyError()", "HostileRepr()", "RuntimeError('y' * 10**5)",
        "SystemExit(3)")))),), _o_show),
    "is_injective": Spec((_L,), _o_predicate(brute.injective)),
    "is_compact": Spec((_L,), _o_predicate(brute.compact)),
    "is_tractable": Spec((_L,), _o_predicate(None)),
    "same_function": Spec((_p("a", layouts), _p("b", layouts)), _o_predicate(_same, 2)),
}


_NOT_OPERATIONS = {"IntTuple", "Coord", "Tiler"}  # type aliases, not callables to fuzz


def _function(name: str) -> Callable[..., object] | None:
    """The public function ``name``: exported by :mod:`layout`, else by its int-tuple module."""
    fn = getattr(layout, name, None)
    if fn is None:
        from layout import _inttuple
        fn = getattr(_inttuple, name, None)
    return fn


@st.composite
def arguments(draw: st.DrawFn, spec: Spec) -> tuple[list[Junk], dict[str, Junk]]:
    """Positional arguments (all required ones, some optional ones) and optional ones by name."""
    if spec.varargs:
        return [Junk(draw(spec.params[0].src)) for _ in range(draw(st.integers(0, 3)))], {}
    required = sum(p.default is None for p in spec.params)
    n = draw(st.integers(required, len(spec.params)))
    kw = {p.name: Junk(draw(p.src)) for p in spec.params[n:] if draw(st.booleans())}
    return [Junk(draw(p.src)) for p in spec.params[:n]], kw


def _values(spec: Spec, pos: list[Junk], kw: dict[str, Junk]) -> Args:
    """Every argument's value, defaults filled in, in parameter order (for the oracle)."""
    if spec.varargs:
        return [j.build() for j in pos]
    out = [j.build() for j in pos]
    for p in spec.params[len(pos):]:
        out.append(kw[p.name].build() if p.name in kw else Junk(p.default or "None").build())
    return out


def _show(head: str, pos: list[Junk], kw: dict[str, Junk]) -> str:
    return f"{head}({', '.join([*map(repr, pos), *(f'{k}={v!r}' for k, v in kw.items())])})"


# ---- methods of Layout ---------------------------------------------------------------------

_Invoke = Callable[[Layout, list[object], dict[str, object]], object]


@dataclass(frozen=True)
class Method:
    params: tuple[Param, ...]
    oracle: Callable[[Layout, Args], Expect]
    invoke: _Invoke
    show: Callable[[str, list[Junk], dict[str, Junk]], str]


def _mirror(name: str) -> Method:
    """A method that is its namesake function with the layout as first argument."""
    spec = SPECS[name]
    return Method(spec.params[1:], lambda L, a: spec.oracle([L, *a]),
                  lambda L, a, k: getattr(L, name)(*a, **k),
                  lambda r, p, k: _show(f"{r}.{name}", p, k))


def _o_call(L: Layout, a: Args) -> Expect:
    crd = a[0] if len(a) == 1 else tuple(a)
    try:
        want = _crd2idx(crd, L.shape, L.stride, allow_none=False)
    except _Refuse as e:
        return Expect(str(e))
    return Expect(must_return=_walk(crd).plain, check=lambda out: _check_int(out, want))


def _o_getitem(L: Layout, a: Args) -> Expect:
    key, modes = a[0], _modes(L)
    if isinstance(key, slice):
        parts = [key.start, key.stop, key.step]
        ints = [None if p is None else _int_like(p) for p in parts]
        if any(i is None and p is not None for i, p in zip(ints, parts)):
            return Expect("a slice bound is not an int")
        if ints[2] == 0:
            return Expect("the slice step is 0")
        want = modes[slice(*ints)]
        plain = all(p is None or type(p) is int for p in parts)
        shape, stride = tuple(s for s, _ in want), tuple(d for _, d in want)
    else:
        k = _int_like(key)
        if k is None or not -len(modes) <= k < len(modes):
            return Expect("the key is not an int in range")
        plain, (shape, stride) = type(key) is int, modes[k]

    def check(out: object) -> None:
        M = _check_layout(out)
        assert (M.shape, M.stride) == (shape, stride), f"expected {_r(shape)}:{_r(stride)}"
    return Expect(must_return=plain, check=check)


def _o_iter(L: Layout, a: Args) -> Expect:
    def check(out: object) -> None:
        assert isinstance(out, list)
        assert [(m.shape, m.stride) for m in map(_check_layout, out)] == _modes(L), "wrong modes"
    return Expect(must_return=True, check=check)


def _o_eq(L: Layout, a: Args) -> Expect:
    other = a[0]
    want = isinstance(other, Layout) and (L.shape, L.stride) == (other.shape, other.stride)

    def check(out: object) -> None:
        assert (out is NotImplemented and not isinstance(other, Layout)) or out is want, \
            f"expected {want}"
    return Expect(must_return=True, check=check)


def _o_same(L: Layout, a: Args) -> Expect:
    def check(out: object) -> None:
        assert _check_layout(out) == L, "not equal to the original"
    return Expect(must_return=True, check=check)


def _o_property(name: str) -> Callable[[Layout, Args], Expect]:
    def oracle(L: Layout, a: Args) -> Expect:
        s, d = _walk(L.shape), _walk(L.stride)
        want = {"size": math.prod(s.leaves), "depth": s.depth, "rank": len(_modes(L)),
                "cosize": sum((x - 1) * y for x, y in zip(s.leaves, d.leaves)) + 1,
                "__len__": len(_modes(L))}.get(name)
        return Expect(must_return=True, check=lambda out: _check_int(out, want))
    return oracle


def _o_plain(L: Layout, a: Args) -> Expect:
    return Expect(must_return=True, check=_check_plain_tuple)


def _o_any(kind: type) -> Callable[[Layout, Args], Expect]:
    def oracle(L: Layout, a: Args) -> Expect:
        def check(out: object) -> None:
            assert type(out) is kind, f"a {type(out).__name__}, not a {kind.__name__}"
        return Expect(must_return=True, check=check)
    return oracle


def _no_args(invoke: Callable[[Layout], object], oracle: Callable[[Layout, Args], Expect],
             show: str) -> Method:
    return Method((), oracle, lambda L, a, k: invoke(L), lambda r, p, k: show.format(r))


METHODS: dict[str, Method] = {
    **{m: _mirror(m) for m in (
        "coalesce", "filter", "composition", "complement", "right_inverse", "left_inverse",
        "logical_divide", "logical_product", "is_injective", "is_compact", "is_tractable",
        "same_function")},
    "__call__": Method(tuple(_p(f"c{i}", coords) for i in range(3)), _o_call,
                       lambda L, a, k: L(*a),  # type: ignore[arg-type]
                       lambda r, p, k: _show(r, p, {})),
    "__getitem__": Method((_p("key", keys),), _o_getitem,
                          lambda L, a, k: L[a[0]],  # type: ignore[index]
                          lambda r, p, k: f"{r}[{p[0]!r}]"),
    "__eq__": Method((_p("other", layouts),), _o_eq, lambda L, a, k: L.__eq__(a[0]),
                     lambda r, p, k: f"{r}.__eq__({p[0]!r})"),
    "__iter__": _no_args(list, _o_iter, "list({})"),
    "__len__": _no_args(len, _o_property("__len__"), "len({})"),
    "__str__": _no_args(str, _o_any(str), "str({})"),
    "__repr__": _no_args(repr, _o_any(str), "repr({})"),
    "__hash__": _no_args(hash, _o_any(int), "hash({})"),
    "__bool__": _no_args(bool, _o_any(bool), "bool({})"),
    "pickle": _no_args(lambda L: pickle.loads(pickle.dumps(L)), _o_same,
                       "pickle.loads(pickle.dumps({}))"),
    "deepcopy": _no_args(copy.deepcopy, _o_same, "copy.deepcopy({})"),
    "copy": _no_args(copy.copy, _o_same, "copy.copy({})"),
    **{p: _no_args(operator.attrgetter(p), _o_property(p), "{}." + p)
       for p in ("size", "cosize", "rank", "depth")},
    **{p: _no_args(operator.attrgetter(p), _o_plain, "{}." + p) for p in ("shape", "stride")},
}


@st.composite
def method_arguments(draw: st.DrawFn, m: Method) -> tuple[list[Junk], dict[str, Junk]]:
    required = sum(p.default is None for p in m.params)
    n = draw(st.integers(0 if m.params and m.params[0].name == "c0" else required,
                         len(m.params)))
    kw = {p.name: Junk(draw(p.src)) for p in m.params[n:]
          if p.default is not None and draw(st.booleans())}
    return [Junk(draw(p.src)) for p in m.params[:n]], kw


# ---- forged pickles: shared by the construction and regression tests -----------------------

_TEMPLATE = Layout((4, 3))  # stride (3, 1)


class _Forged:
    """An object whose pickle is a Layout's with substituted values."""

    def __init__(self, rv: tuple[object, ...]) -> None:
        self.rv = rv

    def __reduce__(self) -> tuple[object, ...]:
        return self.rv


def forged_pickle(shape: object, stride: object, protocol: int = pickle.HIGHEST_PROTOCOL
                  ) -> bytes:
    """The pickle of ``Layout((4, 3))`` with ``shape`` and ``stride`` put in place of its own.

    Built from the template's own ``__reduce_ex__`` (whatever it carries: attrs state or
    constructor arguments), so it is what a tampered file would hold.
    """
    found: list[str] = []

    def sub(x: object) -> object:
        if type(x) is tuple and x == (4, 3):
            found.append("shape")
            return shape
        if type(x) is tuple and x == (3, 1):
            found.append("stride")
            return stride
        if type(x) in (tuple, list):
            seq: Any = x
            return type(seq)(map(sub, seq))
        if type(x) is dict:
            return {k: sub(v) for k, v in x.items()}
        return x

    rv = _TEMPLATE.__reduce_ex__(protocol)
    assert isinstance(rv, tuple)
    func, args, *rest = rv
    if func is copyreg.__newobj__:  # type: ignore[attr-defined]  # NEWOBJ checks the class
        func, args = copyreg._reconstructor, (args[0], object, None)  # type: ignore[attr-defined]
    forged = sub((func, args, *rest))
    assert sorted(found) == ["shape", "stride"], f"cannot find (4, 3) and (3, 1) in {rv!r}"
    return pickle.dumps(_Forged(forged), protocol)  # type: ignore[arg-type]


"""Layout fuzz, construction, depth and pickles: nesting up to ``MAX_DEPTH`` is accepted and
deeper refused, no operation builds a deeper layout, a pickle goes back through validation
(machinery: ``layout_fuzz.py``)."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest
from hypothesis import given, reject
from hypothesis import strategies as st
from layout_fuzz import (
    MAX_DEPTH,
    Junk,
    _call,
    _check_layout,
    _leak,
    _o_layout,
    _or_junk,
    _show,
    forged_pickle,
    int_tuples,
)

import layout
from layout import Layout, LayoutError

# ---- construction, depth and pickles -------------------------------------------------------

@given(n=st.one_of(st.integers(0, 1100), st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1])),
       base=st.sampled_from([("2", "1"), ("(2, 3)", "(3, 1)"), ("(2, (3, 4))", "(1, (8, 2))")]),
       explicit_stride=st.booleans())
def test_nesting_up_to_max_depth_is_accepted_and_deeper_is_refused(
        n: int, base: tuple[str, str], explicit_stride: bool) -> None:
    """Law: a shape (and congruent stride) nested at most ``MAX_DEPTH`` levels builds a layout
    that prints, measures and hashes; one level deeper raises a ``LayoutError`` (not a
    ``RecursionError``), at any depth."""
    shape = Junk(f"deep({n}, {base[0]})")
    stride = Junk(f"deep({n}, {base[1]})" if explicit_stride else "None")
    a = [shape.build(), stride.build()]
    _call(_show("Layout", [shape, stride], {}), lambda: Layout(*a), _o_layout(list(a)))


_GROW: dict[str, Callable[[Layout], Layout]] = {
    "make_layout(L)": lambda L: layout.make_layout(L),
    "make_layout(L, Layout(2))": lambda L: layout.make_layout(L, Layout(2)),
    "zipped_divide(L, None)": lambda L: layout.zipped_divide(L, None),
    "zipped_product(L, None)": lambda L: layout.zipped_product(L, None),
    "logical_product(L, 1)": lambda L: layout.logical_product(L, 1),
}


@pytest.mark.parametrize("op", sorted(_GROW))
def test_operations_never_build_a_layout_deeper_than_max_depth(op: str) -> None:
    """Law: applying a nesting operation again and again raises a ``LayoutError`` once the
    result would be deeper than ``MAX_DEPTH``; every layout it returned before is valid."""
    L = Layout(2)
    for k in range(MAX_DEPTH + 2):
        try:
            L = _GROW[op](L)
        except LayoutError:
            assert L.depth >= MAX_DEPTH, f"refused to nest a layout of depth {L.depth}"
            return
        except Exception as e:
            _leak(f"{op} at depth {L.depth}", "the call", e)
        _check_layout(L, f"{op} applied {k + 1} times")
    pytest.fail(f"{op} built a layout of depth {L.depth} > MAX_DEPTH = {MAX_DEPTH}")


@given(shape=_or_junk(int_tuples).map(Junk), stride=_or_junk(int_tuples).map(Junk),
       protocol=st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_a_pickle_goes_back_through_validation(shape: Junk, stride: Junk, protocol: int) -> None:
    """Law: loading a tampered pickle of a Layout behaves like ``Layout(shape, stride)``: it
    raises a ``LayoutError`` for invalid values and gives the same layout otherwise."""
    try:
        data = forged_pickle(shape.build(), stride.build(), protocol)
    except (pickle.PicklingError, RecursionError, TypeError, AttributeError, ValueError):
        reject()  # the junk itself does not pickle (an iterator, a 1000-deep tuple ...)
    expect = _o_layout([shape.build(), stride.build()])
    _call(f"pickle.loads(forged_pickle({shape!r}, {stride!r}, {protocol}))",
          lambda: pickle.loads(data), expect)


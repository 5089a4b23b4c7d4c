"""Layout fuzz, methods of :class:`~layout.Layout`: every public method, called with arbitrary
junk, raises a ``LayoutError`` or returns a correct value; every layout prints, measures,
hashes, iterates, pickles and copies (machinery: ``layout_fuzz.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from layout_fuzz import (
    METHODS,
    Junk,
    _call,
    layouts,
    method_arguments,
)

from layout import Layout

# ---- methods of Layout ---------------------------------------------------------------------

def test_every_public_method_has_a_spec() -> None:
    """Every public attribute of ``Layout`` is fuzzed (dunders are listed in METHODS by hand)."""
    public = {n for n in dir(Layout) if not n.startswith("_")}
    assert public <= set(METHODS), f"no fuzz spec for Layout.{sorted(public - set(METHODS))}"


@pytest.mark.parametrize("name", sorted(n for n, m in METHODS.items() if m.params))
@given(receiver=layouts.map(Junk), data=st.data())
def test_every_layout_method_raises_a_layout_error_or_returns_a_correct_value(
        name: str, receiver: Junk, data: st.DataObject) -> None:
    """Law: on a valid layout, every method with arguments (calls, indexing, equality and the
    operations) returns a correct value of plain ints or raises a ``LayoutError`` with a
    short message; junk arguments are refused."""
    m = METHODS[name]
    L = receiver.build()
    assert isinstance(L, Layout)
    pos, kw = data.draw(method_arguments(m), label="arguments")
    defaults = [Junk(p.default).build() for p in m.params[len(pos):]
                if p.default is not None and p.name not in kw]
    expect = m.oracle(L, [j.build() for j in pos] + [j.build() for j in kw.values()] + defaults)
    args, kwargs = [j.build() for j in pos], {k: j.build() for k, j in kw.items()}
    _call(m.show(repr(receiver), pos, kw), lambda: m.invoke(L, args, kwargs), expect)


@given(receiver=layouts.map(Junk))
def test_every_layout_prints_measures_hashes_iterates_pickles_and_copies(receiver: Junk) -> None:
    """Law: every query of a valid layout without arguments (str, repr, hash, len, bool,
    iteration, size, cosize, rank, depth, shape, stride, pickle, copy, deepcopy) returns
    the right value, of plain ints, and never raises; the operations without arguments
    (filter, the inverses, the predicates) return a valid value or raise a ``LayoutError``."""
    L = receiver.build()
    assert isinstance(L, Layout)
    for m in METHODS.values():
        if not m.params:
            _call(m.show(repr(receiver), [], {}), lambda m=m: m.invoke(L, [], {}),  # type: ignore
                  m.oracle(L, []))


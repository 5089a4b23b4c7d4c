"""Layout fuzz, public functions: every public function of :mod:`layout`, called with
arbitrary junk, raises a ``LayoutError`` naming it or returns a correct value (the law and
its machinery: ``layout_fuzz.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from layout_fuzz import (
    _NOT_OPERATIONS,
    SPECS,
    _call,
    _function,
    _show,
    _values,
    arguments,
)

import layout

# ---- every public function: the law, and a spec for each ---------------------------------

def test_every_public_operation_has_a_spec() -> None:
    """Every public callable in ``layout.__all__`` (errors and type aliases aside) is fuzzed."""
    def is_operation(x: object) -> bool:
        return callable(x) and not (isinstance(x, type) and issubclass(x, Exception))
    public = {n for n in layout.__all__
              if n not in _NOT_OPERATIONS and is_operation(getattr(layout, n))}
    assert public <= set(SPECS), f"no fuzz spec for {sorted(public - set(SPECS))}"


@pytest.mark.parametrize("name", [n for n in SPECS if _function(n) is not None])
@given(data=st.data())
def test_every_public_function_raises_a_layout_error_or_returns_a_correct_value(
        name: str, data: st.DataObject) -> None:
    """Law: ``f(*junk)`` returns a correct value (plain ints, a valid layout no deeper than
    MAX_DEPTH that prints and measures) or raises a ``LayoutError`` with a message under
    2000 characters; junk (strings, bytes, sets, dicts, lists, bools, floats, None, negative
    sizes or strides, nesting deeper than MAX_DEPTH) is never accepted; valid plain input
    is never refused."""
    spec, fn = SPECS[name], _function(name)
    assert fn is not None
    pos, kw = data.draw(arguments(spec), label="arguments")
    expect = spec.oracle(_values(spec, pos, kw))
    args, kwargs = [j.build() for j in pos], {k: j.build() for k, j in kw.items()}
    _call(_show(name, pos, kw), lambda: fn(*args, **kwargs), expect)


"""Layout fuzz, regressions: the cases a reviewer reported and the ones this fuzz found,
executable (machinery: ``layout_fuzz.py``)."""

from __future__ import annotations

import pickle

import pytest
from layout_fuzz import (
    _TEMPLATE,
    BIG,
    MAX_DEPTH,
    MESSAGE_LIMIT,
    Expect,
    Junk,
    _call,
    _check_layout,
    forged_pickle,
)

from layout import Layout, LayoutError

# ---- regressions: the cases a reviewer reported --------------------------------------------

@pytest.mark.parametrize("src", [
    "Layout(deep(497))", "Layout(deep(1000))", "Layout(deep(497), deep(497, 1))",
    "flatten('ab')", "flatten(Layout(4))", "product(b'x')", "product(range(3))",
    "idx2crd(1, (-2, -3))", "crd2idx(1, 2, -5)", "coalesce(Layout((2, 4)), 'junk')",
    "suffix_product(b'x')",
])
def test_reported_junk_raises_a_layout_error(src: str) -> None:
    """Each reported input raises a ``LayoutError`` (it used to give a RecursionError or a
    wrong value: 120, 0, (-1, -2), -5, an accepted profile, (1,))."""
    with pytest.raises(LayoutError):
        Junk(src).value()


@pytest.mark.parametrize("src", ["Layout(deep(490))", "nest_layout(490)"])
def test_a_490_deep_layout_is_refused_or_prints(src: str) -> None:
    """A 490-deep layout is refused if 490 > MAX_DEPTH; else ``str`` and ``.depth`` work."""
    if 490 > MAX_DEPTH:
        with pytest.raises(LayoutError):
            Junk(src).value()
    else:
        L = Junk(src).value()
        assert isinstance(L, Layout) and L.depth == 490 and str(L).startswith("(")


def test_a_huge_index_error_message_is_short() -> None:
    """``Layout(big)(big)`` raises a ``LayoutError`` with a short message (not Python's
    'Exceeds the limit (4300 digits)' ``ValueError``)."""
    L = Layout(BIG)
    with pytest.raises(LayoutError) as e:
        L(BIG)
    assert len(str(e.value)) < MESSAGE_LIMIT


def test_a_layout_with_a_huge_size_prints() -> None:
    """``str`` and ``repr`` of ``Layout(10**5000)`` work and stay short."""
    L = Layout(BIG)
    assert len(str(L)) < MESSAGE_LIMIT and len(repr(L)) < MESSAGE_LIMIT


def test_a_corrupted_pickle_with_a_negative_size_is_refused() -> None:
    """A pickle of ``Layout((4, 3))`` patched to shape ``(4, -3)`` fails to load with a
    ``LayoutError`` (it used to load, with size -12)."""
    data = pickle.dumps(_TEMPLATE, 2)  # protocol 2: no frames, so bytes can be patched
    assert data.count(b"K\x04K\x03\x86") == 1, "the shape (4, 3) is not in the pickle"
    patched = data.replace(b"K\x04K\x03\x86", b"K\x04J\xfd\xff\xff\xff\x86")
    with pytest.raises(LayoutError):
        pickle.loads(patched)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(LayoutError):
            pickle.loads(forged_pickle((4, -3), (3, 1), protocol))


# ---- found by this fuzz (at 0723235): the work list, executable ----------------------------

def _check_value(out: object) -> None:
    """A returned value holds only valid layouts, bools and plain ints."""
    for x in out if type(out) is tuple else (out,):
        if isinstance(x, Layout):
            _check_layout(x)
        else:
            assert type(x) in (bool, int), f"a {type(x).__name__}"


@pytest.mark.parametrize("src", [
    "make_layout(Layout(()))", "zipped_divide(Layout(4), ())", "tiled_divide(Layout(4), ())",
    "zipped_product(Layout(4), ())", "tiled_product(Layout(4), ())",
    "logical_divide(Layout(4), Layout(()))", "logical_product(Layout(()), Layout(4))",
    "composition(Layout(4), (Layout(()),))", "slice_and_offset(None, Layout(()))",
    "is_tractable(Layout((2, 10**5000), (1, 1)))", "complement(Layout((2, 10**5000), (1, 1)))",
    "left_inverse(Layout((10**5000, 2), (1, 1)))",
    "composition(Layout((2, 3), (0, 1)), Layout(10**5000))",
    "composition(Layout((2, 10**5000), (0, 1)), Layout((2, 2), (6, 3)))",
    "left_inverse(Layout((2, 2, 10**5000, 2), (1, 3, 6, 7)))",
    "is_injective(Layout((128, 128, 128), (10**5000, 10**5000 + 1, 10**5000 + 2)))",
])
def test_found_cases_return_a_valid_value_or_raise_a_layout_error(src: str) -> None:
    """Each call returns valid layouts (no nested ``()``) and plain ints, or raises a
    ``LayoutError``: not a layout the constructor refuses, nor a ``ValueError`` from
    ``str()`` of a huge int in a message."""
    _call(src, lambda: Junk(src).value(), Expect(check=_check_value))


@pytest.mark.parametrize("src", [
    "Layout(4)[slice(None, None, True)]", "Layout(4)[slice(None, None, RaisingIndex())]",
])
def test_found_junk_slices_raise_a_layout_error(src: str) -> None:
    """A mode slice with a bool or a failing ``__index__`` raises a ``LayoutError``."""
    with pytest.raises(LayoutError):
        Junk(src).value()


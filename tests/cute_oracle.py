"""NVIDIA's pycute as a test oracle, reached through mode reversal.

pycute is column-major (CuTe's colexicographic order); this project is row-major.
``rev`` reverses modes at every nesting level and maps one convention onto the
other, so ``op(X, Y) == from_cute(cute_op(to_cute(X), to_cute(Y)))`` is the
mirror law every operation is checked against.
"""

from __future__ import annotations

from typing import Any

import pycute

from layout import Layout


def rev(t: Any) -> Any:
    """Reverse the modes of a nested tuple (a shape, stride or coordinate) at every level.

    Leaves (ints, and the ``None`` of a slicing coordinate) are kept as they are.
    """
    if not isinstance(t, tuple):
        return t
    return tuple(rev(x) for x in reversed(t))


def to_cute(L: Layout) -> pycute.Layout:
    """The pycute layout that is the mirror image of ``L``."""
    return pycute.Layout(rev(L.shape), rev(L.stride))


def from_cute(C: pycute.Layout) -> Layout:
    """The row-major layout that is the mirror image of pycute's ``C``."""
    return Layout(rev(C.shape), rev(C.stride))


def tiler_to_cute(t: Any) -> Any:
    """Mirror a right operand: Layouts are reversed, by-mode tuples reversed in order."""
    if isinstance(t, Layout):
        return to_cute(t)
    if isinstance(t, tuple):
        return tuple(tiler_to_cute(x) for x in reversed(t))
    return t


def cute_blocked_product(block: pycute.Layout, layout: pycute.Layout, *, raked: bool
                         ) -> pycute.Layout:
    """CuTe C++'s blocked/raked product written with pycute's primitives.

    pycute lacks them; C++ defines them as ``logical_product`` of the operands
    padded with trailing ``1:0`` modes to a common rank R, the two result modes
    zipped mode by mode ((block_k, rep_k) for blocked, (rep_k, block_k) for
    raked), and each zipped mode coalesced.
    """
    def modes(L: pycute.Layout) -> list[pycute.Layout]:
        return [L[i] for i in range(len(L))] if isinstance(L.shape, tuple) else [L]

    r = max(len(modes(block)), len(modes(layout)))
    pad = [pycute.Layout(1, 0)]
    a = pycute.make_layout(*(modes(block) + pad * (r - len(modes(block)))))
    b = pycute.make_layout(*(modes(layout) + pad * (r - len(modes(layout)))))
    lp = pycute.logical_product(a, b)
    reps = [lp[1][i] for i in range(r)] if r > 1 else [lp[1]]
    pairs = [(reps[k], a[k]) if raked else (a[k], reps[k]) for k in range(r)]
    return pycute.make_layout(*(pycute.coalesce(pycute.make_layout(*p)) for p in pairs))

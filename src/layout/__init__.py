"""CuTe layout algebra in row-major order, with no silently wrong results.

A :class:`Layout` is a pair of congruent nested int tuples ``shape:stride``: a
function from an index (or a coordinate) to an offset.  The last mode varies
fastest (row-major, as PyTorch), and every operation is the exact mirror of its
NVIDIA CuTe namesake: ``op(X, Y) == rev(cute_op(rev(X), rev(Y)))`` where
``rev`` reverses modes at every level.  Where CuTe would return a wrong layout
for an inadmissible input, this package raises a :class:`LayoutError` subclass
naming the condition that failed and the values; every bad input (a wrong type,
junk, nesting deeper than :data:`MAX_DEPTH`) gets one too.

>>> from layout import Layout, composition, complement, logical_divide
>>> world = Layout(8)
>>> print(logical_divide(world, Layout(2)))   # (rest, tile)
(4,2):(2,1)
>>> print(composition(Layout((2, 4)), Layout((4, 2), (1, 4))))
(4,2):(1,4)
>>> print(complement(Layout(2, 4), 8))   # the offsets 2:4 misses
4:1

Public names:

- the value :class:`Layout`, the right-operand type ``Tiler`` and the int-tuple
  types ``IntTuple`` and ``Coord``;
- operations: :func:`make_layout`, :func:`coalesce`, :func:`filter`,
  :func:`composition`, :func:`complement`, :func:`right_inverse`,
  :func:`left_inverse`, :func:`logical_divide`, :func:`zipped_divide`,
  :func:`tiled_divide`, :func:`logical_product`, :func:`zipped_product`,
  :func:`tiled_product`, :func:`blocked_product`, :func:`raked_product`,
  :func:`slice_and_offset`;
- predicates: :func:`is_injective`, :func:`is_compact`, :func:`is_tractable`,
  :func:`same_function`;
- int-tuple helpers: :func:`crd2idx`, :func:`idx2crd`, :func:`flatten`,
  :func:`product`, :func:`suffix_product`, :func:`shape_div`,
  :func:`inner_product`, the nesting limit :data:`MAX_DEPTH`, and the two helpers
  every package here uses at its door: :func:`as_int` (integer conversion) and
  :func:`show` (a short, never-failing repr for messages) with :func:`show_error` (the
  same for an exception raised by someone else's code);
- the errors: :class:`LayoutError` and its subclasses.

Module map (for readers of the code), each importing only those listed before it:
``_errors``; ``_show`` (showing any value in a message: :func:`show`, huge ints
abbreviated); ``_inttuple`` (the int-tuple algebra on values already valid:
flatten, product, suffix_product, shape_div, the one dot product
``inner_product``, idx2crd, CuTe's notation ``fmt``); ``_door`` (checks at the
door: integer and int-tuple conversion, :data:`MAX_DEPTH`, layout and coordinate
validation, and the public int-tuple functions, which check there and then call
``_inttuple``); ``_flat`` (the algebra on flat ``(shapes, strides)`` modes);
``_layout`` (the value and the operations it offers as methods); ``_tiling``
(zipped/tiled/blocked/raked forms and slicing); apart, ``_version`` (the distribution's
version, ``__version__`` here and in :mod:`mesh` and :mod:`backend`).
"""

import sys as _sys

from ._door import (
    MAX_DEPTH,
    as_int,
    crd2idx,
    flatten,
    idx2crd,
    inner_product,
    product,
    shape_div,
    suffix_product,
)
from ._errors import (
    ComplementError,
    CompositionError,
    InvalidLayoutError,
    InverseError,
    LayoutError,
    LayoutIndexError,
    LayoutTypeError,
    UndecidableError,
)
from ._inttuple import Coord, IntTuple
from ._layout import (
    Layout,
    Tiler,
    coalesce,
    complement,
    composition,
    filter,
    is_compact,
    is_injective,
    is_tractable,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    right_inverse,
    same_function,
)
from ._show import show, show_error
from ._tiling import (
    blocked_product,
    raked_product,
    slice_and_offset,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from ._version import distribution_version as _distribution_version

__version__ = _distribution_version()
"""meshlayout's version (pyproject.toml's, from the installed metadata; ``"unknown"`` in a
source tree never installed)."""

__all__ = [
    "Layout", "IntTuple", "Coord", "Tiler", "MAX_DEPTH",
    "make_layout", "coalesce", "filter", "composition", "complement",
    "right_inverse", "left_inverse",
    "logical_divide", "zipped_divide", "tiled_divide",
    "logical_product", "zipped_product", "tiled_product", "blocked_product", "raked_product",
    "slice_and_offset", "crd2idx", "idx2crd", "flatten", "product", "suffix_product",
    "shape_div", "inner_product", "as_int", "show", "show_error",
    "is_injective", "is_compact", "is_tractable", "same_function",
    "LayoutError", "InvalidLayoutError", "LayoutTypeError", "LayoutIndexError",
    "CompositionError", "ComplementError", "InverseError", "UndecidableError",
]

for _cls in [v for v in map(globals().get, __all__) if isinstance(v, type)]:
    # Pickles name the public package, not the private file (as torch pins Placement's), so
    # moving a file breaks no saved value; doctest still finds the class in its file.
    vars(_sys.modules[_cls.__module__]).setdefault("__test__", {})[_cls.__name__] = _cls
    _cls.__module__ = __name__
del _cls

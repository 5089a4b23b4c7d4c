"""One table of the layout cases that NVIDIA CUTLASS's pycute tests and PyTorch's ``_pycute``
tests share, each case citing the upstream file(s) it comes from.

PyTorch's ``test/distributed/_pycute/`` is a port of CUTLASS's ``test/python/pycute/``: the
same ``(shape, stride)`` numbers, read column-major by CUTLASS (CuTe's order; ``None`` is
CuTe's column-major default stride) and row-major by torch (``None`` is the row-major
default).  ``tests/test_upstream_cutlass_pycute.py`` reads each case the CuTe way (through
``cute_oracle.from_cute``), ``tests/test_upstream_torch_pycute.py`` the torch way; each takes
the cases its upstream has (:func:`of`, :func:`layouts`, :func:`pairs`).  Expected values
that only one upstream writes out stay in that test file.

Sources (repository, path, commit):

* CUTLASS: https://github.com/NVIDIA/cutlass @ 7107b05535f8977f5ecb9d01ee203205b1fd9bc4,
  ``test/python/pycute/test_<op>.py``.
* PyTorch: https://github.com/pytorch/pytorch, ``test/distributed/_pycute/test_<op>.py`` at
  the commits below (why those: ``tests/test_upstream_torch_pycute.py``'s docstring).
"""

from __future__ import annotations

from typing import NamedTuple, Union

Nested = Union[int, tuple["Nested", ...]]
UpstreamLayout = tuple[Nested, Union[Nested, None]]
"""``(shape, stride)`` as both upstreams write it; ``None`` is the upstream's default stride."""


class Source(NamedTuple):
    repo: str
    path: str
    commit: str


_CUTLASS_COMMIT = "7107b05535f8977f5ecb9d01ee203205b1fd9bc4"


def _cutlass(op: str) -> Source:
    return Source("NVIDIA/cutlass", f"test/python/pycute/test_{op}.py", _CUTLASS_COMMIT)


def _torch(op: str, commit: str) -> Source:
    return Source("pytorch/pytorch", f"test/distributed/_pycute/test_{op}.py", commit)


CUTLASS_COALESCE = _cutlass("coalesce")
CUTLASS_COMPLEMENT = _cutlass("complement")
CUTLASS_COMPOSITION = _cutlass("composition")
CUTLASS_RIGHT_INVERSE = _cutlass("right_inverse")
CUTLASS_LEFT_INVERSE = _cutlass("left_inverse")
TORCH_COALESCE = _torch("coalesce", "7d303d7de511f690e0ae45835ef39a9930beeca2")
TORCH_COMPLEMENT = _torch("complement", "159bd768bed1865efce77d9fabae432493e277c1")
TORCH_COMPOSITION = _torch("composition", "49422489549437a54749ebfc1e81c25a07896185")
TORCH_RIGHT_INVERSE = _torch("right_inverse", "c3bcdcb24504ce04d8bb68bf561076d11da00619")
TORCH_LEFT_INVERSE = _torch("left_inverse", "81a74cd5db840cbd4ce2d9d5182e26719a7bb7ca")


class Case(NamedTuple):
    """One upstream case: its arguments and the upstream files that have it."""
    args: tuple[UpstreamLayout, ...]
    sources: tuple[Source, ...]


def of(table: list[Case], repo: str) -> list[tuple[UpstreamLayout, ...]]:
    """The arguments of the cases of ``table`` that ``repo`` ("NVIDIA/cutlass" or
    "pytorch/pytorch") has, in table order."""
    return [c.args for c in table if any(s.repo == repo for s in c.sources)]


def layouts(table: list[Case], repo: str) -> list[UpstreamLayout]:
    """:func:`of` for a table of one-layout cases: the layouts themselves."""
    return [a for (a,) in of(table, repo)]


def pairs(table: list[Case], repo: str) -> list[tuple[UpstreamLayout, UpstreamLayout]]:
    """:func:`of` for a table of two-layout cases."""
    return [(a, b) for a, b in of(table, repo)]


def _table(both: tuple[Source, Source], *rows: tuple[tuple[UpstreamLayout, ...], str]
           ) -> list[Case]:
    """Rows of ``(args, who)``; ``who`` is "both", "cutlass" or "torch"."""
    pick = {"both": both, "cutlass": both[:1], "torch": both[1:]}
    return [Case(args, pick[who]) for args, who in rows]


COALESCE = _table(
    (CUTLASS_COALESCE, TORCH_COALESCE),
    (((1, 0),), "both"),
    (((1, 1),), "both"),
    ((((1, 1), (42, 3)),), "torch"),
    ((((1, 1, 1), (17, 4, 3)),), "torch"),
    ((((2, 4), None),), "both"),
    ((((2, 4, 6), None),), "both"),
    ((((2, 4, 6), (1, 6, 2)),), "both"),
    ((((2, 1, 6), (1, 7, 2)),), "both"),
    ((((2, 1, 6), (4, 7, 8)),), "both"),
    ((((2, (4, 6)), None),), "both"),
    ((((1, 2), (8, 1)),), "torch"),
    ((((2, 4), (4, 1)),), "both"),
    ((((2, 4, 6), (24, 6, 1)),), "both"),
    ((((2, 1, 3), (2, 4, 4)),), "both"),
    (((((2, 2), (2, 2)), ((1, 4), (8, 32))),), "both"),
    (((((2, 2), (2, 2)), ((32, 8), (4, 1))),), "torch"),
)

COMPLEMENT = _table(
    (CUTLASS_COMPLEMENT, TORCH_COMPLEMENT),
    (((1, 0),), "both"),
    (((1, 1),), "both"),
    (((4, 0),), "both"),
    ((((2, 4), (1, 2)),), "both"),
    ((((2, 3), (1, 2)),), "both"),
    ((((2, 4), (1, 4)),), "both"),
    ((((2, 4, 8), (8, 1, 64)),), "both"),
    (((((2, 2), (2, 2)), ((1, 4), (8, 32))),), "both"),
    ((((2, (3, 4)), (3, (1, 6))),), "both"),
)

# injective but not tractable: the upstream answer passes its disjointness check but does
# not cover (see each test file's docstring)
COMPLEMENT_NOT_TRACTABLE = _table(
    (CUTLASS_COMPLEMENT, TORCH_COMPLEMENT),
    ((((4, 6), (1, 6)),), "both"),
    ((((4, 10), (1, 10)),), "both"),
)

COMPOSITION = _table(
    (CUTLASS_COMPOSITION, TORCH_COMPOSITION),
    (((1, 0), (1, 0)), "both"),
    (((1, 0), (1, 1)), "both"),
    (((1, 1), (1, 0)), "both"),
    (((1, 1), (1, 1)), "both"),
    (((4, None), (4, None)), "both"),
    (((4, 2), (4, None)), "both"),
    (((4, None), (4, 2)), "both"),
    (((4, 0), (4, None)), "both"),
    (((4, None), (4, 0)), "both"),
    (((1, 0), (4, None)), "both"),
    (((4, None), (1, 0)), "both"),
    (((4, None), (2, None)), "both"),
    (((4, 2), (2, None)), "both"),
    (((4, None), (2, 2)), "both"),
    (((4, 2), (2, 2)), "both"),
    (((12, None), ((4, 3), None)), "both"),
    (((12, 2), ((4, 3), None)), "both"),
    (((12, None), ((4, 3), (3, 1))), "both"),
    (((12, 2), ((4, 3), (3, 1))), "both"),
    (((12, None), ((2, 3), (2, 4))), "both"),
    ((((4, 3), None), ((4, 3), None)), "both"),
    ((((4, 3), None), (12, None)), "both"),
    ((((4, 3), None), (6, 2)), "both"),
    ((((4, 3), None), ((6, 2), (2, 1))), "both"),
    ((((4, 3), (3, 1)), ((4, 3), None)), "both"),
    ((((4, 3), (3, 1)), (12, None)), "both"),
    ((((4, 3), (3, 1)), (6, 2)), "both"),
    ((((4, 3), (3, 1)), ((6, 2), (2, 1))), "both"),
    ((((8, 8), None), (((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)))), "both"),
    ((((8, 8), (8, 1)), (((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)))), "both"),
    (((((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32))), (8, 4)), "both"),
    ((((4, 2), (1, 16)), ((4, 2), (2, 1))), "both"),
    ((((2, 2), (2, 1)), ((2, 2), (2, 1))), "both"),
    ((((4, 8, 2), None), ((2, 2, 2), (2, 8, 1))), "both"),
    ((((4, 8, 2), (2, 8, 1)), ((2, 2, 2), (1, 8, 2))), "both"),
    ((((4, 8, 2), (2, 8, 1)), ((4, 2, 2), (2, 8, 1))), "both"),
    ((((4, 6, 8), (1, 4, 7)), (6, 1)), "both"),  # "Pre-coalesced LHS"
    ((((8, 6, 4), (7, 4, 1)), (6, 1)), "torch"),  # "Pre-coalesced RHS"
    # "Mid-layout truncation": CUTLASS's numbers, then torch's (their mirror image)
    ((((4, 6, 8, 10), (2, 3, 5, 7)), (6, 12)), "cutlass"),
    ((((10, 8, 6, 4), (7, 5, 3, 2)), (6, 12)), "torch"),
    ((((4,), (3,)), ((6,), (2,))), "torch"),  # B reaches past size(A)
)

RIGHT_INVERSE = _table(
    (CUTLASS_RIGHT_INVERSE, TORCH_RIGHT_INVERSE),
    (((1, 0),), "both"),
    ((((1, 1), (0, 0)),), "both"),
    ((((3, 7), (0, 0)),), "both"),
    (((1, 1),), "both"),
    (((4, 0),), "both"),
    (((4, 1),), "both"),
    (((4, 2),), "both"),
    ((((2, 4), (0, 2)),), "both"),
    ((((8, 4), (1, 8)),), "both"),
    ((((8, 4), (4, 1)),), "both"),
    ((((2, 4, 6), (1, 2, 8)),), "both"),
    ((((2, 4, 6), (4, 1, 8)),), "both"),
    ((((4, 2), (1, 16)),), "both"),
)

LEFT_INVERSE = _table(
    (CUTLASS_LEFT_INVERSE, TORCH_LEFT_INVERSE),
    (((1, 0),), "both"),
    ((((1, 1), (0, 0)),), "both"),
    (((1, 1),), "both"),
    (((4, 1),), "both"),
    (((4, 2),), "both"),
    ((((8, 4), (1, 8)),), "both"),
    ((((8, 4), (4, 1)),), "both"),
    ((((2, 4, 6), (1, 2, 8)),), "both"),
    ((((2, 4, 6), (4, 1, 8)),), "both"),
    ((((4, 2), (1, 16)),), "both"),
)

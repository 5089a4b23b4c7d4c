"""Immutable mesh views with named dims, computed from layouts, with no process group.

Module map (for readers of the code): a value core, the machine model above it, and wings
above both, each a private sub-package; no import cycle anywhere, and no wing imports the
package's ``__init__``.

| sub-package | what it holds | it imports |
|---|---|---|
| ``_core`` | the values: ``MeshView``, ``RankMap``, ``Family``, the errors, the door | no wing |
| ``_topology`` | the machine model: ``Topology`` and its kinds (hosts, fast domains) | ``_core`` |
| ``_draw`` | one instance as a picture: ``render`` (text), ``svg`` | ``_topology`` |
| ``_recover`` | failed ranks: ``blast``, ``drop``, ``substitute``, ``survive`` | ``_core`` |
| ``_decide`` | every way on after a failure, priced: ``recover``, ``Costs`` | ``_recover``, |
| | | ``_tensor``, ``_topology`` |
| ``_tensor`` | tensors on views: ``Sharding``, ``reshard`` (priced on a topology) | ``_topology`` |
| ``_hang`` | a hung job's dumps read against its plan: ``read_flight_records`` | ``_topology`` |
| ``_plan`` | ``explain``, ``compare``, ``place``, what a failure does to a plan | ``_recover``, |
| | | ``_topology`` |
| ``_cli`` | the ``meshlayout`` command (not loaded by ``import mesh``) | every wing |

(every wing imports ``_core`` too; no wing imports ``_cli``, the command that uses the others:
``--svg``, ``--fail``, ``recover``, ``reshard``, ``hang``.)  A newcomer reads first
``_core/_view.py`` (the value every wing computes with), then ``_topology/__init__.py`` (the
machine) and the one wing the change is about, starting at its ``__init__``'s map.

A :class:`MeshView` is ``(layout, names, ranks)``: a :class:`~layout.Layout`
with one top-level mode per dim, unique dim names, and a :class:`RankMap` from
offsets to global ranks (the *universe*).  A view stands for a family of
submeshes (its instances); every per-rank query takes the rank as an argument
and costs O(ndim) arithmetic, plus the ranks it lists (a group, an instance).

>>> from mesh import MeshView
>>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
>>> mesh.flatten(("dp", "cp")).group(5, "dp_cp")
(1, 3, 5, 7)

Input is validated at the door: names, dims, sizes and rank lists must be ordered
sequences (lists, tuples, ranges or 1-D arrays; a set is refused, since its order can
differ between processes), integer-likes become ``int``, and every bad input raises a
:class:`MeshError` subclass naming it.  Queries that list ranks (``groups``,
``instances``, ``instance``, ``instance_array``, ``group``) refuse to list more than their
``limit`` argument (default :data:`MAX_LISTED_RANKS`) and compute the listing by
array arithmetic over the layout (NumPy for large listings when it is installed, plain
Python otherwise).
The door check itself is public, :func:`ordered`, so the layers above refuse unordered
input the same way.

Public names: :class:`MeshView` (queries beyond torch's: ``dim_layout(dim)``;
``family(dim)``, the canonical :class:`Family` value of a dim's groups, equal across
views exactly when the groups are, which backends key their caches on;
``group_offset(rank, dim)`` and ``instance_offset(rank)``; ``index(dim)``;
``num_instances``; ``instance_array``; and, deprecated, ``render(rank)``, which is
:func:`render`),
:class:`RankMap`, :func:`concatenate`, :func:`render` (text) and :func:`svg` (a
picture, up to :data:`MAX_SVG_CELLS` ranks, by host and fast domain); :class:`Topology`
(hosts, devices and fast domains, regular or listed: which groups cross hosts; saved and
loaded with ``to_dict``/``from_dict``) and :func:`explain` (a plan's groups, host
crossings, shared communicators and their cost, as an :class:`Explanation`, with the
memory model :class:`CommMemory`; the ``meshlayout explain`` command, also ``python -m
mesh explain``) and :func:`compare` (plans side by side, each with its own budget, as a
:class:`Comparison`, optionally weighing dims by their traffic with the first-order α-β
link model :class:`Links`; the ``meshlayout compare`` command) and :func:`place` (the
rank order of a plan on a topology whose estimated communication time is least, with the
runner-up in a :class:`Placement`; at most :data:`MAX_PLACED_DIMS` dims of size > 1; the
``meshlayout place`` command); surviving failed ranks,
offline: :func:`blast` (per view and dim, the groups failed ranks break and the healthy
ranks they strand, as a :class:`Blast` of :class:`ViewBlast` and :class:`DimBlast`),
:func:`drop` and :func:`substitute` (a view without the failed ranks' slices, or with
spares in their place) and :func:`survive` (a whole plan re-derived from the survivors, as
a :class:`Survival`: which groups are intact and keep their communicators) and
:func:`recover` (every way on after a failure — spares, drop, re-factor, evicting a host or
fast domain, restart, wait — with its state moves, checkpoint reads, communicators and
time to resume priced by :class:`Costs`, cheapest first, as a :class:`Recovery` of
:class:`Way` values; an impossible input raises :class:`RecoveryError`); the constants
:data:`MAX_LISTED_RANKS`, :data:`MAX_PLAN_DIMS` (the most dims a plan's views hold) and
:data:`FORMAT_VERSION` (of ``to_dict``), the type aliases
``Dim`` (a dim by name or index) and ``Nested`` (a rank tensor as nested tuples), and
the errors (:class:`MeshError` and its subclasses, each documenting what raises it);
tensors on meshes: :class:`Sharding` (a tensor's placement over a view, with torch DTensor's
semantics: :class:`Shard`, :class:`StridedShard`, :class:`Replicate`, :class:`Partial`,
answered per rank) and :func:`reshard` (the plan moving it to another sharding, over the
same, disjoint or overlapping ranks, as a :class:`Reshard` of :class:`Transfer` values) and
:func:`reshard_state` (a whole state's plans, moved in buckets under a memory cap per rank,
as a :class:`StateReshard` of :class:`Message` values),
with the guards :data:`MAX_TENSOR_DIMS` and :data:`MAX_TILES` and :data:`REDUCE_OPS`, the
reductions a :class:`Partial` may name; a hung job: :func:`read_flight_records` (torch's
flight-recorder dumps read against the plan, as a :class:`HangReport` of
:class:`HangFinding` values and the ranks stuck behind them, each a :class:`StuckRank` (as
``backend.check_spmd`` lists its own); unreadable dumps raise :class:`FlightRecordError`).
"""

import sys as _sys
import warnings as _warnings

from layout import __version__ as __version__

from ._core import (
    FORMAT_VERSION,
    MAX_LISTED_RANKS,
    MAX_PLAN_DIMS,
    Dim,
    DuplicateNameError,
    Family,
    FlightRecordError,
    InvalidDimsError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshTypeError,
    MeshView,
    Nested,
    NotRepresentableError,
    NumpyMissingError,
    OffsetOutOfRangeError,
    OverlapError,
    RankMap,
    RankNotInMeshError,
    RecoveryError,
    ShardingError,
    StuckRank,
    SurvivalError,
    TooManyRanksError,
    TopologyError,
    UniverseMismatchError,
    UnknownDimError,
    UnknownViewError,
    concatenate,
    ordered,
)
from ._decide import Costs, Recovery, Refusal, Way, recover
from ._draw import MAX_SVG_CELLS, render, svg
from ._hang import HangFinding, HangReport, read_flight_records
from ._plan import (
    MAX_PLACED_DIMS,
    CommMemory,
    Comparison,
    Explanation,
    Links,
    Placement,
    compare,
    explain,
    place,
)
from ._recover import Blast, DimBlast, Survival, ViewBlast, blast, drop, substitute, survive
from ._tensor import (
    MAX_TENSOR_DIMS,
    MAX_TILES,
    REDUCE_OPS,
    Message,
    Partial,
    Replicate,
    Reshard,
    Shard,
    Sharding,
    StateReshard,
    StridedShard,
    Transfer,
    reshard,
    reshard_state,
)
from ._topology import Topology

__all__ = [
    "Blast",
    "CommMemory",
    "Comparison",
    "Costs",
    "Dim",
    "DimBlast",
    "DuplicateNameError",
    "Explanation",
    "FlightRecordError",
    "FORMAT_VERSION",
    "Family",
    "HangFinding",
    "HangReport",
    "InvalidDimsError",
    "InvalidMeshDataError",
    "InvalidNameError",
    "InvalidRanksError",
    "InvalidSizeError",
    "Links",
    "MAX_LISTED_RANKS",
    "MAX_PLACED_DIMS",
    "MAX_PLAN_DIMS",
    "MAX_SVG_CELLS",
    "MAX_TENSOR_DIMS",
    "MAX_TILES",
    "MeshError",
    "MeshTypeError",
    "MeshView",
    "Message",
    "Nested",
    "NotRepresentableError",
    "NumpyMissingError",
    "OffsetOutOfRangeError",
    "OverlapError",
    "Partial",
    "REDUCE_OPS",
    "Placement",
    "RankMap",
    "RankNotInMeshError",
    "Recovery",
    "RecoveryError",
    "Refusal",
    "Replicate",
    "Reshard",
    "Shard",
    "Sharding",
    "ShardingError",
    "StateReshard",
    "StridedShard",
    "StuckRank",
    "Survival",
    "SurvivalError",
    "TooManyRanksError",
    "Topology",
    "TopologyError",
    "Transfer",
    "UniverseMismatchError",
    "UnknownDimError",
    "UnknownViewError",
    "ViewBlast",
    "Way",
    "blast",
    "compare",
    "concatenate",
    "drop",
    "explain",
    "ordered",
    "place",
    "read_flight_records",
    "recover",
    "render",
    "reshard",
    "reshard_state",
    "substitute",
    "survive",
    "svg",
]

for _cls in [v for v in map(globals().get, __all__) if isinstance(v, type)]:
    # Pickles name the public package, not the private file (as torch pins Placement's), so
    # moving a file breaks no saved value; doctest still finds the class in its file.
    vars(_sys.modules[_cls.__module__]).setdefault("__test__", {})[_cls.__name__] = _cls
    _cls.__module__ = __name__
del _cls
Way.Kind.__module__, Way.Kind.__qualname__ = __name__, "Way.Kind"  # pickled as mesh.Way.Kind


def _render(self: MeshView, rank: int | None = None, *, width: int = 120) -> str:
    """Deprecated: ``mesh.render(view, rank)`` (the text picture of ``rank``'s instance).

    Kept for one release; the value core does not import the drawing wing, so the package
    puts this alias on the class (``_core/_view.py`` declares it for type checkers).
    """
    _warnings.warn("MeshView.render(rank) is deprecated; use mesh.render(view, rank)",
                  DeprecationWarning, stacklevel=2)
    return render(self, rank, width=width)


MeshView.render = _render  # type: ignore[method-assign]  # _core/_view.py declares it

"""The value core of :mod:`mesh`: views, rank maps and families, checked at the door.

Imports :mod:`layout` and nothing else of this project; the wings (``mesh._draw``,
``mesh._recover``, ``mesh._plan``) import it, never the reverse.  What the wings may use
is listed in ``__all__`` below: the values, the errors, the limits, the door checks,
the rank listing and the words reports share.

Module map, lowest first (each imports only modules listed before it): ``_errors`` (the
:class:`MeshError` hierarchy), ``_input`` (validation at the door: ints, sizes, names,
ordered sequences, mappings, the plan's dims limit, files read whole within a bound),
``_numpy`` (the optional NumPy, looked up in one place), ``_rankmap``
(:class:`RankMap`), ``_listing`` (ranks of a layout by array arithmetic, with a limit),
``_dims`` (the checks every view's dims pass), ``_family`` (:class:`Family`, the
canonical value of a dim's groups), ``_view`` (:class:`MeshView`), ``_concat``
(:func:`concatenate`), ``_stuck`` (:class:`StuckRank`, a rank stuck behind others in the
reports that name one: check_spmd's and the hang reader's), ``_words`` (the words every
report shares: :func:`ranks_text` in a :class:`RankStyle`, :func:`call_text`, a call as
check_spmd and the hang reader write it, :func:`nth` and :func:`verb`, the ordinals and
agreeing verbs of their sentences, :func:`never_issued`, their sentence of an unmatched call,
:func:`group_desc`, the ``mesh_<dim>`` name of a mesh's
groups in torch, and :class:`FindingKind`, the kinds of check_spmd's and the hang reader's
findings).
"""

from ._concat import concatenate
from ._errors import (
    DuplicateNameError,
    FlightRecordError,
    InvalidDimsError,
    InvalidMeshDataError,
    InvalidNameError,
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshTypeError,
    NotRepresentableError,
    NumpyMissingError,
    OffsetOutOfRangeError,
    OverlapError,
    RankNotInMeshError,
    RecoveryError,
    ShardingError,
    SurvivalError,
    TooManyRanksError,
    TopologyError,
    UniverseMismatchError,
    UnknownDimError,
    UnknownViewError,
)
from ._family import Family
from ._input import (
    MAX_PLAN_DIMS,
    MAX_UNIVERSE,
    as_int,
    as_name,
    as_names,
    as_size,
    check_plan_dims,
    items_of,
    ordered,
    read_bounded,
    show,
)
from ._listing import MAX_LISTED_RANKS, check_limit, py_offsets, rank_rows, rank_table
from ._numpy import need_numpy, numpy
from ._rankmap import RankMap
from ._stuck import StuckRank
from ._view import FORMAT_VERSION, Dim, MeshView, Nested
from ._words import (
    GROUP_DESC_PREFIX,
    FindingKind,
    RankStyle,
    call_text,
    finding_kind,
    group_desc,
    never_issued,
    nth,
    ranks_text,
    verb,
)

__all__ = [
    "FORMAT_VERSION",
    "GROUP_DESC_PREFIX",
    "MAX_LISTED_RANKS",
    "MAX_PLAN_DIMS",
    "MAX_UNIVERSE",
    "Dim",
    "DuplicateNameError",
    "FlightRecordError",
    "Family",
    "FindingKind",
    "InvalidDimsError",
    "InvalidMeshDataError",
    "InvalidNameError",
    "InvalidRanksError",
    "InvalidSizeError",
    "MeshError",
    "MeshTypeError",
    "MeshView",
    "Nested",
    "NotRepresentableError",
    "NumpyMissingError",
    "OffsetOutOfRangeError",
    "OverlapError",
    "RankMap",
    "RankNotInMeshError",
    "RankStyle",
    "ShardingError",
    "StuckRank",
    "RecoveryError",
    "SurvivalError",
    "TooManyRanksError",
    "TopologyError",
    "UniverseMismatchError",
    "UnknownDimError",
    "UnknownViewError",
    "as_int",
    "as_name",
    "as_names",
    "as_size",
    "call_text",
    "check_limit",
    "check_plan_dims",
    "group_desc",
    "concatenate",
    "finding_kind",
    "need_numpy",
    "never_issued",
    "nth",
    "numpy",
    "items_of",
    "ordered",
    "read_bounded",
    "py_offsets",
    "rank_rows",
    "rank_table",
    "ranks_text",
    "show",
    "verb",
]

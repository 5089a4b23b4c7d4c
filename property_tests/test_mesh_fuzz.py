"""Fuzz law: every call into :mod:`mesh` returns a value or raises a ``mesh.MeshError``.

THE LAW.  Every callable name in ``mesh.__all__`` and every public method and
property of :class:`~mesh.MeshView`, :class:`~mesh.RankMap` and :class:`~mesh.Topology` (with
``__init__``, ``__getitem__``, ``__call__``, ``__eq__``, ``__hash__``,
``__repr__``, pickling and ``copy.deepcopy``), called with 0-3 junk positional
arguments and junk keyword arguments where the signature has them, either
returns or raises an instance of :class:`mesh.MeshError`: never a bare
``TypeError``, ``AttributeError``, ``IndexError``, ``KeyError``,
``RecursionError``, ``ValueError``, ``OverflowError`` or ``MemoryError``
(``MeshTypeError`` is a ``TypeError`` and ``UnknownDimError`` a ``KeyError``,
so the check is ``isinstance(e, mesh.MeshError)``).  A call that does not fit
the signature (too many arguments, an unknown keyword) fails in Python's own
argument binding before any library code runs; it must raise ``TypeError`` and
is outside the law.

Where a call returns, the value is checked cheaply: ints are plain ``int`` (a
bool only where the answer is a truth value), a returned view has unique
non-empty ``str`` names and at least one dim, keeps its universe when it comes
from a transform, and round-trips through ``json.dumps``/``json.loads`` and
``from_dict`` to an equal value with an equal hash; ``to_dict()`` does the
same; ``repr`` gives a ``str``; the message of every raised ``MeshError``
prints.

Arguments are drawn as Python *source* (:class:`Junk`), so a failure prints a
call that can be pasted into a shell with this module's names imported.  Junk:
ints (negative, 0, ``2**70``, ``10**5000``), bools, floats, None, str, bytes,
lists, tuples, sets, frozensets, dicts, classes (``list``, ``np.ndarray``),
NumPy and torch ints, bools and arrays (0-d and 1-d), lists and tuples nested
5000 deep (built iteratively), valid views, rank maps and layouts, objects
whose ``__index__``, ``__iter__``, ``__len__`` or ``__repr__`` raise (also
a ``list`` and a ``Mapping`` subclass that do), generators, huge ranges.

Listing queries on universes over 4096 ranks only get a small ``limit`` (or a
non-int one): :func:`test_listing_a_huge_universe_is_refused_quickly` checks
that they refuse, within a fixed bound on work (``tests/work_bound.py``),
instead of hanging.
"""

from __future__ import annotations

import copy
import inspect
import json
import operator
import pickle
import typing
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar

import hostile
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from work_bound import bounded

import mesh
from layout import Layout
from mesh import (
    InvalidRanksError,
    InvalidSizeError,
    MeshError,
    MeshView,
    RankMap,
    TooManyRanksError,
)

BIG = 10**5000
MESSAGE_LIMIT = 10_000
HUGE_UNIVERSE = 4096  # receivers over this many ranks only get a small limit=


# ---- the names junk is written with -------------------------------------------------------

M_SRC = "MeshView.from_shape((2, 2, 2), ('dp', 'cp', 'tp'))"
M = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))

class Junk(hostile.Junk):
    NS: ClassVar[dict[str, object]] = {
        **{name: getattr(mesh, name) for name in mesh.__all__}, **hostile.HOSTILE,
        "Layout": Layout, "np": np, "torch": torch, "Fraction": Fraction, "BIG": BIG, "M": M,
    }


# ---- strategies (of source strings) -------------------------------------------------------

_VIEWS = (
    M_SRC,
    "MeshView.from_shape(8, ('w',))",
    M_SRC + "['tp', 'dp']",
    "MeshView.from_shape((2, 3, 2), ('dp', 'cp', 'tp')).flatten(('dp', 'tp'))",
    "MeshView.from_ranks([[3, 1], [0, 2]], ('dp', 'tp'))",
    "MeshView.from_shape(12, ('w',)).unflatten('w', (3, 4), ('a', 'b'))['b']",
    "MeshView(Layout(()), [], RankMap(4))",  # no dims: the constructor lets it through
    "MeshView(Layout(2), ['a'], RankMap.explicit([2**70, 0]))",  # a rank past int64
)
_HUGE_VIEWS = (
    "MeshView.from_shape((2**60,), ('w',))",
    "MeshView.from_shape((2**30, 2**30), ('a', 'b'))",
    "MeshView.from_shape((2**64,), ('w',)).unflatten('w', (2**62, 4), ('a', 'b'))['b']",
    "MeshView.from_shape((2**200, 3), ('x', 'y'))",
)
_RANK_MAPS = ("RankMap(4)", "RankMap(1)", "RankMap.explicit([3, 1, 0, 2])", "RankMap(2**60)",
              "RankMap.explicit([2**70, 5])")
_TOPOLOGIES = ("Topology(8, 2)", "Topology(16, 4, hosts_per_domain=3)", "Topology(2**62, 8)",
               "Topology.from_hosts([0, 1, 0, 1, 2, 2, 3, 3])", "Topology(2**60, 2**20)",
               "Topology(12, 3, hosts_per_domain=2)",
               "Topology.from_hosts(['a', 'a', 'b', 'c'] * 2, domains=['x', 'x', 'x', 'y'] * 2)",
               "Topology.from_dict({'version': 1, 'world': 2**62, 'devices_per_host': None, "
               "'ranks': [[0, 2**61, 0], [1, 2**61, 3]], 'hosts_per_domain': 1, 'domains': None, "
               "'hosts': 'n[1-2]'})")
_LAYOUTS = ("Layout((2, 2))", "Layout(4)", "Layout(())", "Layout((2, 2), (1, 1))",
            "Layout(2, 0)", "Layout((2, (2, 2)), (1, (4, 2)))", "Layout(BIG)", "Layout(2**62)")

_JUNK_GROUPS: dict[str, tuple[str, ...]] = {
    "ints": ("0", "1", "2", "3", "-1", "-3", "2**62", "2**63", "2**70", "-(2**70)", "BIG",
             "-BIG"),
    "not ints": ("True", "False", "2.0", "-0.0", "float('nan')", "float('inf')", "None", "3j",
                 "Fraction(2)", "slice(None)", "Ellipsis", "object()"),
    "strings": ("''", "'dp'", "'tp'", "'w'", "'zz'", "'0'", "b''", "b'dp'", "bytearray(b'ab')"),
    "sequences": ("[]", "()", "[0, 1]", "(0, 1)", "['dp', 'tp']", "('dp',)", "[[0, 1], [2, 3]]",
                  "range(3)", "range(2**62)", "range(2**64)"),
    "unordered": ("{0, 1}", "set()", "frozenset({'dp'})", "{'dp', 'tp'}", "{}", "{'dp': 'x'}",
                  "{0: 1}", "{'size': 4}", "{'ranks': [0, 1]}", "{1: 'a', 'b': 2}",
                  "{BIG: 1}", "gen()", "iter([0, 1])"),
    "classes": ("list", "int", "np.ndarray", "torch.Tensor", "MeshView", "RankMap"),
    "arrays": ("np.int64(3)", "np.int64(-1)", "np.uint8(1)", "np.bool_(False)",
               "np.float64(1.0)", "np.array(2)", "np.array(True)", "np.array([0, 1])",
               "np.array([])", "np.array(['dp', 'tp'])", "np.array([[0, 1]])",
               "np.array([2**62, 1])", "torch.tensor(3)", "torch.tensor([0, 1])",
               "torch.tensor(True)", "IntSub(1)", "Color.RED"),
    "deep": ("deep_list(5000)", "deep_tuple(5000)", "deep_list(5000, 'dp')", "deep_tuple(40, 2)"),
    "hostile": ("BadIndex()", "RaisingIndex()", "HostileRepr()", "HostileIter()", "HostileLen()",
                "HostileList([0, 1])", "HostileMapping()"),
    "values": (*_VIEWS[:3], *_RANK_MAPS[:3], *_LAYOUTS[:3], *_TOPOLOGIES[:2]),
}

junk_leaves = st.one_of(*(st.sampled_from(g) for g in _JUNK_GROUPS.values()),
                        st.integers(-4, 9).map(str))


def _tup(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


junk = st.recursive(junk_leaves, lambda kids: st.one_of(
    st.lists(kids, max_size=3).map(_tup),
    st.lists(kids, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]")), max_leaves=5)

_DIMS = ("'dp'", "'cp'", "'tp'", "'w'", "'a'", "'b'", "'x'", "0", "1", "-1", "np.int64(1)")
_DIM_LISTS = ("('dp', 'tp')", "['tp', 'dp']", "('w',)", "('a',)", "[0, 1]", "('cp', 'dp', 'tp')",
              "np.array([0, 1])", "('dp', 'dp')", "('x', 'y')")
_RANKS = ("0", "1", "3", "5", "7", "2**60 - 1", "2**64 - 1", "np.int64(3)", "2**70")
_SIZES = ("(2, 2)", "(4,)", "[2, 4]", "2", "8", "(2, 2, 2)", "(2**60,)", "np.array([2, 2])",
          "(3, 4)", "(2, 3)", "(2,)", "(1, 2)", "[2, 1]", "(2, 2**59)", "(4, 1)")
_NAMES = ("('a', 'b')", "['x']", "('dp', 'cp', 'tp')", "None", "np.array(['a', 'b'])",
          "('a', 'b', 'c')", "('x',)", "['u', 'v']")
_DICTS = tuple(f"({v}).to_dict()" for v in (*_VIEWS[:6], _HUGE_VIEWS[0])) + tuple(
    f"{r}.to_dict()" for r in _RANK_MAPS)
_TOPOLOGY_DICTS = (
    *(f"({t}).to_dict()" for t in _TOPOLOGIES),
    "{**Topology(8, 2).to_dict(), 'hosts': 'n[1-99999999999]'}",
    "{**Topology(8, 2).to_dict(), 'devices_per_host': None, 'ranks': [[0, 4, 0], [0, 4, 1]]}",
    "{**Topology(8, 2).to_dict(), 'devices_per_host': None, 'ranks': [[0, 4, 0], [2, 4, 0]]}",
    "{**Topology(8, 2).to_dict(), 'devices_per_host': None, 'ranks': [[0, 2**62, 0]]}",
    "{**Topology(8, 2).to_dict(), 'hosts_per_domain': None, 'domains': [[0, 3], [1, 2**62]]}")

PLAUSIBLE: dict[str, tuple[str, ...]] = {
    "dim": _DIMS, "key": _DIMS + _DIM_LISTS, "dims": _DIMS + _DIM_LISTS,
    "rank": _RANKS, "offset": _RANKS, "offsets": ("[0, 1]", "(3,)", "np.array([1, 2])"),
    "limit": ("0", "1", "4", "64", "2**70"), "mapping": ("{'dp': 'x'}", "{0: 'y', 'tp': 'z'}",
                                                    "{'dp': 'tp'}", "{'w': 'v'}", "{'a': 'c'}"),
    "sizes": _SIZES, "shape": _SIZES, "names": _NAMES, "name": ("'x'", "None", "'dp'"),
    "d": _DICTS, "views": ("[M['dp'], M['tp']]", "(M['cp'],)", "[M, M]",
                           f"[{_VIEWS[1]}, {_VIEWS[1]}]"),
    "view": _VIEWS + _HUGE_VIEWS, "layout": _LAYOUTS,
    "ranks": ("[3, 1, 0, 2]", "[[0, 1], [2, 3]]", "np.array([[1, 0]])", "None", "RankMap(4)",
              "RankMap(8)", "RankMap.explicit([3, 1, 0, 2])", "(0, 1)"),
    "size": ("4", "2**60", "8"), "n": ("4", "2**60", "1"),
    "world_size": ("8", "16", "2**62", "12"), "devices_per_host": ("2", "4", "8", "3"),
    "hosts_per_domain": ("1", "2", "3"), "hosts": ("[0, 0, 1, 1]", "['a', 'b', 'a', 'b']",
                                                   "('x',) * 8"),
    "host": ("0", "1", "3", "2**61"), "topology": (*_TOPOLOGIES, "None"),
    "Topology.from_dict.d": _TOPOLOGY_DICTS, "level": ("'host'", "'domain'", "'rack'"),
    "domains": ("['x', 'x', 'y', 'y']", "[0] * 8", "['a', 'b', 'a', 'b']", "None"),
    "devices": ("[0, 1, 0, 1]", "[3, 3, 0, 1]", "None", "range(8)"),
    "world": ("None", "8", "16"), "memory": ("None", "CommMemory()", "CommMemory(2, 1, 0)"),
    "channels": ("1", "16"), "buffsize": ("1", "2**22"), "fixed": ("0", "5"),
    "color_by": ("None", "'dp'", "0"), "title": ("None", "'t'"), "max_cells": ("16", "4096"),
    "width": ("40", "80", "120"),
    "mesh.explain.views": ("{'m': M}", "{'a': M, 'b': M['tp']}", f"{{'h': {_HUGE_VIEWS[0]}}}"),
    "mesh.blast.views": ("M", "{'m': M}", "{'a': M, 'b': M['tp']}", f"{{'h': {_HUGE_VIEWS[1]}}}"),
    "failed": ("[5]", "[0, 7]", "[]", "(3,)", "[2**60 - 1]", "[5, 5]", "np.array([1, 2])"),
    "spares": ("[8]", "[8, 9]", "[9, 10, 11]", "[]", "[8, 8]", "[3]"),
    "plan": ("(lambda w: {'w': w})", "(lambda w: {'a': w['tp', 'dp'], 'b': w.flatten(('dp', "
             "'cp'))})", "(lambda w: {'x': w.flatten()})", "(lambda w: w)", "(lambda w: 1 / 0)"),
    "mesh.survive.world": _VIEWS[:5] + _HUGE_VIEWS[:1],
    "mesh.survive.drop": ("'dp'", "'tp'", "0", "None", "'zz'"),
    "mesh.svg.host": ("None", "int", "(lambda r: r // 2)", "Topology(8, 2).host",
                      "Topology(8, 4)"),
    "mesh.svg.domain": ("None", "(lambda r: r // 4)", "Topology(8, 2, hosts_per_domain=2)",
                        "Topology(8, 4).domain"),
    "mesh.place.shape": ("(2, 4)", "(8,)", "(2, 2, 2)", "(2**30, 2**30)", "(4, 2)"),
    "mesh.place.names": ("('dp', 'tp')", "('w',)", "('a', 'b', 'c')", "('x', 'y')"),
    "Placement.find.shape": ("(2, 4)", "(8,)", "(2, 2, 2)", "(2**30, 2**30)", "(4, 2)"),
    "Placement.find.names": ("('dp', 'tp')", "('w',)", "('a', 'b', 'c')", "('x', 'y')"),
    "mesh.compare.plans": ("{'a': M, 'b': M['tp']}", "{'a': {'m': M}, 'b': M}", "{'x': M}",
                           f"{{'h': {_HUGE_VIEWS[0]}}}"),
    "traffic": ("None", "{'tp': 2**20}", "{'dp': 0, 'cp': 5}"),
    "links": ("None", "Links()", "Links(900, 100, 1, 5)"),
    "nbytes": ("0", "2**30", "2**70", "BIG"), "group_size": ("1", "8", "2**62", "BIG"),
    "inside": ("True", "False"),
    "intra_host_gbps": ("3600", "1.5"), "inter_host_gbps": ("400", "0.5"),
    "intra_host_latency_us": ("0", "2.0"), "inter_host_latency_us": ("10", "0.0"),
    "mesh.recover.world": (M_SRC, "MeshView.from_shape(8, ('w',))", _HUGE_VIEWS[0]),
    "mesh.recover.plan": ("(lambda w: {'w': w})", "(lambda w: {'w': w, 'f': w.flatten()})",
                          "(lambda w: 1 / 0)"),
    "state": ("None", "{}", "{'x': Sharding(M, (Replicate(), Shard(0), Shard(1)), (4, 6))}",
              "{'x': Sharding(M, (Shard(0), Shard(0), Shard(1)), (4, 6))}",
              "{'x': Sharding(M['tp'], (Shard(0),), (4,))}"),
    "costs": ("None", "Costs()", "Costs(horizon_s=1, cross_gbps=1e-3)"),
    "itemsize": ("1", "2", "4"), "checkpoint": ("True", "False"),
    # where one name means different things: MeshView(layout, names, ranks) takes a RankMap
    "MeshView.__init__.ranks": (*_RANK_MAPS, "RankMap(8)", "RankMap(16)", "RankMap(2**62)"),
    "mesh.MeshView.ranks": (*_RANK_MAPS, "RankMap(8)", "RankMap(16)", "RankMap(2**62)"),
    "MeshView.__init__.names": (*_NAMES, "('a',)", "['dp', 'cp', 'tp']"),
    "mesh.MeshView.names": (*_NAMES, "('a',)", "['dp', 'cp', 'tp']"),
}
_SAFE_LIMITS = st.sampled_from(("0", "1", "4", "64", "None", "2.0", "True", "'4'", "-BIG",
                                "np.int64(16)"))


def _arg(param: str, where: str = "") -> st.SearchStrategy[str]:
    """Junk (a quarter of the time), or a value that gets past the first check for this
    parameter (looked up as ``owner.function.param``, then ``param``), so that calls with
    several arguments reach their later checks."""
    plausible = PLAUSIBLE.get(f"{where}.{param}", PLAUSIBLE.get(param, ()))
    if not plausible:
        return junk
    return st.tuples(st.integers(0, 3), st.sampled_from(plausible), junk).map(
        lambda t: t[2] if t[0] == 3 else t[1])


# ---- what is fuzzed -----------------------------------------------------------------------

VIEW_METHODS = ("size", "dim_layout", "family", "index", "transpose", "rename", "flatten",
                "unflatten", "coordinate", "local_rank", "group_offset", "instance_offset",
                "group", "groups", "instance", "instance_array", "instances", "to_dict",
                "from_dict", "from_shape", "from_ranks")
VIEW_PROPERTIES = ("shape", "ndim", "num_instances", "layout", "names", "ranks")
RANKMAP_METHODS = ("identity", "explicit", "take", "offset_of", "to_dict", "from_dict", "array")
RANKMAP_PROPERTIES = ("size", "ranks", "is_identity", "max_rank")
TOPOLOGY_METHODS = ("from_hosts", "host", "domain", "host_name", "to_dict", "hosts_of",
                    "hosts_per_group", "domains_per_group", "is_intra_host", "is_intra_domain",
                    "with_domains", "ranks_on", "host_size", "from_dict", "device",
                    "first_crossing", "sizes", "ranks_in_order", "hosts_in", "from_runs")
TOPOLOGY_PROPERTIES = ("world_size", "devices_per_host", "hosts_per_domain", "num_hosts",
                       "num_domains", "in_order")
PLACEMENT_METHODS = ("find", "to_dict", "__str__")
PLACEMENT_PROPERTIES = ("seconds", "view", "runner_up", "data")
LINKS_METHODS = ("allreduce_seconds", "to_dict")
SPECIAL = ("__init__", "__eq__", "__hash__", "__repr__", "pickle", "deepcopy")
NOT_FUZZED = {"MeshView": {"render"}, "RankMap": set(), "Topology": set()}
"""Public methods outside the law: ``MeshView.render``, the deprecated alias of ``mesh.render``
(fuzzed as that)."""
LISTING = {"group", "groups", "instance", "instance_array", "instances"}
TRANSFORMS = {"__getitem__", "transpose", "rename", "flatten", "unflatten"}


ERRORS = [n for n in mesh.__all__ if isinstance(getattr(mesh, n), type)
          and issubclass(getattr(mesh, n), BaseException)]
"""The error classes in ``mesh.__all__``, fuzzed by :func:`test_error_classes_take_junk`."""


def _module_callables() -> list[str]:
    """Callable names in ``mesh.__all__``, but the error classes (fuzzed on their own) and the
    type aliases ``Dim`` and ``Nested`` (``typing.Union`` objects, callable only to say
    "Cannot instantiate typing.Union")."""
    return [n for n in mesh.__all__ if callable(getattr(mesh, n)) and n not in ERRORS
            and typing.get_origin(getattr(mesh, n)) is None]


TARGETS: list[tuple[str, str]] = [
    *[("MeshView", n) for n in (*VIEW_METHODS, *VIEW_PROPERTIES, *SPECIAL, "__getitem__")],
    *[("RankMap", n) for n in (*RANKMAP_METHODS, *RANKMAP_PROPERTIES, *SPECIAL, "__call__")],
    *[("Topology", n) for n in (*TOPOLOGY_METHODS, *TOPOLOGY_PROPERTIES, *SPECIAL)],
    *[("Links", n) for n in LINKS_METHODS],
    *[("Placement", n) for n in (*PLACEMENT_METHODS, *PLACEMENT_PROPERTIES)],
    *[("mesh", n) for n in _module_callables()],
]
RECEIVERS = {"MeshView": _VIEWS + _HUGE_VIEWS, "RankMap": _RANK_MAPS, "Topology": _TOPOLOGIES,
             "Links": ("Links()", "Links(1, 1e-3, 0, 1e4)"),
             "Placement": ("Placement.find((2, 4), ('dp', 'tp'), Topology(8, 2), "
                           "traffic={'tp': 2**20})",
                           "Placement.find((2, 2, 2), ('a', 'b', 'c'), "
                           "Topology.from_hosts([0, 1, 0, 1, 2, 2, 3, 3]))")}
PROPERTIES = {"MeshView": VIEW_PROPERTIES, "RankMap": RANKMAP_PROPERTIES,
              "Topology": TOPOLOGY_PROPERTIES, "Links": (), "mesh": (),
              "Placement": PLACEMENT_PROPERTIES}


# ---- the law ------------------------------------------------------------------------------

def _note(e: BaseException, note: str) -> None:
    """Add ``note`` to the exception's report (Python >= 3.11; silently nothing on 3.10)."""
    add = getattr(e, "add_note", None)
    if add is not None:
        add(note)


class Call:
    """A call written as source, for messages and notes."""

    def __init__(self, src: str) -> None:
        self.src = src

    def run(self, thunk: Callable[[], object]) -> tuple[bool, object]:
        """``(True, value)`` if the call returned, ``(False, error)`` if it raised a MeshError;
        any other exception goes on, with the call as a note."""
        try:
            return True, thunk()
        except MeshError as e:
            try:
                message = str(e)
            except Exception as bad:
                _note(bad, f"str() of the {type(e).__name__} raised by: {self.src}")
                raise
            assert len(message) < MESSAGE_LIMIT, f"{self.src}: a {len(message)}-char message"
            return False, e
        except Exception as e:
            _note(e, f"law broken by: {self.src}")
            raise


def _plain_ints(x: object, where: str, bools: bool = False) -> None:
    """Every int inside the (tuple-nested) value ``x`` is a plain ``int``."""
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(v)
        elif isinstance(v, (bool, np.bool_)):
            assert bools and type(v) is bool, f"{where} returned the bool {v!r}"
        else:
            assert v is None or type(v) is int, \
                f"{where} returned {type(v).__name__} where a plain int is due"


def check_view(v: MeshView, where: str) -> None:
    """A returned view: unique non-empty str names, >= 1 dim, plain-int shape, a JSON round
    trip to an equal value with an equal hash, and a repr."""
    assert isinstance(v.names, tuple) and all(isinstance(n, str) and n for n in v.names), \
        f"{where}: names {v.names!r}"
    assert len(set(v.names)) == len(v.names), f"{where}: duplicate names {v.names!r}"
    assert v.ndim >= 1, f"{where} returned a view with no dims (InvalidSizeError is due)"
    assert len(v.shape) == v.ndim
    _plain_ints(v.shape, where)
    check_dict(v.to_dict(), MeshView, v, where)
    assert isinstance(repr(v), str)


def check_rank_map(r: RankMap, where: str) -> None:
    _plain_ints((r.size, *(r.ranks or ())), where)
    check_dict(r.to_dict(), RankMap, r, where)
    assert isinstance(repr(r), str)


def check_dict(d: dict[str, Any], cls: Any, value: object, where: str) -> None:
    """``to_dict()`` goes through JSON and ``from_dict`` back to an equal value, equal hash."""
    back = cls.from_dict(json.loads(json.dumps(d)))
    assert back == value and hash(back) == hash(value), f"{where}: {d!r} does not round-trip"


def check_result(owner: str, name: str, recv: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: object, where: str) -> None:
    """Cheap checks on a value a call returned."""
    if name in ("__eq__", "is_identity", "is_intra_host", "is_intra_domain"):
        assert out is NotImplemented or type(out) is bool, f"{where} returned {out!r}"
        return
    if name == "ordered":  # the items of an ordered sequence, in order, as a tuple
        value = args[0] if args else kwargs["value"]
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        assert type(out) is tuple and list(out) == items, f"{where} returned {out!r}"
        return
    if isinstance(out, MeshView):
        check_view(out, where)
        if name in TRANSFORMS:
            assert out.ranks == recv.ranks, f"{where}: a transform changed the universe"
    elif isinstance(out, RankMap):
        check_rank_map(out, where)
    elif isinstance(out, dict) and owner == "Topology":
        check_dict(out, mesh.Topology, recv, where)
    elif isinstance(out, dict) and owner in ("Links", "Placement"):
        assert json.loads(json.dumps(out)) == out, f"{where}: not plain JSON data"
    elif isinstance(out, dict):
        check_dict(out, MeshView if owner == "MeshView" else RankMap, recv, where)
    elif isinstance(out, mesh.Placement):
        data = out.to_dict()
        assert json.loads(json.dumps(data)) == data, f"{where}: not plain JSON data"
        assert isinstance(str(out), str) and MeshView.from_dict(data["chosen"]["view"]) == out.view
        check_view(out.view, where)
    elif isinstance(out, (mesh.Explanation, mesh.Comparison)):
        data = out.to_dict()
        assert json.loads(json.dumps(data)) == data, f"{where}: not plain JSON data"
        assert isinstance(str(out), str)
    elif isinstance(out, mesh.Blast):
        data = out.to_dict()
        assert json.loads(json.dumps(data)) == data, f"{where}: not plain JSON data"
        assert isinstance(str(out), str) and pickle.loads(pickle.dumps(out)) == out
    elif isinstance(out, mesh.Survival):
        check_view(out.world, where)
        for view in out.views.values():
            check_view(view, where)
    elif isinstance(out, mesh.Family):
        assert out.ranks.size % out.layout.size == 0, f"{where}: {out!r}"
    elif isinstance(out, mesh.Recovery):
        data = out.to_dict()
        assert json.loads(json.dumps(data)) == data, f"{where}: not plain JSON data"
        assert [w.cost for w in out.ways] == sorted(w.cost for w in out.ways), where
        for way in out.ways:
            for view in way.views.values():
                check_view(view, where)
    elif isinstance(out, mesh.Costs):
        assert json.loads(json.dumps(out.to_dict())) == out.to_dict(), where
        assert pickle.loads(pickle.dumps(out)) == out, where
    elif isinstance(out, (mesh.Topology, mesh.CommMemory, mesh.Links)):
        assert isinstance(repr(out), str) and pickle.loads(pickle.dumps(out)) == out
        if name == "with_domains":
            assert (out.world_size, out.num_hosts) == (recv.world_size, recv.num_hosts), where
    elif isinstance(out, np.ndarray) and name == "array":  # a rank map's explicit ranks
        assert out.tolist() == list(recv.ranks) and not out.flags.writeable, where
    elif isinstance(out, np.ndarray):
        assert name == "instance_array" and out.dtype == np.int64, where
        assert out.shape == recv.shape, f"{where}: shape {out.shape} != {recv.shape}"
        nested = recv.instance(args[0] if args else kwargs["rank"], limit=out.size)
        assert out.tolist() == json.loads(json.dumps(nested)), f"{where}: != instance()"
    elif isinstance(out, (mesh.Shard, mesh.StridedShard, mesh.Replicate, mesh.Partial)):
        back = pickle.loads(pickle.dumps(out))
        assert back == out and hash(back) == hash(out) and isinstance(repr(out), str), where
        _plain_ints(tuple(getattr(out, f) for f in ("dim", "split_factor") if hasattr(out, f)),
                    where)
    elif isinstance(out, mesh.Sharding):
        check_view(out.view, where)
        _plain_ints(out.shape, where)
        assert len(out.placements) == out.view.ndim and isinstance(repr(out), str), where
    elif isinstance(out, mesh.Reshard):
        assert out.src.shape == out.dst.shape and isinstance(repr(out), str), where
    elif isinstance(out, mesh.Transfer):
        _plain_ints((out.source, out.dest, out.elements, out.boxes, out.contribution), where)
    elif isinstance(out, mesh.Message):
        _plain_ints((out.bucket, out.phase, out.source, out.dest, out.nbytes), where)
        assert all(type(n) is str and isinstance(t, mesh.Transfer) for n, t in out.items), where
    elif isinstance(out, mesh.StateReshard):
        _plain_ints((out.buckets, out.cap), where)
        assert all(type(n) is str and isinstance(p, mesh.Reshard) for n, p in out.named), where
        assert isinstance(repr(out), str), where
    elif isinstance(out, (mesh.HangFinding, mesh.HangReport)):
        assert isinstance(str(out), str) and isinstance(repr(out), str), where
    elif isinstance(out, mesh.StuckRank):
        _plain_ints((out.rank, *out.waits_for), where)  # its group is the caller's, any value
    elif isinstance(out, (str, Layout, MeshError)):
        pass
    elif isinstance(out, float):
        assert name == "allreduce_seconds" and out >= 0, f"{where} returned {out!r}"
    else:
        _plain_ints(out, where)
    if name == "group" and isinstance(out, tuple):
        rank = operator.index(args[0] if args else kwargs["rank"])
        assert rank in out, f"{where}: the group of rank {rank} is {out}"


def _call_special(name: str, recv: Any, args: tuple[Any, ...]) -> object:
    """``recv[key]``, ``recv == x``, ``hash``, ``repr``, pickling, copying: none takes keywords."""
    if name == "__getitem__":
        return recv[args[0] if len(args) == 1 else args]
    if name == "__eq__":
        recv == args[0]  # noqa: B015  (the reflected comparison must not raise either)
        return recv.__eq__(args[0])
    if name == "__hash__":
        h = hash(recv)
        assert type(h) is int
        return h
    if name == "__repr__":
        r = repr(recv)
        assert type(r) is str
        return r
    if name == "pickle":
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(recv, protocol=protocol))
            assert back == recv and hash(back) == hash(recv), f"pickle protocol {protocol}"
        return None
    assert name == "deepcopy"
    for back in (copy.deepcopy(recv), copy.copy(recv)):
        assert back == recv and hash(back) == hash(recv)
    return None


_N_SPECIAL_ARGS = {"__eq__": st.just(1), "__getitem__": st.integers(1, 3), "__hash__": st.just(0),
                   "__repr__": st.just(0), "pickle": st.just(0), "deepcopy": st.just(0)}


@pytest.mark.parametrize(("owner", "name"), TARGETS)
@given(data=st.data())
def test_every_call_returns_or_raises_a_mesh_error(owner: str, name: str,
                                                    data: st.DataObject) -> None:
    """THE LAW: this call, with junk arguments, returns (a value that passes the cheap checks)
    or raises a ``mesh.MeshError``; arguments that do not fit the signature are Python's
    ``TypeError``, outside the law."""
    recv: Any = None
    recv_src = ""
    if owner != "mesh":
        recv_src = data.draw(st.sampled_from(RECEIVERS[owner]), label="receiver")
        recv = Junk(recv_src).build()
    huge = isinstance(recv, MeshView) and recv.ranks.size > HUGE_UNIVERSE
    head = name if owner == "mesh" else f"({recv_src}).{name}"
    if name in PROPERTIES[owner]:
        ok, out = Call(head).run(lambda: getattr(recv, name))
        if ok and name == "names":
            assert isinstance(out, tuple) and all(type(n) is str for n in out), f"{head}: {out!r}"
        elif ok and owner == "Placement":
            assert out is None or isinstance(out, (MeshView, dict, float)), f"{head}: {out!r}"
        elif ok and not isinstance(out, (Layout, RankMap)):
            _plain_ints(out, head, bools=name in ("is_identity", "in_order"))
        return
    fn: Any = (getattr(mesh, name) if owner == "mesh" else getattr(mesh, owner)
               if name == "__init__" else recv if name == "__call__" else None
               if name in _N_SPECIAL_ARGS else getattr(recv, name))
    sig: inspect.Signature | None = None
    if fn is not None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # exception classes have none
            sig = None
    params = list(sig.parameters.values()) if sig is not None else []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = any(p.kind == p.VAR_POSITIONAL for p in params)
    required = sum(p.default is p.empty for p in positional)
    n_args = data.draw(_N_SPECIAL_ARGS.get(name, st.one_of(st.just(required),
                                                           st.integers(0, 3))), label="n_args")

    def pname(i: int) -> str:
        if name == "__getitem__":
            return "key"
        if i < len(positional):
            return positional[i].name
        return "dims" if star else ""

    arg_srcs = [data.draw(_arg(pname(i), f"{owner}.{name}"), label=f"arg {i}")
                for i in range(n_args)]
    kw_srcs: dict[str, str] = {}
    for i, p in enumerate(params):
        keyword = p.kind == p.KEYWORD_ONLY or (
            p.kind == p.POSITIONAL_OR_KEYWORD and i >= n_args and not star)
        if keyword and data.draw(st.booleans(), label=f"pass {p.name}="):
            safe = p.name == "limit" and huge
            kw_srcs[p.name] = data.draw(_SAFE_LIMITS if safe else _arg(p.name, f"{owner}.{name}"),
                                        label=p.name)
    if huge and name in LISTING and "limit" not in kw_srcs:
        kw_srcs["limit"] = data.draw(_SAFE_LIMITS, label="limit (huge universe)")
    args = tuple(Junk(s).build() for s in arg_srcs)
    kwargs = {k: Junk(s).build() for k, s in kw_srcs.items()}
    where = head + "(" + ", ".join([*arg_srcs, *(f"{k}={v}" for k, v in kw_srcs.items())]) + ")"

    if fn is None:
        ok, out = Call(where).run(lambda: _call_special(name, recv, args))
    else:
        if sig is not None:
            try:
                sig.bind(*args, **kwargs)
            except TypeError:  # Python's argument binding: before any library code runs
                with pytest.raises(TypeError):
                    fn(*args, **kwargs)
                return
        ok, out = Call(where).run(lambda: fn(*args, **kwargs))
    if ok:
        check_result(owner, name, recv, args, kwargs, out, where)


@given(name=st.sampled_from(ERRORS), args=st.lists(junk, max_size=3))
def test_error_classes_take_junk(name: str, args: list[str]) -> None:
    """THE LAW, for the error classes in ``mesh.__all__``: called with 0-3 junk arguments, each
    returns an instance of itself, a ``mesh.MeshError``."""
    cls = getattr(mesh, name)
    values = [Junk(a).build() for a in args]
    ok, out = Call(f"{name}({', '.join(args)})").run(lambda: cls(*values))
    assert ok and isinstance(out, cls) and isinstance(out, MeshError)


def test_every_public_name_is_fuzzed() -> None:
    """Every public method and property of MeshView, RankMap and Topology is a fuzz target
    (but those :data:`NOT_FUZZED` says why not), and every callable in ``mesh.__all__`` (but
    the two type aliases)."""
    fuzzed = {o: {n for oo, n in TARGETS if oo == o}
              for o in ("MeshView", "RankMap", "Topology", "mesh")}
    for cls in (MeshView, RankMap, mesh.Topology):
        public = {n for n in dir(cls) if not n.startswith("_")} - NOT_FUZZED[cls.__name__]
        assert public <= fuzzed[cls.__name__], sorted(public - fuzzed[cls.__name__])
        call = {MeshView: {"__getitem__"}, RankMap: {"__call__"}}.get(cls, set())
        assert {"__init__", *call, "__eq__", "__hash__", "__repr__", "pickle",
                "deepcopy"} <= fuzzed[cls.__name__]
    assert {"concatenate", "render", "MeshView", "RankMap", "Topology", "explain", "svg",
            "CommMemory", "blast", "drop", "substitute", "survive", "place",
            "Placement", "Sharding", "reshard", "Shard", "StridedShard", "Replicate",
            "Partial", "recover", "Costs", "Recovery", "Way"} <= fuzzed["mesh"]
    placement = {n for n in dir(mesh.Placement) if not n.startswith("_")}
    assert placement <= {n for o, n in TARGETS if o == "Placement"}, placement
    assert "MeshError" in ERRORS and len(ERRORS) == 22, ERRORS
    skipped = {n for n in mesh.__all__ if callable(getattr(mesh, n))} - fuzzed["mesh"]
    assert skipped == {"Dim", "Nested", *ERRORS}, skipped


# ---- listing a huge universe is refused, quickly -----------------------------------------

_HUGE_LISTINGS = [
    ("MeshView.from_shape((2**60,), ('w',))", "groups('w')"),
    ("MeshView.from_shape((2**60,), ('w',))", "instances()"),
    ("MeshView.from_shape((2**60,), ('w',))", "instance(0)"),
    ("MeshView.from_shape((2**60,), ('w',))", "instance_array(0)"),
    ("MeshView.from_shape((2**60,), ('w',))", "group(0, 'w')"),
    ("MeshView.from_shape((2**60,), ('w',))", "groups('w', limit=2**20)"),
    ("MeshView.from_shape((2**60,), ('w',))", "instance(2**60 - 1, limit=10)"),
    ("MeshView.from_shape((2**30, 2**30), ('a', 'b'))", "groups('a')"),
    ("MeshView.from_shape((2**30, 2**30), ('a', 'b'))", "group(5, 'b')"),
    ("MeshView.from_shape((2**30, 2**30), ('a', 'b'))['a']", "instances()"),
    ("MeshView.from_shape((2**30, 2**30), ('a', 'b'))['a']", "instance_array(2**50)"),
    ("MeshView.from_shape((2**63,), ('w',))", "groups(0)"),
    ("MeshView.from_shape((2**63,), ('w',))", "instances(limit=4096)"),
    ("MeshView.from_shape((2**63,), ('w',))", "group(2**63 - 1, 'w')"),
    ("MeshView.from_shape((2**61, 4), ('x', 'y'))", "groups('y')"),
    ("MeshView.from_shape((2**61, 4), ('x', 'y'))", "instances(limit=1 << 24)"),
    ("MeshView.from_ranks([[0, 2], [1, 3]], ('dp', 'tp'))", "instances(limit=3)"),
]


@pytest.mark.parametrize(("view", "query"), _HUGE_LISTINGS)
def test_listing_a_huge_universe_is_refused_quickly(view: str, query: str) -> None:
    """THE LAW, for listings: a query that would list more ranks than its ``limit`` raises
    ``TooManyRanksError`` (a ``MeshError``) in a few thousand Python steps and under 1 MiB,
    instead of hanging.  (Its seconds, against a 1 s target: ``bench/time_bounds.py``.)"""
    v = Junk(view).build()
    with bounded(events=20_000, peak_bytes=1 << 20), pytest.raises(TooManyRanksError):
        eval(f"v.{query}", {"v": v})


@pytest.mark.parametrize("view", ["MeshView.from_shape((2**64,), ('w',))",
                                  "MeshView.from_shape((2**200, 4), ('x', 'y'))",
                                  "RankMap(2**63 + 1)", "RankMap.explicit([2**63])"])
def test_a_universe_past_2_63_ranks_is_refused_at_the_door(view: str) -> None:
    """Universes hold at most 2**63 ranks and ranks are below 2**63 (they fit int64, as in
    torch): beyond that, construction raises a ``MeshError`` naming the value."""
    with pytest.raises((InvalidSizeError, InvalidRanksError), match=r"2\*\*63"):
        eval(view, {"MeshView": MeshView, "RankMap": RankMap})


# ---- calls that broke the law when this file was written ----------------------------------

FOUND = [
    # str() of an int past 4300 digits in a message, a repr or a name
    "MeshView.from_shape(BIG, ('w',))",
    "MeshView(Layout(BIG), ['w'], RankMap(BIG))",
    "MeshView(Layout(BIG), ['x'], RankMap(4))",
    "repr(RankMap(BIG))",
    "repr(RankMap.explicit([BIG]))",
    "RankMap.explicit([BIG, BIG])",
    "RankMap(2, [BIG, BIG])",
    "RankMap(BIG)(BIG)",
    "RankMap(BIG).take([-1])",
    "M.index(BIG)",
    "M.size(-BIG)",
    "M.dim_layout(BIG)",
    "M[BIG]",
    "M.transpose(BIG, 0, 1)",
    "M.rename({BIG: 'x'})",
    "M.group(0, BIG)",
    "M.group_offset(0, BIG)",
    "M.local_rank(0, BIG)",
    "M.group(0, 0, limit=-BIG)",
    "MeshView.from_shape((2**60,), ('w',)).groups('w', limit=-BIG)",
    "M.unflatten('dp', (BIG,), ('a',))",
    "M.unflatten('dp', (BIG, 2), ('a',))",
    "MeshView.from_dict({BIG: 1})",
    "MeshView.from_dict({'version': 1, 'layout': {'shape': [2], 'stride': [BIG]}, "
    "'names': ['a'], 'ranks': {'size': 2}})",
    "repr(MeshView.from_dict({'version': 1, 'layout': {'shape': [2], 'stride': [1]}, "
    "'names': ['a'], 'ranks': {'size': BIG}}))",
    "MeshView.from_ranks([BIG, BIG])",
    # a view with no dims is accepted, then breaks
    "MeshView(Layout(()), [], RankMap(4))",
    "MeshView.from_dict({'version': 1, 'layout': {'shape': [], 'stride': []}, 'names': [], "
    "'ranks': {'size': 4}})",
    "MeshView(Layout(()), [], RankMap(4)).instance(0)",
    "MeshView(Layout(()), [], RankMap(4)).instances()",
    # render does not check its view
    "render(5)",
    "render(None, 0)",
    "render(RankMap(4))",
    # from_ranks calls tolist on a class
    "MeshView.from_ranks(np.ndarray)",
    # dict keys and mappings are read without a guard
    "MeshView.from_dict({HostileRepr(): 1})",
    "MeshView.from_dict(HostileMapping())",
    "RankMap.from_dict(HostileMapping())",
    "M.rename(HostileMapping())",
    # a list subclass that raises passes the ordered-sequence check
    "RankMap.explicit(HostileList([0, 1]))",
    "MeshView.from_shape(HostileList([2]))",
    "M[HostileList([0])]",
    "MeshView.from_ranks(HostileList([0]))",
    "RankMap.from_dict({'ranks': HostileList([0])})",
    "concatenate(HostileList([M]))",
    # huge ranges are materialized
    "RankMap.explicit(range(2**62))",
    "M.flatten(range(2**62))",
    "RankMap(2**62, range(2**62))",
    "RankMap(4).take(range(2**64))",
    # ranks past int64 reach NumPy
    "MeshView(Layout(2), ['a'], RankMap.explicit([2**70, 0])).instance_array(0)",
    "MeshView(Layout(4096), ['a'], RankMap.explicit([2**70, *range(1, 4096)])).groups(0)",
    "MeshView.from_shape((2**64,), ('w',)).unflatten('w', (2**62, 4), ('a', 'b'))['b']"
    ".instance_array(2**64 - 1)",
    # a limit past what can be allocated reaches NumPy
    "MeshView.from_shape((2**60,), ('w',)).groups(0, limit=2**70)",
    "MeshView.from_shape((2**60,), ('w',)).instance_array(0, limit=2**70)",
]


@pytest.mark.parametrize("src", FOUND)
def test_calls_found_by_the_fuzz_obey_the_law(src: str) -> None:
    """THE LAW, for each call the fuzz found breaking it: it returns (a view that passes the
    cheap checks) or raises a ``mesh.MeshError``."""
    ok, out = Call(src).run(lambda: eval(src, Junk.NS))
    if ok and isinstance(out, MeshView):
        check_view(out, src)
    if ok and isinstance(out, RankMap):
        check_rank_map(out, src)

"""Plan files: a bounded read, a run, and their ``VIEWS``, ``TOPOLOGY``, ``WORLD`` and
``PLAN`` checked.

A plan file is Python the command runs (like a ``config.py``): :func:`load` reads at most
:data:`MOST_PLAN_BYTES`, runs the source as the module ``__meshlayout_plan__`` and returns
its views (``VIEWS``, or ``PLAN(WORLD)``: at most :data:`~mesh.MAX_PLAN_DIMS` entries and
dims), its topology and how the views derive from their world.  Anything wrong is a
:class:`Refused` naming the file.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

from layout import show_error

from .._core import (
    MAX_PLAN_DIMS,
    MeshView,
    as_name,
    check_plan_dims,
    items_of,
    read_bounded,
    show,
)
from .._plan import DerivedFrom
from .._topology import Topology

__all__ = ["MOST_PLAN_BYTES", "Refused", "load", "load_tensors"]


class Refused(Exception):
    """Bad input found by the command itself (reported with exit status 2)."""


MOST_PLAN_BYTES = 1 << 22
"""The largest plan file read (4 MiB of Python: a plan defines views by their shapes, or
loads a large rank list from a data file itself)."""


def load(path: str) -> tuple[dict[str, MeshView], Topology | None, DerivedFrom | None]:
    """VIEWS, TOPOLOGY and (PLAN, WORLD) of a plan file (VIEWS defaults to PLAN(WORLD))."""
    ns = _run(path, _source(path))
    derived_from = _derived_from(ns, path)
    views = _views(ns.get("VIEWS"), path, "VIEWS")
    if derived_from is not None:
        views = _derived_views(derived_from, views if "VIEWS" in ns else None, path)
    if not views:
        raise Refused(f"the plan file {path!r} must define VIEWS, a non-empty dict of view "
                      f"name -> mesh.MeshView; it defines {_what(ns.get('VIEWS'))}")
    topology = ns.get("TOPOLOGY")
    if topology is not None and not isinstance(topology, Topology):
        raise Refused(f"TOPOLOGY in {path!r} must be a mesh.Topology, got {_what(topology)}")
    return views, topology, derived_from


def load_tensors(path: str) -> tuple[dict[str, Any], Topology | None]:
    """TENSORS (a dict of tensor name -> :class:`mesh.Sharding`) and TOPOLOGY of a plan
    file, for ``meshlayout reshard``; what TENSORS holds is checked by the command."""
    ns = _run(path, _source(path))
    tensors = ns.get("TENSORS")
    if not isinstance(tensors, Mapping) or not tensors:
        raise Refused(f"the plan file {path!r} must define TENSORS, a non-empty dict of tensor "
                      f"name -> mesh.Sharding; it defines {_what(tensors)}")
    topology = ns.get("TOPOLOGY")
    if topology is not None and not isinstance(topology, Topology):
        raise Refused(f"TOPOLOGY in {path!r} must be a mesh.Topology, got {_what(topology)}")
    return dict(items_of(tensors, f"TENSORS in {path!r}", "a mapping", limit=1 << 16)), topology


def _source(path: str) -> bytes:
    """The plan file's bytes: at most :data:`MOST_PLAN_BYTES`."""
    return read_bounded(path, "the plan file", MOST_PLAN_BYTES, Refused, " (a large rank list "
                        "belongs in a data file the plan reads, e.g. "
                        "MeshView.from_dict(json.load(...)))")


def _run(path: str, source: bytes) -> dict[str, Any]:
    """Run a plan file's source as the module ``__meshlayout_plan__`` (as ``runpy`` would):
    its globals.  The plan sees ``sys.argv == [path]``, not meshlayout's flags."""
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except Exception as e:  # a syntax error, null bytes, nesting too deep for the parser
        raise Refused(f"the plan file {path!r} is not Python: {show_error(e)}") from None
    name = "__meshlayout_plan__"
    module = types.ModuleType(name)
    module.__file__ = path
    saved_argv, saved_module = sys.argv, sys.modules.get(name)
    sys.argv, sys.modules[name] = [path], module
    try:
        exec(code, module.__dict__)
    except SystemExit as e:
        raise Refused(f"the plan file {path!r} exited (SystemExit: {show(e.code)}) instead of "
                      "defining VIEWS") from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the plan's own code failed: say so, briefly
        raise Refused(f"the plan file {path!r} raised {show_error(e)}") from None
    finally:
        sys.argv = saved_argv
        if saved_module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved_module
    return module.__dict__


def _views(views: object, path: str, what: str) -> dict[str, MeshView]:
    """A plan's views read from ``VIEWS`` or ``PLAN(WORLD)``: at most
    :data:`~mesh.MAX_PLAN_DIMS` entries and dims (empty: none defined)."""
    if views is None:
        return {}
    if not isinstance(views, Mapping):
        raise Refused(f"the plan file {path!r} must define VIEWS, a non-empty dict of view "
                      f"name -> mesh.MeshView; {what} is {_what(views)}")
    out: dict[str, MeshView] = {}
    for name, view in items_of(views, f"{what} in {path!r}", "a mapping", limit=MAX_PLAN_DIMS):
        if not isinstance(name, str) or not isinstance(view, MeshView):
            raise Refused(f"{what} in {path!r} maps {show(name)} to {_what(view)}; every "
                          "entry must be a name (str) -> mesh.MeshView")
        out[as_name(name, f"every view name in {what}")] = view
    check_plan_dims((v.ndim for v in out.values()), f"{what} in {path!r}")
    return out


def _derived_from(ns: dict[str, Any], path: str) -> DerivedFrom | None:
    """PLAN and WORLD of a plan file, both or neither."""
    fn, world = ns.get("PLAN"), ns.get("WORLD")
    if fn is None and world is None:
        return None
    if not callable(fn) or not isinstance(world, MeshView):
        raise Refused(f"the plan file {path!r} must define both WORLD, a mesh.MeshView, and "
                      f"PLAN, a function WORLD -> VIEWS, or neither; WORLD is {_what(world)} "
                      f"and PLAN {_what(fn)}")
    return fn, world


def _derived_views(derived_from: DerivedFrom, views: dict[str, MeshView] | None, path: str
                   ) -> dict[str, MeshView]:
    """PLAN(WORLD), which VIEWS (if the file defines it) must equal."""
    try:
        made = derived_from[0](derived_from[1])
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the plan's own code failed (or exited): say so, briefly
        raise Refused(f"PLAN(WORLD) in {path!r} raised {show_error(e)}") from None
    derived = _views(made, path, "PLAN(WORLD)")
    if views is not None and views != derived:
        raise Refused(f"VIEWS in {path!r} differs from PLAN(WORLD): define VIEWS = "
                      "PLAN(WORLD), or leave VIEWS out")
    return derived


def _what(x: Any) -> str:
    return "nothing" if x is None else f"a {type(x).__name__}"

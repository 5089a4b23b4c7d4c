"""The ``meshlayout`` command: ``meshlayout explain`` shows a plan before it is launched.

Imports only :mod:`mesh` and :mod:`layout` (never torch): a 2**20-rank plan is explained
in about a second on a laptop.  Exit status: 0 on success, 1 when ``--expect-intra-host``
finds a dim whose groups cross hosts, 2 for bad input (flags, plan file, views), 130 when
interrupted (Ctrl-C, or a plan raising ``KeyboardInterrupt``).

Bad input is refused before work proportional to it: a plan file is read up to
:data:`MOST_PLAN_BYTES` (a device or a pipe that never ends is cut there), its ``VIEWS``
up to :data:`~mesh.MAX_PLAN_DIMS` entries, failed ranks are counted before they are
listed, and ``--fail`` derives ways only for worlds it can list
(:data:`~mesh._plan._fail.MOST_WAYS_RANKS`).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from layout import show_error

from .._core import (
    MAX_PLAN_DIMS,
    MeshError,
    MeshView,
    as_name,
    check_plan_dims,
    items_of,
    show,
)
from .._draw import MAX_SVG_CELLS, svg
from . import _args
from ._compare import compare_placed
from ._explain import DEFAULT_DEVICES_PER_HOST, CommMemory, Explanation, explain
from ._fail import failed_on, failure
from ._report import failure_report
from ._topology import Topology
from ._traffic import Links

__all__ = ["main"]

_MIB = 1 << 20
_MOST_DIGITS = 30  # a --dims size longer than this is refused before Python parses it
MOST_PLAN_BYTES = 1 << 22
"""The largest plan file read (4 MiB of Python: a plan defines views by their shapes, or
loads a large rank list from a data file itself)."""
_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a tool stopped by Ctrl-C

_EPILOG = """\
examples:
  meshlayout explain --world 1024 --devices-per-host 8 --dims pp=4,dp=8,cp=4,tp=8 --rank 5
  meshlayout explain examples/torchtitan_plan.py --format json
  meshlayout explain plan.py --expect-intra-host tp,ep      (exit 1 if tp or ep crosses hosts)
  meshlayout explain plan.py --svg plan.svg --view dense --color-by fsdp
  meshlayout explain --world 32 --dims dp=4,tp=8 --fail 13 --spares 32 --rank 9

A plan file is Python that meshlayout runs (like a config.py: explain only plans you
trust) and that defines VIEWS, a dict of view name -> mesh.MeshView, and
optionally TOPOLOGY, a mesh.Topology; with WORLD (a mesh.MeshView) and PLAN (a
function WORLD -> VIEWS), --fail also re-derives the plan from the survivors.
--devices-per-host (with --world) replaces TOPOLOGY's hosts, --hosts-per-domain
regroups them, and --dims replaces VIEWS with one view. Exit status: 0 done, 1 an
--expect-intra-* check failed, 2 bad input.
"""

_COMPARE_EPILOG = """\
examples:
  meshlayout compare --world 512 --dims dp=64,tp=8 --dims tp=8,dp=64 --traffic tp=1GiB,dp=256MiB
  meshlayout compare plan_a.py plan_b.py --format json

Each plan is explained on its own (its own TOPOLOGY, which the machine flags replace for
every plan), so each plan's communicators and memory are its own. The time estimate is a
first-order alpha-beta model of a ring all-reduce per dim: 2 (g - 1) / g * bytes /
bandwidth + 2 (g - 1) * latency, over inter-host links when a group leaves one host (or
fast domain). Exit status: 0 done, 2 bad input.
"""


class _Refused(Exception):
    """Bad input found by the command itself (reported with exit status 2)."""


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="meshlayout", description="Device-mesh bookkeeping, offline: see a plan before "
        "launching it.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "explain", help="explain a plan: groups, host crossings, shared communicators, cost",
        description="Explain a plan: for every dim of every view its size, layout, number of "
        "groups, the most hosts a group spans, whether it stays inside a host, and which dims "
        "of other views share its communicators; then communicators per rank and their "
        "estimated memory.", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _plan_arguments(p)
    _machine_arguments(p)
    _output_arguments(p)
    _failure_arguments(p)
    _memory_arguments(p)
    c = sub.add_parser(
        "compare", help="compare plans side by side: host crossings, cost, estimated time",
        description="Compare plans side by side, each explained on its own: per dim name its "
        "size, the most hosts a group spans and whether it stays inside a host, and with "
        "--traffic an estimated communication time per step; per plan its communicators per "
        "rank, their memory and the total time. The better value of each row is marked *.",
        epilog=_COMPARE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("plans", nargs="*", metavar="PLAN", help="Python files defining VIEWS (and "
                   "TOPOLOGY), each a plan named by its file name")
    c.add_argument("--dims", metavar="NAME=SIZE,...", action="append", default=[],
                   help="one more plan: one mesh over the world, e.g. tp=8,dp=64 (repeatable; "
                   "the plan is named by this text)")
    _machine_arguments(c)
    c.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (schema in the README)")
    _memory_arguments(c)
    _traffic_arguments(c)
    return top


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    """What to explain: a plan file, or one mesh from flags."""
    p.add_argument("plan", nargs="?", help="a Python file defining VIEWS (and TOPOLOGY)")
    p.add_argument("--dims", metavar="NAME=SIZE,...",
                   help="one mesh over the world, e.g. pp=4,dp=8,cp=4,tp=8 (replaces VIEWS)")
    p.add_argument("--name", default="mesh", help="the name of the --dims view (default mesh)")


def _machine_arguments(p: argparse.ArgumentParser) -> None:
    """The machine the plans run on, and one rank."""
    p.add_argument("--world", type=_args.positive, help="the number of ranks (default: what "
                   "the views reach, or the product of --dims)")
    p.add_argument("--devices-per-host", type=_args.positive, metavar="N",
                   help=f"devices per host (default: TOPOLOGY, else {DEFAULT_DEVICES_PER_HOST})")
    p.add_argument("--hosts-per-domain", type=_args.positive, metavar="N",
                   help="hosts per fast (NVLink) domain (default 1: a domain is a host)")
    p.add_argument("--rank", type=_args.rank,
                   help="also show this rank's host, coordinates, groups")


def _traffic_arguments(p: argparse.ArgumentParser) -> None:
    """The traffic per dim and the links' parameters (:class:`~mesh.Links`)."""
    d = Links()
    p.add_argument("--traffic", type=_args.bytes_per_dim, action=_args.Merged,
                   metavar="DIM=BYTES,...",
                   help="bytes per step per rank each dim's collective carries, e.g. "
                   "tp=1GiB,dp=256MiB (units B, KB, MB, GB, KiB, MiB, GiB, ...; may be given "
                   "again for other dims): adds an estimated time per step and ranks the "
                   "plans by it")
    for flag, default, unit, zero, what in (
            ("--intra-host-gbps", d.intra_host_gbps, "Gb/s", False, "bandwidth inside a host"),
            ("--inter-host-gbps", d.inter_host_gbps, "Gb/s", False, "bandwidth between hosts"),
            ("--intra-host-latency-us", d.intra_host_latency_us, "µs", True,
             "latency per step inside a host"),
            ("--inter-host-latency-us", d.inter_host_latency_us, "µs", True,
             "latency per step between hosts")):
        p.add_argument(flag, type=_args.number(unit, zero=zero), default=default,
                       metavar="GBPS" if zero is False else "US",
                       help=f"time estimate: {what}, {unit} (default {default:g})")


def _output_arguments(p: argparse.ArgumentParser) -> None:
    """How to answer: the report's format, checks that set the exit status, a picture."""
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (schema in the README)")
    p.add_argument("--expect-intra-host", metavar="DIM,...", type=_args.dim_list,
                   help="exit 1 naming each of these dims (NAME, or VIEW.NAME for one view's) "
                   "whose groups cross hosts")
    p.add_argument("--expect-intra-domain", metavar="DIM,...", type=_args.dim_list,
                   help="the same for fast domains (--hosts-per-domain)")
    p.add_argument("--svg", metavar="FILE", help="also write an SVG picture of one view")
    p.add_argument("--view", metavar="NAME", help="the view --svg draws (default: the first)")
    p.add_argument("--color-by", metavar="DIM", help="colour --svg cells by their group along "
                   "this dim (default: by host)")


def _failure_arguments(p: argparse.ArgumentParser) -> None:
    """Failed ranks: their blast radius, the ways to continue, the groups to rebuild."""
    p.add_argument("--fail", type=_args.indices("rank"), metavar="RANKS",
                   help="failed ranks, e.g. 13 or 8-15,24: reports the groups they break per "
                   "view and dim, the plan re-derived from the survivors under each way to "
                   "continue, and which groups keep their communicators")
    p.add_argument("--fail-host", type=_args.indices("host"), metavar="HOSTS",
                   help="failed hosts (indices on the topology), e.g. 3 or 0-1: every rank on "
                   "them fails (with --fail: both)")
    p.add_argument("--spares", type=_args.indices("rank"), metavar="RANKS",
                   help="spare ranks outside the world, one per failed rank in order (the "
                   "lowest failed rank gets the first): adds the way that substitutes them")


def _memory_arguments(p: argparse.ArgumentParser) -> None:
    """The memory estimate's parameters (:class:`~mesh.CommMemory`)."""
    p.add_argument("--channels", type=_args.positive, default=16,
                   help="memory estimate: channels per communicator (default 16)")
    p.add_argument("--buffsize-mib", type=_args.mib(1 / _MIB), default=4.0,
                   help="memory estimate: buffer per channel and direction, MiB (default 4, "
                   "NCCL_BUFFSIZE)")
    p.add_argument("--fixed-mib", type=_args.mib(0.0), default=0.0,
                   help="memory estimate: fixed cost per communicator, MiB (default 0)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshlayout`` with ``argv`` (default: the process's arguments); the exit status:
    0 done, 1 an ``--expect-intra-*`` check failed, 2 bad input, 130 interrupted, 141 the
    reader left."""
    try:
        args = _parser().parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted("meshlayout")
    files = [args.plan] if args.command == "explain" else args.plans
    try:
        return _explain(args) if args.command == "explain" else _compare(args)
    except (_Refused, MeshError) as e:
        print(f"meshlayout {args.command}: error: {_text(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, or a plan file raising it: no traceback
        return _interrupted(f"meshlayout {args.command}")
    except BrokenPipeError:  # the reader left (`| head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except Exception as e:
        if not any(files):
            raise
        # the plan's own objects (a VIEWS mapping, a MeshView or Topology subclass) raised
        which = f"the plan file {files[0]!r}" if len(files) == 1 else f"a plan file of {files!r}"
        print(f"meshlayout {args.command}: error: {which} defines objects that raised when "
              f"read: {show_error(e)}", file=sys.stderr)
        return 2


def _interrupted(who: str) -> int:
    print(f"{who}: interrupted", file=sys.stderr)
    return _INTERRUPTED


def _text(error: BaseException) -> str:
    """The message of one of our errors (or of a plan's subclass of one, whose ``__str__``
    may raise)."""
    text = show_error(error)
    return text.split(": ", 1)[1] if ": " in text else text


def _explain(args: argparse.Namespace) -> int:
    """Everything that can fail is checked before the report is printed."""
    views, plan_topology, plan = _load(args.plan) if args.plan else ({}, None, None)
    if args.dims is not None:
        world = _dims_view(args.dims, args.world)
        views, plan = {args.name: world}, (_one_view(args.name), world)
    if not views:
        raise _Refused("nothing to explain: give a plan file or --dims (see --help)")
    topology = _topology(args, plan_topology, views)
    found = explain(views, topology, world=args.world if topology is None else None,
                    rank=args.rank, memory=_memory(args))
    failed = _crossings(args, found)
    placed = topology or Topology(found.to_dict()["world"], DEFAULT_DEVICES_PER_HOST)
    dead = _failed(args, placed)
    try:
        outage = None if dead is None else failure(
            views, placed, dead, hosts=args.fail_host or (), derived_from=plan,
            spares=args.spares, rank=args.rank)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as e:  # only the plan's code raises these here: as at load time
        what = f"exited (SystemExit: {_code(e)})" if isinstance(e, SystemExit) else \
            f"raised {show_error(e)}"
        raise _Refused(f"PLAN in the plan file {args.plan!r} {what} when re-derived from the "
                       "survivors, instead of returning VIEWS") from None
    picture = None
    if args.svg is not None:
        picture = _write_svg(args, views, placed, dead or ())
    elif args.view is not None or args.color_by is not None:
        raise _Refused("--view and --color-by choose what --svg draws: give --svg FILE too")
    _print(args, found, outage)
    if picture is not None:
        print(f"meshlayout explain: wrote {args.svg} (view {picture})", file=sys.stderr)
    _tell_expectations(args, failed)
    return 1 if failed else 0


def _one_view(name: str) -> Callable[[MeshView], dict[str, MeshView]]:
    """The plan of ``--dims``: its one view is the world."""
    return lambda world: {name: world}


def _failed(args: argparse.Namespace, topology: Topology) -> list[int] | None:
    """The ranks ``--fail`` and ``--fail-host`` name (None when neither is given)."""
    if args.fail is None and args.fail_host is None:
        if args.spares is not None:
            raise _Refused("--spares replace failed ranks: give --fail RANKS or --fail-host "
                           "HOSTS too")
        return None
    return failed_on(topology, args.fail or (), args.fail_host or ())


def _print(args: argparse.Namespace, found: Explanation, outage: dict[str, Any] | None
           ) -> None:
    """The report on stdout: the explanation, then what the failure does (if any)."""
    if args.format == "json":
        print(json.dumps({**found.to_dict(), **(outage or {})}, indent=2))
    else:
        print(found if outage is None else f"{found}\n\n{failure_report(outage)}")


def _tell_expectations(args: argparse.Namespace, failed: list[tuple[str, str]]) -> None:
    """On stderr, for each ``--expect-intra-*`` given: one line confirming it, or the dims
    that cross."""
    for level in ("host", "domain"):
        wanted = getattr(args, f"expect_intra_{level}")
        lines = [line for lv, line in failed if lv == level]
        if lines:
            print(f"meshlayout explain: expected intra-{level}, but these dims cross "
                  f"{level}s:", *(f"  {c}" for c in lines), sep="\n", file=sys.stderr)
        elif wanted is not None:
            dims = ", ".join(d.strip() for d in wanted.split(","))
            print(f"meshlayout explain: as expected, every group of {dims} stays inside one "
                  f"{level}", file=sys.stderr)


def _compare(args: argparse.Namespace) -> int:
    """``meshlayout compare``: every plan loaded and placed, then compared."""
    plans: list[tuple[str, dict[str, MeshView], Topology | None]] = []
    for path in args.plans:
        views, plan_topology, _ = _load(path)
        plans.append((_plan_name(path, plans), views, _topology(args, plan_topology, views)))
    for spec in args.dims:
        views = {"mesh": _dims_view(spec, args.world)}
        plans.append((_plan_name(spec, plans), views, _topology(args, None, views)))
    if not plans:
        raise _Refused("nothing to compare: give plan files or --dims (see --help)")
    links = Links(args.intra_host_gbps, args.inter_host_gbps, args.intra_host_latency_us,
                  args.inter_host_latency_us)
    found = compare_placed(
        [(n, v, t) for n, v, t in plans],
        world=args.world if any(t is None for _, _, t in plans) else None,
        memory=_memory(args), traffic=args.traffic, links=links, rank=args.rank)
    print(json.dumps(found.to_dict(), indent=2) if args.format == "json" else found)
    return 0


def _plan_name(source: str, taken: list[tuple[str, Any, Any]]) -> str:
    """A plan's column name: its file's name without ``.py`` (or its --dims text), with
    ``#2``, ``#3``, ... added when an earlier plan has that name."""
    base = os.path.splitext(os.path.basename(source))[0] if source.endswith(".py") else source
    names = {name for name, _, _ in taken}
    return next(n for n in [base, *(f"{base}#{i}" for i in range(2, len(taken) + 2))]
                if n not in names)


def _memory(args: argparse.Namespace) -> CommMemory:
    """The memory estimate's parameters from the flags."""
    return CommMemory(args.channels, max(1, round(args.buffsize_mib * _MIB)),
                      round(args.fixed_mib * _MIB))


def _crossings(args: argparse.Namespace, found: Explanation) -> list[tuple[str, str]]:
    """``(level, line)`` for every dim ``--expect-intra-host`` (or ``-domain``) names whose
    groups cross hosts (or fast domains)."""
    failed = []
    for flag, level in (("expect_intra_host", "host"), ("expect_intra_domain", "domain")):
        wanted = getattr(args, flag)
        if wanted is not None:
            dims = [d.strip() for d in wanted.split(",")]
            failed += [(level, line) for line in found.crossing(dims, level=level)]
    return failed


def _write_svg(args: argparse.Namespace, views: dict[str, MeshView], topology: Topology,
               failed: Sequence[int]) -> str:
    """Write the ``--svg`` picture; the name of the view drawn."""
    name, picture = _svg(args, views, topology, failed)
    try:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(picture)
    except OSError as e:
        raise _Refused(f"cannot write --svg {args.svg!r}: {e.strerror or e}") from None
    return name


WorldPlan = tuple[Callable[[MeshView], Mapping[str, MeshView]], MeshView]
"""A plan file's PLAN and WORLD: the plan as a function of its world, and that world."""


def _load(path: str) -> tuple[dict[str, MeshView], Topology | None, WorldPlan | None]:
    """VIEWS, TOPOLOGY and (PLAN, WORLD) of a plan file (VIEWS defaults to PLAN(WORLD))."""
    ns = _run(path, _source(path))
    plan = _world_plan(ns, path)
    views = _views(ns.get("VIEWS"), path, "VIEWS")
    if plan is not None:
        views = _derived(plan, views if "VIEWS" in ns else None, path)
    if not views:
        raise _Refused(f"the plan file {path!r} must define VIEWS, a non-empty dict of view "
                       f"name -> mesh.MeshView; it defines {_what(ns.get('VIEWS'))}")
    topology = ns.get("TOPOLOGY")
    if topology is not None and not isinstance(topology, Topology):
        raise _Refused(f"TOPOLOGY in {path!r} must be a mesh.Topology, got {_what(topology)}")
    return views, topology, plan


def _source(path: str) -> bytes:
    """The plan file's bytes: at most :data:`MOST_PLAN_BYTES` (a larger regular file is
    refused from its size, unread; a device or pipe is read one byte past the limit)."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > MOST_PLAN_BYTES:
                raise _Refused(f"the plan file {path!r} has {info.st_size:,} bytes, more than "
                               f"the {MOST_PLAN_BYTES:,} a plan file may have (a large rank list "
                               "belongs in a data file the plan reads, e.g. "
                               "MeshView.from_dict(json.load(...)))")
            source = f.read(MOST_PLAN_BYTES + 1)
    except OSError as e:
        raise _Refused(f"cannot read the plan file {path!r}: {e.strerror or e}") from None
    if len(source) > MOST_PLAN_BYTES:
        raise _Refused(f"the plan file {path!r} goes on past {MOST_PLAN_BYTES:,} bytes, the "
                       "most a plan file may have (is it a device or a pipe?)")
    return source


def _run(path: str, source: bytes) -> dict[str, Any]:
    """Run a plan file's source as the module ``__meshlayout_plan__`` (as ``runpy`` would):
    its globals.  The plan sees ``sys.argv == [path]``, not meshlayout's flags."""
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except Exception as e:  # a syntax error, null bytes, nesting too deep for the parser
        raise _Refused(f"the plan file {path!r} is not Python: {show_error(e)}") from None
    name = "__meshlayout_plan__"
    module = types.ModuleType(name)
    module.__file__ = path
    saved_argv, saved_module = sys.argv, sys.modules.get(name)
    sys.argv, sys.modules[name] = [path], module
    try:
        exec(code, module.__dict__)
    except SystemExit as e:
        raise _Refused(f"the plan file {path!r} exited (SystemExit: {_code(e)}) instead of "
                       "defining VIEWS") from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the plan's own code failed: say so, briefly
        raise _Refused(f"the plan file {path!r} raised {show_error(e)}") from None
    finally:
        sys.argv = saved_argv
        if saved_module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved_module
    return module.__dict__


def _code(e: SystemExit) -> str:
    """A SystemExit's code, shown (it may be any object)."""
    return show(e.code)


def _views(views: object, path: str, what: str) -> dict[str, MeshView]:
    """A plan's views read from ``VIEWS`` or ``PLAN(WORLD)``: at most
    :data:`~mesh.MAX_PLAN_DIMS` entries and dims (empty: none defined)."""
    if views is None:
        return {}
    if not isinstance(views, Mapping):
        raise _Refused(f"the plan file {path!r} must define VIEWS, a non-empty dict of view "
                       f"name -> mesh.MeshView; {what} is {_what(views)}")
    out: dict[str, MeshView] = {}
    for name, view in items_of(views, f"{what} in {path!r}", "a mapping", limit=MAX_PLAN_DIMS):
        if not isinstance(name, str) or not isinstance(view, MeshView):
            raise _Refused(f"{what} in {path!r} maps {show(name)} to {_what(view)}; every "
                           "entry must be a name (str) -> mesh.MeshView")
        out[as_name(name, f"every view name in {what}")] = view
    check_plan_dims((v.ndim for v in out.values()), f"{what} in {path!r}")
    return out


def _world_plan(ns: dict[str, Any], path: str) -> WorldPlan | None:
    """PLAN and WORLD of a plan file, both or neither."""
    fn, world = ns.get("PLAN"), ns.get("WORLD")
    if fn is None and world is None:
        return None
    if not callable(fn) or not isinstance(world, MeshView):
        raise _Refused(f"the plan file {path!r} must define both WORLD, a mesh.MeshView, and "
                       f"PLAN, a function WORLD -> VIEWS, or neither; WORLD is {_what(world)} "
                       f"and PLAN {_what(fn)}")
    return fn, world


def _derived(plan: WorldPlan, views: dict[str, MeshView] | None, path: str
             ) -> dict[str, MeshView]:
    """PLAN(WORLD), which VIEWS (if the file defines it) must equal."""
    try:
        made = plan[0](plan[1])
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the plan's own code failed (or exited): say so, briefly
        raise _Refused(f"PLAN(WORLD) in {path!r} raised {show_error(e)}") from None
    derived = _views(made, path, "PLAN(WORLD)")
    if views is not None and views != derived:
        raise _Refused(f"VIEWS in {path!r} differs from PLAN(WORLD): define VIEWS = "
                       "PLAN(WORLD), or leave VIEWS out")
    return derived


def _what(x: Any) -> str:
    return "nothing" if x is None else f"a {type(x).__name__}"


def _dims_view(spec: str, world: int | None) -> MeshView:
    """The view of ``--dims pp=4,dp=8``: the world in row-major order."""
    names, sizes = [], []
    for item in spec.split(","):
        name, eq, size = item.strip().partition("=")
        if not eq or not name.strip() or not size.strip().isdigit() or \
                len(size.strip()) > _MOST_DIGITS or int(size) < 1:
            raise _Refused(f"--dims takes NAME=SIZE items separated by commas (e.g. "
                           f"pp=4,dp=8,tp=8), got {item.strip()!r} in {spec!r}")
        names.append(name.strip())
        sizes.append(int(size))
    total = 1
    for s in sizes:
        total *= s
    if world is not None and world != total:
        raise _Refused(f"--dims {spec} multiplies to {total:,} ranks, not --world {world:,}")
    return MeshView.from_shape(tuple(sizes), tuple(names))


def _topology(args: argparse.Namespace, plan: Topology | None,
              views: dict[str, MeshView]) -> Topology | None:
    """The plan's TOPOLOGY with the flags applied (None: explain assumes the hosts)."""
    if args.devices_per_host is None:
        if plan is None:
            if args.hosts_per_domain is not None:
                raise _Refused("--hosts-per-domain needs --devices-per-host (or a plan "
                               "TOPOLOGY)")
            return None
        if args.world is not None and args.world != plan.world_size:
            raise _Refused(f"--world {args.world:,} differs from the plan's TOPOLOGY "
                           f"({plan.world_size:,} ranks); give --devices-per-host too to "
                           "replace its hosts")
        return plan if args.hosts_per_domain is None else plan.with_domains(
            args.hosts_per_domain)
    per_host = args.devices_per_host
    domain = args.hosts_per_domain or (plan.hosts_per_domain if plan else 1)
    world = args.world or (plan.world_size if plan else
                           max(v.ranks.max_rank for v in views.values()) + 1)
    if world % per_host:
        raise _Refused(f"{world:,} ranks are not a whole number of hosts of {per_host:,} "
                       "devices (torchrun's world is nodes × nproc-per-node: set "
                       "--devices-per-host to the processes per node)")
    return Topology(world, per_host, hosts_per_domain=domain)


def _svg(args: argparse.Namespace, views: dict[str, MeshView], topology: Topology,
         failed: Sequence[int]) -> tuple[str, str]:
    """(view name, SVG text) of the view ``--view`` names (default: the first)."""
    name = args.view if args.view is not None else next(iter(views))
    if name not in views:
        raise _Refused(f"--view {name!r} is not a view of the plan; the views are "
                       f"{list(views)!r}")
    view = views[name]
    if view.size() > MAX_SVG_CELLS:
        raise _Refused(f"--svg draws at most {MAX_SVG_CELLS:,} ranks, and view {name!r} has "
                       f"{view.size():,} per instance: choose a smaller view with --view (a "
                       "slice of it defined in the plan)")
    return name, svg(view, host=topology.host, color_by=args.color_by, rank=args.rank,
                     title=f"{name}: {view!r} on {topology!r}", failed=failed)

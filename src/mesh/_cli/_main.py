"""The ``meshlayout`` command: ``meshlayout explain`` shows a plan before it is launched,
``meshlayout compare`` sets plans side by side, ``meshlayout place`` chooses a rank order,
``meshlayout reshard`` plans moving tensors from one plan's meshes to another's,
``meshlayout hang`` reads a hung job's flight-recorder dumps against its plan.

Imports only :mod:`mesh` and :mod:`layout` (never torch): a 2**20-rank plan is explained
in about a second on a laptop.  Exit status: 0 on success, 1 when ``--expect-intra-host``
finds a dim whose groups cross hosts, 2 for bad input (flags, plan file, views), 130 when
interrupted (Ctrl-C, or a plan raising ``KeyboardInterrupt``), 141 when the reader of its
output left.  The flags are ``_parser``'s, plan files are read by ``_planfile``, the
machine flags (``--topology``, ``--hosts``, ``--hosts-file``) by ``_machine``.

Bad input is refused before work proportional to it: a plan file is read up to
:data:`~mesh._cli._planfile.MOST_PLAN_BYTES` (a FIFO, a socket or a device is refused before
it is opened), its ``VIEWS`` up to :data:`~mesh.MAX_PLAN_DIMS` entries, failed ranks are counted
before they are listed, and ``--fail`` derives ways only for worlds it can list
(:data:`~mesh._plan._fail.MOST_WAYS_RANKS`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from layout import show_error

from .._core import MeshError, MeshView, TooManyRanksError, show
from .._decide import Costs, Recovery, recover
from .._draw import MAX_SVG_CELLS, svg
from .._hang import read_flight_records
from .._plan import (
    DEFAULT_DEVICES_PER_HOST,
    MIB,
    CommMemory,
    DerivedFrom,
    Explanation,
    Links,
    Placement,
    compare_placed,
    explain,
    failed_on,
    failure,
    failure_report,
    topology_report,
)
from .._tensor import Sharding
from .._topology import Topology
from . import _args
from ._differ import differences
from ._machine import machine, source
from ._moves import Moves, traffic_svg
from ._parser import parser
from ._planfile import Refused, load, load_tensors

__all__ = ["main"]

_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a tool stopped by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``meshlayout`` with ``argv`` (default: the process's arguments); the exit status:
    0 done, 1 an ``--expect-intra-*`` check failed, 2 bad input, 130 interrupted, 141 the
    reader left."""
    try:
        args = parser().parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted("meshlayout")
    files = [args.plan] if args.command == "explain" else getattr(args, "plans", [])
    if args.command == "reshard":
        files = [args.source, args.dest]
    if args.command == "hang":
        files = [args.plan]
    if args.command == "recover":
        files = [args.plan, args.state]
    run = {"explain": _explain, "compare": _compare, "place": _place,
           "reshard": _reshard, "hang": _hang, "recover": _recover}[args.command]
    try:
        return run(args)
    except (Refused, MeshError) as e:
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
    may raise); a listing refused with a hint for Python callers (``limit=``) says instead
    that no flag raises the bound."""
    if isinstance(error, TooManyRanksError) and error.hint and isinstance(error.fact, str):
        return (f"{error.fact} (a bound of this release: no meshlayout flag or environment "
                "variable raises it)")
    text = show_error(error)
    return text.split(": ", 1)[1] if ": " in text else text


def _explain(args: argparse.Namespace) -> int:
    """Everything that can fail is checked before the report is printed."""
    views, plan_topology, plan = load(args.plan) if args.plan else ({}, None, None)
    if args.dims is not None:
        world = _dims_view(args.dims, args.world)
        views, plan = {args.name: world}, (_one_view(args.name), world)
    if not views:
        raise Refused("nothing to explain: give a plan file or --dims (see --help)")
    given = machine(args)
    topology = _topology(args, plan_topology, views, given)
    found = explain(views, topology, world=args.world if topology is None else None,
                    rank=args.rank, memory=_memory(args))
    diff = None if given is None else _differences(args, views, plan_topology, given)
    failed = _crossings(args, found)
    placed = topology or Topology(found.to_dict()["world"], DEFAULT_DEVICES_PER_HOST)
    dead = _failed(args, placed)
    outage = None if dead is None else _outage(args, views, placed, dead, plan)
    picture = _picture(args, views, placed, dead, domains=given is not None)
    _print(args, found, outage, diff)
    if picture is not None:
        print(f"meshlayout explain: wrote {args.svg} (view {picture})", file=sys.stderr)
    _tell_expectations(args, failed)
    return 1 if failed else 0


def _outage(args: argparse.Namespace, views: dict[str, MeshView], placed: Topology,
            dead: list[int], plan: DerivedFrom | None) -> dict[str, Any]:
    """What ``--fail`` breaks, the plan re-derived from the survivors (its code may exit:
    refused)."""
    try:
        return failure(views, placed, dead, hosts=args.fail_host or (), derived_from=plan,
                       spares=args.spares, rank=args.rank)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as e:  # only the plan's code raises these here: as at load time
        what = f"exited (SystemExit: {show(e.code)})" if isinstance(e, SystemExit) else \
            f"raised {show_error(e)}"
        raise Refused(f"PLAN in the plan file {args.plan!r} {what} when re-derived from the "
                      "survivors, instead of returning VIEWS") from None


def _picture(args: argparse.Namespace, views: dict[str, MeshView], placed: Topology,
             dead: list[int] | None, *, domains: bool) -> str | None:
    """Writes ``--svg`` (the name of the view drawn), or refuses the drawing flags without it."""
    if args.svg is not None:
        return _write_svg(args, views, placed, dead or (), domains=domains)
    if args.view is not None or args.color_by is not None:
        raise Refused("--view and --color-by choose what --svg draws: give --svg FILE too")
    return None


def _one_view(name: str) -> Callable[[MeshView], dict[str, MeshView]]:
    """The plan of ``--dims``: its one view is the world."""
    return lambda world: {name: world}


def _failed(args: argparse.Namespace, topology: Topology) -> list[int] | None:
    """The ranks ``--fail`` and ``--fail-host`` name (None when neither is given)."""
    if args.fail is None and args.fail_host is None:
        if args.spares is not None:
            raise Refused("--spares replace failed ranks: give --fail RANKS or --fail-host "
                          "HOSTS too")
        return None
    return failed_on(topology, args.fail or (), args.fail_host or ())


def _print(args: argparse.Namespace, found: Explanation, outage: dict[str, Any] | None,
           diff: dict[str, Any] | None) -> None:
    """The report on stdout: the explanation, where the machine differs from the declared
    topology (if a machine was given), then what the failure does (if any)."""
    if args.format == "json":
        print(json.dumps({**found.to_dict(), **({"topology": diff} if diff else {}),
                          **(outage or {})}, indent=2))
        return
    parts = [str(found)]
    if diff is not None:
        parts.append(topology_report(diff))
    if outage is not None:
        parts.append(failure_report(outage))
    print("\n\n".join(parts))


def _differences(args: argparse.Namespace, views: dict[str, MeshView],
                 declared: Topology | None, given: Topology) -> dict[str, Any]:
    """Where the machine differs from the plan's TOPOLOGY (or the hosts of 8 assumed)."""
    named = source(args) or "the machine"
    if declared is not None:
        return differences(views, declared, "the plan's TOPOLOGY", given, named)
    reach = max(v.ranks.max_rank for v in views.values()) + 1
    if reach % DEFAULT_DEVICES_PER_HOST:
        return differences(views, None, "none: the plan has no TOPOLOGY", given, named)
    return differences(views, Topology(reach, DEFAULT_DEVICES_PER_HOST),
                       "assumed (the plan has no TOPOLOGY)", given, named)


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
    given = machine(args)
    for path in args.plans:
        views, plan_topology, _ = load(path)
        plans.append((_plan_name(path, plans), views,
                      _topology(args, plan_topology, views, given)))
    for spec in args.dims:
        views = {"mesh": _dims_view(spec, args.world)}
        plans.append((_plan_name(spec, plans), views, _topology(args, None, views, given)))
    if not plans:
        raise Refused("nothing to compare: give plan files or --dims (see --help)")
    found = compare_placed(
        [(n, v, t) for n, v, t in plans],
        world=args.world if any(t is None for _, _, t in plans) else None,
        memory=_memory(args), traffic=args.traffic, links=_links(args), rank=args.rank)
    print(json.dumps(found.to_dict(), indent=2) if args.format == "json" else found)
    return 0


def _links(args: argparse.Namespace) -> Links:
    return Links(args.intra_host_gbps, args.inter_host_gbps, args.intra_host_latency_us,
                 args.inter_host_latency_us)


def _place(args: argparse.Namespace) -> int:
    """``meshlayout place``: the rank order of --dims on the machine whose estimate is least."""
    view = _dims_view(args.dims, args.world)
    given = machine(args)
    if given is None and args.devices_per_host is None:
        raise Refused("meshlayout place needs the machine: --topology FILE, --hosts LIST, "
                      "--hosts-file FILE, or --devices-per-host N (with --hosts-per-domain N)")
    topology = _topology(args, None, {"mesh": view}, given)
    assert topology is not None, "a machine or --devices-per-host was given, so there is one"
    found = Placement.find(view.shape, view.names, topology, traffic=args.traffic,
                           links=_links(args))
    if args.out is not None:
        _write(args.out, "--out", json.dumps(found.view.to_dict()) + "\n")
    if args.svg is not None:
        if found.view.size() > MAX_SVG_CELLS:
            raise Refused(f"--svg draws at most {MAX_SVG_CELLS:,} ranks, and the plan has "
                          f"{found.view.size():,}")
        _write(args.svg, "--svg", svg(found.view, host=topology, domain=topology,
                                      title=f"placed: {found.view!r} on {topology!r}"))
    print(json.dumps(found.to_dict(), indent=2) if args.format == "json" else found)
    return 0


def _reshard(args: argparse.Namespace) -> int:
    """``meshlayout reshard``: every tensor's plan from SRC's sharding to DST's."""
    src, src_topology = load_tensors(args.source)
    dst, dst_topology = load_tensors(args.dest)
    views = {f"{side}.{name}": s.view for side, tensors in (("src", src), ("dst", dst))
             for name, s in tensors.items() if isinstance(s, Sharding)}
    topology = _topology(args, src_topology or dst_topology, views, machine(args))
    moves = Moves.of(src, dst, topology, itemsize=args.itemsize)
    if args.svg is not None:
        _write(args.svg, "--svg", traffic_svg(moves, f"{args.source} -> {args.dest}"))
    print(json.dumps(moves.to_dict(args.rank), indent=2) if args.format == "json"
          else moves.report(args.rank))
    if args.svg is not None:
        print(f"meshlayout reshard: wrote {args.svg}", file=sys.stderr)
    return 0


def _hang(args: argparse.Namespace) -> int:
    """``meshlayout hang``: the dumps against the plan; exit 1 when they show a hang, plus 4
    when the report is partial (some dumps could not be read): 0, 1, 4 or 5."""
    if (args.plan is None) == (args.dims is None):
        raise Refused("give the job's plan: --plan FILE or --dims NAME=SIZE,... (one of them)")
    if args.plan is not None:
        views, plan_topology, _ = load(args.plan)
    else:
        views, plan_topology = {"mesh": _dims_view(args.dims, args.world)}, None
    topology = _topology(args, plan_topology, views, machine(args))
    found = read_flight_records(args.dumps, views, topology=topology)
    print(json.dumps(found.to_dict(), indent=2) if args.format == "json" else found)
    return (0 if found.ok else 1) | (4 if found.partial else 0)


def _recover(args: argparse.Namespace) -> int:
    """``meshlayout recover``: every way on after the failure, priced, cheapest first."""
    views, plan_topology, derived = load(args.plan)
    if derived is None:
        raise Refused(f"recover re-derives the plan from the survivors: the plan file "
                      f"{args.plan!r} must define WORLD and PLAN (it defines VIEWS only)")
    if args.fail is None and args.fail_host is None:
        raise Refused("give the failure: --fail RANKS or --fail-host HOSTS")
    plan, world = derived
    state = _state(args.state or args.plan, required=args.state is not None)
    size = world.ranks.max_rank + 1
    if args.world is None and plan_topology is None:
        args.world = size + (args.spares or 0)
    machine_ = _topology(args, plan_topology, views, machine(args)) or \
        _default_topology(args.world)
    spares = list(range(size, size + (args.spares or 0)))
    costs = None if args.horizon_s is None else Costs(horizon_s=args.horizon_s)
    decided = recover(plan, world, failed_on(machine_, args.fail or (), args.fail_host or ()),
                      state=state or None, spares=spares, topology=machine_, costs=costs,
                      itemsize=args.itemsize, checkpoint=not args.no_checkpoint)
    if args.svg is not None:
        _recover_svg(args, decided, machine_)
    elif args.view is not None or args.color_by is not None or args.way != 1:
        raise Refused("--way, --view and --color-by choose what --svg draws: give --svg FILE "
                      "too")
    print(json.dumps(decided.to_dict(), indent=2) if args.format == "json" else decided.table())
    return 0


def _recover_svg(args: argparse.Namespace, decided: Recovery, topology: Topology) -> None:
    """``--svg``: the views of the way ``--way`` numbers (1: the cheapest) after recovery,
    the failed ranks crossed where the way keeps them (waiting for repair)."""
    if not 1 <= args.way <= len(decided.ways):
        raise Refused(f"--way {args.way}: this failure has {len(decided.ways)} ways on "
                      f"(1 .. {len(decided.ways)}, cheapest first)")
    way = decided.ways[args.way - 1]
    head = (f"way {args.way}, {way.label}: {way.seconds:.1f} s to resume, "
            f"{way.throughput:.0%} of the step rate kept; ")
    name = _write_svg(args, dict(way.views), topology, decided.failed, domains=True,
                      title=head)
    print(f"meshlayout recover: wrote {args.svg} (view {name!r} after {way.label})",
          file=sys.stderr)


def _state(path: str, *, required: bool) -> dict[str, Any]:
    """TENSORS of ``path`` (``--state``), or the plan file's if it has one."""
    try:
        tensors, _ = load_tensors(path)
    except Refused:
        if required:
            raise
        return {}
    return tensors


def _default_topology(world: int) -> Topology:
    if world % DEFAULT_DEVICES_PER_HOST:
        raise Refused(f"{world:,} ranks (the world and its spares) are not a whole number of "
                      f"hosts of {DEFAULT_DEVICES_PER_HOST}: give the machine (--devices-per-"
                      "host, --topology, --hosts) or a plan TOPOLOGY")
    return Topology(world, DEFAULT_DEVICES_PER_HOST)


def _write(path: str, flag: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise Refused(f"cannot write {flag} {path!r}: {e.strerror or e}") from None


def _plan_name(source: str, taken: list[tuple[str, Any, Any]]) -> str:
    """A plan's column name: its file's name without ``.py`` (or its --dims text), with
    ``#2``, ``#3``, ... added when an earlier plan has that name."""
    base = os.path.splitext(os.path.basename(source))[0] if source.endswith(".py") else source
    names = {name for name, _, _ in taken}
    return next(n for n in [base, *(f"{base}#{i}" for i in range(2, len(taken) + 2))]
                if n not in names)


def _memory(args: argparse.Namespace) -> CommMemory:
    """The memory estimate's parameters from the flags."""
    return CommMemory(args.channels, max(1, round(args.buffsize_mib * MIB)),
                      round(args.fixed_mib * MIB))


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
               failed: Sequence[int], *, domains: bool, title: str = "") -> str:
    """Write the ``--svg`` picture (``domains``: coloured by fast domain and host; ``title``
    before the view's name); the name of the view drawn."""
    name, picture = _svg(args, views, topology, failed, domains, title)
    _write(args.svg, "--svg", picture)
    return name

def _dims_view(spec: str, world: int | None) -> MeshView:
    """The view of ``--dims pp=4,dp=8``: the world in row-major order."""
    names, sizes = [], []
    for item in spec.split(","):
        name, eq, text = item.strip().partition("=")
        size = _args.digits(text)
        if not eq or not name.strip() or size is None or size < 1:
            raise Refused(f"--dims takes NAME=SIZE items separated by commas (e.g. "
                          f"pp=4,dp=8,tp=8), got {item.strip()!r} in {spec!r}")
        names.append(name.strip())
        sizes.append(size)
    total = 1
    for s in sizes:
        total *= s
    if world is not None and world != total:
        raise Refused(f"--dims {spec} multiplies to {total:,} ranks, not --world {world:,}")
    return MeshView.from_shape(tuple(sizes), tuple(names))


def _topology(args: argparse.Namespace, plan: Topology | None, views: dict[str, MeshView],
              given: Topology | None) -> Topology | None:
    """The machine the flags name (``given``), else the plan's TOPOLOGY with the flags
    applied (None: explain assumes the hosts)."""
    if given is not None:
        return given
    if args.devices_per_host is None:
        if plan is None:
            if args.hosts_per_domain is not None:
                raise Refused("--hosts-per-domain needs --devices-per-host (or a plan "
                              "TOPOLOGY)")
            return None
        if args.world is not None and args.world != plan.world_size:
            raise Refused(f"--world {args.world:,} differs from the plan's TOPOLOGY "
                          f"({plan.world_size:,} ranks); give --devices-per-host too to "
                          "replace its hosts")
        return plan if args.hosts_per_domain is None else plan.with_domains(
            args.hosts_per_domain)
    per_host = args.devices_per_host
    domain = args.hosts_per_domain or (plan.hosts_per_domain if plan else 1)
    world = args.world or (plan.world_size if plan else
                           max(v.ranks.max_rank for v in views.values()) + 1)
    if world % per_host:
        raise Refused(f"{world:,} ranks are not a whole number of hosts of {per_host:,} "
                      "devices (torchrun's world is nodes × nproc-per-node: set "
                      "--devices-per-host to the processes per node)")
    return Topology(world, per_host, hosts_per_domain=domain)


def _svg(args: argparse.Namespace, views: dict[str, MeshView], topology: Topology,
         failed: Sequence[int], domains: bool, title: str = "") -> tuple[str, str]:
    """(view name, SVG text) of the view ``--view`` names (default: the first)."""
    name = args.view if args.view is not None else next(iter(views))
    if name not in views:
        raise Refused(f"--view {name!r} is not a view of the plan; the views are "
                      f"{list(views)!r}")
    view = views[name]
    if view.size() > MAX_SVG_CELLS:
        raise Refused(f"--svg draws at most {MAX_SVG_CELLS:,} ranks, and view {name!r} has "
                      f"{view.size():,} per instance: choose a smaller view with --view (a "
                      "slice of it defined in the plan)")
    return name, svg(view, host=topology.host, color_by=args.color_by,
                     rank=getattr(args, "rank", None),  # recover has no --rank
                     title=f"{title}{name}: {view!r} on {topology!r}", failed=failed,
                     domain=topology if domains else None)

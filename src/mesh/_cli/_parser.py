"""The ``meshlayout`` command's flags: the parser of ``explain``, ``compare``, ``place``,
``reshard``, ``hang`` and ``recover``.

Each flag's text becomes a value through an argument type of ``_args``; what the flags
mean together (a plan, a machine, a failure) is the command's (``_cli``).
"""

from __future__ import annotations

import argparse
from typing import Any

from layout import __version__

from .._plan import DEFAULT_DEVICES_PER_HOST, MIB, Links
from . import _args

__all__ = ["parser"]

_EPILOG = """\
examples:
  meshlayout explain --world 1024 --devices-per-host 8 --dims pp=4,dp=8,cp=4,tp=8 --rank 5
  meshlayout explain examples/torchtitan_plan.py --format json
  meshlayout explain examples/torchtitan_plan.py --expect-intra-host tp,ep
      (exit 1 if tp or ep crosses hosts: here ep does)
  meshlayout explain examples/torchtitan_plan.py --svg plan.svg --view dense --color-by fsdp
  meshlayout explain --world 32 --dims dp=4,tp=8 --fail 13 --spares 32 --rank 9
  meshlayout explain --dims dp=28,tp=4 --topology examples/machine.json
      (the plan against the machine it gets: a saved topology)
  meshlayout explain --dims dp=128,tp=4 --hosts 'node[001-128]' --devices-per-host 4 \\
      --hosts-per-domain 16

A plan file is Python that meshlayout runs (like a config.py: explain only plans you
trust) and that defines VIEWS, a dict of view name -> mesh.MeshView, and
optionally TOPOLOGY, a mesh.Topology; with WORLD (a mesh.MeshView) and PLAN (a
function WORLD -> VIEWS), --fail also re-derives the plan from the survivors.
--devices-per-host (with --world) replaces TOPOLOGY's hosts, --hosts-per-domain
regroups them, and --dims replaces VIEWS with one view. The machine the job gets:
--topology FILE (a mesh.Topology saved with to_dict, or by backend.discover_topology),
--hosts LIST (a Slurm host list, with --devices-per-host) or --hosts-file FILE (one
host per line in rank order: HOST [slots=N] [domain=NAME]); with one of them, the
report also says where the machine differs from the plan's TOPOLOGY (or the hosts of 8
assumed without one). Exit status: 0 done, 1 an --expect-intra-* check failed, 2 bad
input.
"""

_PLACE_EPILOG = """\
examples:
  meshlayout place --dims pp=4,dp=8,cp=4,tp=8 --devices-per-host 8 --hosts-per-domain 4 \\
      --traffic tp=1GiB,cp=512MiB,dp=256MiB
  meshlayout place --dims dp=28,tp=4 --topology examples/machine.json --traffic tp=1GiB \\
      --out view.json

The estimate is compare's (a first-order alpha-beta model of a ring all-reduce per dim,
over inter-host links when a group leaves one fast domain); the chosen order is the least
over every rank order (dims inside hosts innermost, then inside domains, then across),
ties going to the heaviest dims inside hosts. Exit status: 0 done, 2 bad input.
"""

_COMPARE_EPILOG = """\
examples:
  meshlayout compare --world 512 --dims dp=64,tp=8 --dims tp=8,dp=64 --traffic tp=1GiB,dp=256MiB
  meshlayout compare examples/torchtitan_plan.py --dims pp=4,dp=64,tp=8 --format json

Each plan is explained on its own (its own TOPOLOGY, which the machine flags replace for
every plan), so each plan's communicators and memory are its own. The time estimate is a
first-order alpha-beta model of a ring all-reduce per dim: 2 (g - 1) / g * bytes /
bandwidth + 2 (g - 1) * latency, over inter-host links when a group leaves one host (or
fast domain). Exit status: 0 done, 2 bad input.
"""


def parser() -> argparse.ArgumentParser:
    """The ``meshlayout`` command's parser: its subcommands and their flags."""
    top = argparse.ArgumentParser(
        prog="meshlayout", description="Device-mesh bookkeeping, offline: see a plan before "
        "launching it.")
    top.add_argument("--version", action="version", version=f"meshlayout {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _explain_parser(sub)
    _compare_parser(sub)
    _place_parser(sub)
    _reshard_parser(sub)
    _hang_parser(sub)
    _recover_parser(sub)
    return top


def _explain_parser(sub: Any) -> None:
    """``meshlayout explain``: one plan, against the machine, and what a failure does."""
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


def _compare_parser(sub: Any) -> None:
    """``meshlayout compare``: plans side by side."""
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
    _format_argument(c, "docs/plans.md")
    _memory_arguments(c)
    _traffic_arguments(c, "adds an estimated time per step per dim and per plan, and ranks "
                       "the plans by it")


def _place_parser(sub: Any) -> None:
    """``meshlayout place``: the rank order of one mesh on a machine."""
    pl = sub.add_parser(
        "place", help="choose the rank order: which dims inside hosts, domains, across",
        description="Choose the rank order of a mesh on a machine: the order (a layout over "
        "the world, or an explicit universe where the machine numbers its ranks out of order) "
        "whose estimated communication time per step is least. Prints the chosen layout, each "
        "dim's level, hosts and domains per group and estimated time, the runner-up and the "
        "order as given.", epilog=_PLACE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    pl.add_argument("--dims", metavar="NAME=SIZE,...", required=True,
                    help="the mesh, e.g. pp=4,dp=8,cp=4,tp=8 (its sizes multiply to the world)")
    _machine_arguments(pl, rank=False, world="the number of ranks (default: the product of "
                       "--dims, which a given --world must equal)",
                       per_host="devices per host (needed unless --topology, --hosts or "
                       "--hosts-file gives the machine)")
    _format_argument(pl, "docs/plans.md")
    pl.add_argument("--out", metavar="FILE", help="also write the chosen view as JSON "
                    "(mesh.MeshView.from_dict reads it)")
    pl.add_argument("--svg", metavar="FILE", help="also write an SVG picture of the chosen view, "
                    "coloured by fast domain and host")
    _traffic_arguments(pl, "the rank order chosen is the one whose estimated time per step "
                       "is least (a dim left out carries 0 bytes: only its latency counts)")


_RESHARD_EPILOG = """\
examples:
  meshlayout reshard examples/trainer.py examples/server.py --devices-per-host 8
  meshlayout reshard examples/trainer.py examples/server.py --topology examples/machine.json \\
      --rank 5 --svg moves.svg

Each plan file defines TENSORS, a dict of tensor name -> mesh.Sharding (a tensor's shape and
placements over a view), and optionally TOPOLOGY; both name the same tensors. Every tensor
is planned with mesh.reshard: each element from a holder nearest its receiver, replicas
sharing the sending, what a rank holds already kept. The report gives each tensor's bytes
moved, its bytes per link tier (kept: already on its receiver; host: inside a host; domain:
across hosts inside a fast domain; across: across fast domains), busiest rank and rounds,
then the totals. Exit status: 0 done, 2 bad input.
"""


def _reshard_parser(sub: Any) -> None:
    """``meshlayout reshard``: moving a model's tensors from one plan to another."""
    r = sub.add_parser(
        "reshard", help="plan moving tensors from one plan's meshes to another's",
        description="Plan moving every tensor TENSORS names from the source plan's sharding "
        "to the destination plan's (RL weight sync, elastic resize, checkpoint reshard): bytes "
        "per link tier, the busiest rank, rounds, and one rank's transfers.",
        epilog=_RESHARD_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("source", metavar="SRC", help="a Python file defining TENSORS (and TOPOLOGY)")
    r.add_argument("dest", metavar="DST", help="a Python file defining TENSORS")
    _machine_arguments(r, rank=False, world="the number of ranks (default: the plans' "
                       "TOPOLOGY, else what their views reach)")
    r.add_argument("--rank", type=_args.rank, help="also list this rank's transfers: what it "
                   "sends, receives and keeps of each tensor")
    _format_argument(r, "docs/tensors.md")
    r.add_argument("--itemsize", type=_args.positive, default=2,
                   help="bytes per element (default 2: bf16)")
    r.add_argument("--svg", metavar="FILE", help="also write an SVG picture of which ranks "
                   "send to which (by host when a side has more than 256 ranks)")


_HANG_EPILOG = """\
examples:
  meshlayout hang examples/hang --plan examples/hang/plan.py     (exit 1: a hang found)
  meshlayout hang examples/hang/fr_json_*.json --dims dp=2,tp=2 --hosts 'node[1-2]' \\
      --devices-per-host 2                                       (exit 1: a hang found)
  meshlayout hang examples/hang --plan examples/hang/plan.py --format json   (exit 1)

DUMPS are torch's flight-recorder dumps, one file per rank, the rank at the end of the name
(TORCH_FR_BUFFER_SIZE set; written by torch._C._distributed_c10d._dump_fr_trace() or its
_json twin, as pickle or JSON). They are read with an unpickler that loads builtin values
only, never objects. The report names each stuck group by view, dim and coordinate; the
ranks that never entered its pending call (coordinate and host), or the first call where
members differ; and the ranks merely stuck behind them, in check_spmd's words (desync,
unmatched). A dump that cannot be read is a line of the report, and the others are read.
Exit status: 0 no hang in the records, 1 a hang found, 2 bad input; plus 4 when some dumps
could not be read (the report is partial): 4 or 5.
"""


def _hang_parser(sub: Any) -> None:
    """``meshlayout hang``: a hung job's flight-recorder dumps read in mesh coordinates."""
    h = sub.add_parser(
        "hang", help="read a hung job's flight-recorder dumps in mesh coordinates",
        description="Read torch's flight-recorder dumps of a hung job against its plan: "
        "which group is stuck (view, dim, coordinate), who never entered its pending call "
        "(by coordinate and host), where members first differ, who waits behind them.",
        epilog=_HANG_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("dumps", nargs="+", metavar="DUMP", help="one dump file per rank, or a folder "
                   "of them")
    h.add_argument("--plan", metavar="PLAN", help="the job's plan: a Python file defining "
                   "VIEWS (and TOPOLOGY)")
    h.add_argument("--dims", metavar="NAME=SIZE,...", help="the job's one mesh instead of "
                   "--plan, e.g. dp=64,tp=8")
    _machine_arguments(h, rank=False)
    h.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (its schema: docs/hang.md)")


_RECOVER_EPILOG = """\
examples:
  meshlayout recover examples/recover_plan.py --fail 13 --spares 8
  meshlayout recover examples/recover_plan.py --fail-host 1 --spares 8 --format json
  meshlayout recover examples/recover_plan.py --fail 13 --horizon-s 60
  meshlayout recover examples/recover_plan.py --fail 13 --spares 8 --svg after.svg

PLAN is a Python file defining WORLD (a mesh.MeshView) and PLAN (the job's views as a
function of its world), and may define TENSORS (the model's state: name -> mesh.Sharding over
those views) and TOPOLOGY (the machine, spares included). Every way on is priced with
mesh.recover: a spare in each failed coordinate, dropping the failed slices along a dim,
re-factoring the survivors into a smaller world, evicting the failed ranks' hosts or fast
domains, restarting from the checkpoint, waiting for repair; the table gives each way's
predicted seconds to resume, the throughput it keeps, its cost (seconds plus the lost
throughput over the horizon), bytes per tier (kept: already in place; host, domain, across:
moved over those links; storage: read from the checkpoint) and communicators kept,
reconfigured and created; then each way that is impossible, with why. Exit status: 0 done,
2 bad input.
"""


def _recover_parser(sub: Any) -> None:
    """``meshlayout recover``: every way on after a failure, priced (``mesh.recover``)."""
    r = sub.add_parser(
        "recover", help="price every way on after failed ranks (spares, drop, re-factor, "
        "evict, restart, wait)",
        description="After failed ranks, price every way to go on with the job's plan, state "
        "and machine, cheapest first, and say why the others are impossible.",
        epilog=_RECOVER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("plan", metavar="PLAN", help="a Python file defining WORLD and PLAN (and "
                   "TENSORS, TOPOLOGY)")
    r.add_argument("--fail", type=_args.indices("rank"), metavar="RANKS",
                   help="failed ranks, e.g. 13 or 8-15,24")
    r.add_argument("--fail-host", type=_args.indices("host"), metavar="HOSTS",
                   help="failed hosts (indices on the topology), e.g. 3 or 0-1: every rank on "
                   "them fails (with --fail: both)")
    r.add_argument("--spares", type=_args.positive, metavar="N", default=None,
                   help="N spare ranks, the N ranks after the world (on the topology)")
    r.add_argument("--state", metavar="FILE", help="a Python file whose TENSORS is the state "
                   "(default: the plan file's TENSORS, if it has one)")
    _machine_arguments(r, rank=False, world="the number of ranks on the machine, spares "
                       "included (default: the plan's TOPOLOGY, else the world and the spares)")
    r.add_argument("--itemsize", type=_args.positive, default=2,
                   help="bytes per element of the state (default 2: bf16)")
    r.add_argument("--horizon-s", type=_args.number("s", zero=True), metavar="SECONDS",
                   help="the time over which lost throughput is charged (default: mesh.Costs')")
    r.add_argument("--no-checkpoint", action="store_true",
                   help="no checkpoint holds the state: restart is refused, and so is any "
                   "way whose elements no survivor holds")
    r.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (its fields: docs/failure.md)")
    r.add_argument("--svg", metavar="FILE", help="also write an SVG picture of one view after "
                   "the way --way numbers, coloured by fast domain and host")
    r.add_argument("--way", type=_args.positive, default=1, metavar="N",
                   help="the way --svg draws: its place in the table (default 1, the cheapest)")
    r.add_argument("--view", metavar="NAME", help="the view --svg draws (default: the first)")
    r.add_argument("--color-by", metavar="DIM", help="colour --svg cells by their group along "
                   "DIM instead")


def _format_argument(p: argparse.ArgumentParser, schema: str) -> None:
    """``--format text|json``, the JSON's schema documented on the page ``schema``."""
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help=f"text (default) or json (its schema: {schema})")


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    """What to explain: a plan file, or one mesh from flags."""
    p.add_argument("plan", nargs="?", help="a Python file defining VIEWS (and TOPOLOGY)")
    p.add_argument("--dims", metavar="NAME=SIZE,...",
                   help="one mesh over the world, e.g. pp=4,dp=8,cp=4,tp=8 (replaces VIEWS)")
    p.add_argument("--name", default="mesh", help="the name of the --dims view (default mesh)")


_WORLD = "the number of ranks (default: what the views reach, or the product of --dims)"
_PER_HOST = f"devices per host (default: TOPOLOGY, else {DEFAULT_DEVICES_PER_HOST})"


def _machine_arguments(p: argparse.ArgumentParser, *, rank: bool = True, world: str = _WORLD,
                       per_host: str = _PER_HOST) -> None:
    """The machine the plans run on, and one rank; ``world`` and ``per_host`` say what
    ``--world`` and ``--devices-per-host`` default to in this command."""
    p.add_argument("--world", type=_args.positive, help=world)
    p.add_argument("--devices-per-host", type=_args.positive, metavar="N", help=per_host)
    p.add_argument("--hosts-per-domain", type=_args.positive, metavar="N",
                   help="hosts per fast (NVLink) domain (default 1: a domain is a host)")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--topology", metavar="FILE", help="the machine: a saved mesh.Topology "
                       "(JSON of Topology.to_dict, as backend.discover_topology gives it)")
    given.add_argument("--hosts", metavar="LIST", help="the machine: a Slurm host list in rank "
                       "order, e.g. node[001-128] (with --devices-per-host)")
    given.add_argument("--hosts-file", metavar="FILE", help="the machine: one host per line in "
                       "rank order, HOST [slots=N] [domain=NAME] (slots default: "
                       "--devices-per-host)")
    if rank:
        p.add_argument("--rank", type=_args.rank,
                       help="also show this rank's host, coordinates, groups")


def _traffic_arguments(p: argparse.ArgumentParser, effect: str) -> None:
    """The traffic per dim (``effect``: what the command does with it) and the links'
    parameters (:class:`~mesh.Links`)."""
    d = Links()
    p.add_argument("--traffic", type=_args.bytes_per_dim, action=_args.Merged,
                   metavar="DIM=BYTES,...",
                   help="bytes per step per rank each dim's collective carries, e.g. "
                   "tp=1GiB,dp=256MiB (units B, KB, MB, GB, KiB, MiB, GiB, ...; may be given "
                   f"again for other dims): {effect}")
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
    _format_argument(p, "docs/plans.md")
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
    p.add_argument("--buffsize-mib", type=_args.mib(1 / MIB), default=4.0,
                   help="memory estimate: buffer per channel and direction, MiB (default 4, "
                   "NCCL_BUFFSIZE)")
    p.add_argument("--fixed-mib", type=_args.mib(0.0), default=0.0,
                   help="memory estimate: fixed cost per communicator, MiB (default 0)")

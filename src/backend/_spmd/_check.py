"""``check_spmd``: run a program once per rank on a recording backend, and check offline that
the job it describes can run: every group can be created, every call is matched by the
other members of its group, and the creation, lifecycle and topology contracts of the
backend being modelled hold.

The parts: ``_recording`` (what a run records, the torch-free recorder), ``_torch`` (the
same for torch-level programs on torch's fake process group), ``_run`` (one rank's run,
bounded), ``_creation`` / ``_collectives`` / ``_lifecycle`` (the models, each lowering its
events to steps of the replay), ``_matcher`` (the replay), ``_topology`` (classes 5 and
6), ``_reduce`` (fewer ranks run), ``_report`` (the findings and their words).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal

import attrs

from layout import show
from mesh import Topology
from mesh._core import FindingKind, StuckRank

from .._core import BackendConfigError, need_torch
from ._classes import automatic
from ._collectives import CallLowering, call_findings, wait_words
from ._creation import CreationLowering, creation_findings
from ._events import Call, Create, GroupRef, Kind, TorchCreate, Trace, WaitWork, is_nccl
from ._keys import Key
from ._lifecycle import Lifecycle
from ._matcher import Meet, Outcome, Step, collector_paused, replay
from ._reads import Reads, watched_environment
from ._recording import Recording, SpmdBackend
from ._reduce import Underivable, check_derivable, derive, plan_classes, same, verifiers
from ._report import Finding, SpmdReport
from ._run import refuse_async, run_rank, torch_kept
from ._topology import topology_findings
from ._torch_model import TorchModel

__all__ = ["AUTO_CLASSES_ABOVE", "FIRST_RUN_ALLOWANCE", "MAX_CHECKED_RANKS", "RANK_MEMORY",
           "SpmdReport",
           "check_spmd"]

Program = Callable[[Any], object]
_KINDS = ("auto", "gloo", "nccl")
MAX_CHECKED_RANKS = 1 << 17
"""The largest world ``check_spmd`` runs a program for unless given a larger ``limit``
(it runs the program once per rank: about a millisecond per rank for a torchtitan plan)."""

RANK_MEMORY = 256 << 20
"""How far one rank's program may grow the process by default, in bytes (256 MiB): a check
runs every rank in one process, and a rank's run holds shapes and meta tensors (a
torchtitan-like step with ``torch=True`` grows it by less than 1 MiB after the first)."""

AUTO_CLASSES_ABOVE = 1024
"""Above this many ranks ``check_spmd`` runs one rank per automatic class by default
(``classes=None``); at or below it, every rank (about a second for a torchtitan step)."""

FIRST_RUN_ALLOWANCE = 3
"""How many times ``rank_timeout`` the first rank's run may take: it imports and warms what
the program uses on first call (a busy machine took 20 s for that where a rank takes 10 ms)."""


def check_spmd(world_size: int, program: Program, *, backend: Kind = "auto",
               limit: int = MAX_CHECKED_RANKS, torch: bool = False,
               topology: Topology | None = None, communicators: int | None = None,
               nvls_slots: int = 128, nvls_per_communicator: int = 10,
               classes: Callable[[int], Hashable] | Literal["auto", "every"] | None = None,
               rank_timeout: float = 10.0, rank_memory: int | None = RANK_MEMORY,
               torch_version: str | None = None, torch_config: Mapping[str, bool] | None = None
               ) -> SpmdReport:
    """Run ``program(backend)`` for every rank of ``world_size`` and check offline that the
    job can run: its groups, the calls on them, and the contracts of the backend.

    ``program`` takes the backend of one rank (pass it on as ``init_device_mesh(...,
    backend=backend)``; meshes made without ``backend=`` bind to it too).  Without
    ``torch``, that is a :class:`~backend.SpmdBackend` (no torch), whose methods
    (``all_reduce``, ``send``, ...) describe the calls a step makes; with ``torch=True``,
    a torch fake backend (:class:`~backend.TorchFakeBackend`): the program's own
    ``torch.distributed`` calls, functional collectives, DTensor redistributes and
    FSDP2/TP hooks are recorded, one rank at a time in torch's fake world.

    What is checked, for the backend being modelled (``backend``: ``"gloo"``, ``"nccl"``
    as ``NcclBackend.from_env()`` runs it, or ``"auto"``: NCCL if the program binds a
    ``"cuda"`` mesh): that every group can be created (no member skips it, no orders that
    wait on each other; NCCL splits a family over the world), that every member of a group
    issues the same calls on it (op, shape, dtype, reduce op, root) and every send meets
    its recv, that no rank holds a family's group already where its peers create it, that
    no group is created by a subset where torch makes the creation collective over the
    world, the lifecycle after a failure (abort, not destroy; shrink from inside; no use of
    ended groups; revokes awaited), and with a ``topology``: no NCCL communicator with
    unequal ranks per host, NVLS multicast groups per NVLink domain within
    ``nvls_slots`` (at ``nvls_per_communicator`` each), and at most ``communicators`` per
    rank when that budget is given.

    ``torch_version`` (``"2.15.0"``; None: the installed torch's) and ``torch_config`` (the
    ``torch.distributed.config`` flags, such as ``{"pipeline_per_edge_p2p": True}``; None:
    as the imported torch's config holds them, else torch's defaults) say which torch the
    job runs: whether torch splits the world for a group created by its members follows
    them (and the backend the group asks for), and so do the communicators a pipeline
    schedule makes (:meth:`~backend.SpmdBackend.pipeline_schedule`; module
    ``backend._spmd._torch_model``).

    ``classes`` says which ranks run.  ``"auto"`` (the default above
    :data:`AUTO_CLASSES_ABOVE` ranks; ``None`` picks it there and every rank below): the
    check finds the ranks that behave alike from what each rank's program reads (its rank
    and coordinates answer with recorded symbolic ints, :mod:`._reads`), runs one per
    class, verifies each class on a plain re-run and its group neighbours, and derives the
    others (:mod:`._classes`); a program that branches on nearly every rank, or reads its
    rank as a number, runs every rank.  ``"every"``: every rank runs.  A function of the
    rank states the classes by hand (e.g. ``lambda r: r // 256``, the pipeline stage):
    ranks of one class must run the same program relative to their groups; one rank per
    class runs, and its group neighbours in the class, whose runs are compared with their
    derivation; the check falls back to every rank when they differ or a run cannot be
    derived.  The report's notes say how the check ran.  Each rank's program must finish
    within ``rank_timeout`` seconds and grow the process by at most ``rank_memory`` bytes
    (:data:`RANK_MEMORY` by default, None: unbounded; a ``timeout`` or ``memory`` finding,
    and the check stops there); the first rank to run gets :data:`FIRST_RUN_ALLOWANCE`
    times as long, as it pays the program's first imports and caches (on a busy machine
    that alone took longer than 10 s).  Calls from threads the program starts are recorded
    (``threads`` when they come from several).  What the program rebinds in
    ``torch.distributed`` is put back when the check ends.  Worlds over ``limit`` ranks are
    refused.

    >>> from backend import GroupOptions, init_device_mesh
    >>> def program(backend):
    ...     mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    ...     everyone = mesh._flatten("all", GroupOptions(tag="grads"))  # a group of its own
    ...     if backend.rank == 1:  # rank 1 asks in another order
    ...         everyone.get_group(), mesh.get_group("tp")
    ...     else:
    ...         mesh.get_group("tp"), everyone.get_group()
    >>> report = check_spmd(4, program)
    >>> report.ok
    False
    >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
    check_spmd over 4 ranks: 3 groups asked for; problems found
    - ranks (0, 1) asked for groups in different orders and wait on each other: rank 0 waits
      at the 'tp' group (0, 1); rank 1 waits at the 'all' group (0, 1, 2, 3)
    - stuck behind those: rank 2 at the 'all' group (0, 1, 2, 3) (waiting for 0); rank 3 at
      the 'all' group (0, 1, 2, 3) (waiting for 0)
    Remedies: ...
    """
    _check_arguments(world_size, program, backend, limit, torch, classes, rank_timeout,
                     rank_memory)
    _check_machine(world_size, topology, communicators, nvls_slots, nvls_per_communicator)
    refuse_async(program)
    model = TorchModel.of(torch_version, torch_config)
    runs = _Runs(world_size, program, *_recorders(backend, torch, model), rank_timeout,
                 rank_memory)
    with torch_kept():
        ran = runs.every(classes)
    done = [t for t in runs.traces if t is not None]
    if any(t.stopped is not None for t in done):
        return _stopped(world_size, done, ran, runs.notes)
    with collector_paused():
        return analyse(world_size, done, backend, topology=topology, budget=communicators,
                       slots=nvls_slots, per_comm=nvls_per_communicator, ran=ran,
                       notes=runs.notes, model=model)


class _Runs:
    """The runs of one check: ``traces[r]`` is rank ``r``'s (None until it ran or was
    derived); ``notes`` say how the check ran."""

    def __init__(self, world: int, program: Program, make: Callable[[int, int], Recording],
                 session: Any, timeout: float, memory: int | None) -> None:
        self.world, self.program, self.make, self.session = world, program, make, session
        self.timeout, self.memory = timeout, memory
        self.traces: list[Trace | None] = [None] * world
        self.notes: list[str] = []

    def run(self, rank: int, reads: Reads | None = None) -> Trace:
        """Run rank ``rank``'s program (the first run gets :data:`FIRST_RUN_ALLOWANCE`);
        ``reads``: automatic classes, the program's reads answer with Syms."""
        recorder = self.make(self.world, rank)
        recorder.reads = reads
        first = not any(self.traces)  # it pays the program's first imports and caches
        session = self.session
        limit = self.timeout * (FIRST_RUN_ALLOWANCE if first else 1)
        try:
            with watched_environment(rank, self.world, reads):
                run_rank(self.program, recorder, limit,
                         (lambda: session.around(recorder)) if session is not None else None,
                         self.memory)
        finally:
            if session is not None:
                session.end(recorder)
        self.traces[rank] = recorder.trace
        return recorder.trace

    def every(self, classes: Callable[[int], Hashable] | str | None) -> int:
        """Run (or derive, by ``classes``) every rank, until one goes past a bound; returns
        how many ran."""
        if callable(classes):
            ran = _reduced(self.world, classes, self.traces, self.run, self.notes)
        elif classes == "auto" or (classes is None and self.world > AUTO_CLASSES_ABOVE):
            ran = automatic(self.world, self.run, self.traces, self.notes)
        else:
            ran = 0
        if any(t is not None and t.stopped is not None for t in self.traces):
            return ran  # a class's run went past a bound: no more runs
        groups: dict[tuple[Hashable, str], tuple[GroupRef, Create | None]] = {}
        for rank in range(self.world):
            if self.traces[rank] is None:
                ran += 1
                trace = self.run(rank)
                _share(trace, groups)
                stopped = trace.stopped
                if stopped is not None:
                    self.notes.append(f"the check stopped after rank {rank}'s program "
                                      f"{stopped}: ranks {rank + 1} and up did not run")
                    break
        return ran


def _share(trace: Trace, groups: dict[tuple[Hashable, str], tuple[GroupRef, Create | None]]
           ) -> None:
    """Make ``trace``'s calls and creations use the group (and the creation's members) an
    earlier rank's run recorded for the same group, where it has the same members: a rank's
    run lists each of its groups' members, and every rank kept its own lists (at 65,536
    ranks, hundreds of KiB a rank, past 17 GB in all), where a group's members keep one."""
    events = trace.events
    for i, e in enumerate(events):
        if not isinstance(e, (Call, Create)) or e.group.world:
            continue
        key = (e.group.key, e.group.label)
        found = groups.get(key)
        if found is None:
            groups[key] = (e.group, e if isinstance(e, Create) and not e.split else None)
            continue
        ref, create = found
        if ref is not e.group and ref.members != e.group.members:
            continue  # not the same group after all: kept as it is
        if isinstance(e, Call):
            if ref is not e.group:
                events[i] = attrs.evolve(e, group=ref)
        elif not e.split:
            if create is None:
                create = attrs.evolve(e, group=ref)
                events[i] = create
                groups[key] = (ref, create)
            elif create.barrier == e.barrier and create.members == e.members:
                events[i] = attrs.evolve(e, group=ref, members=create.members)
            elif ref is not e.group:
                events[i] = attrs.evolve(e, group=ref)
        elif ref is not e.group:
            events[i] = attrs.evolve(e, group=ref)


def _recorders(backend: Kind, torch: bool, model: TorchModel | None = None
               ) -> tuple[Callable[[int, int], Recording], Any]:
    """How each rank's recorder is made (``make(world_size, rank)``), and the torch session
    the runs share (None without ``torch=True``), modelling torch ``model`` (None: the
    installed one)."""
    if torch:
        need_torch("check_spmd(..., torch=True)")
        from ._torch import TorchSession

        session = TorchSession(backend, model)
        return session.make, session
    return (lambda w, r: SpmdBackend(w, r, backend, model)), None


def _reduced(world: int, classes: Callable[[int], Hashable], traces: list[Trace | None],
             run: Callable[[int], Trace], notes: list[str]) -> int:
    """Run each class's representative and its group neighbours in the class; derive the
    other ranks, or leave them to run (a note says why).  Returns how many ranks ran."""
    members = plan_classes(world, classes)
    ran = 0
    reason = None
    try:
        for ranks in members.values():
            rep = run(ranks[0])
            ran += 1
            if rep.stopped is not None:
                return ran
            check_derivable(rep)
            for r in verifiers(rep, set(ranks)):
                found = run(r)
                ran += 1
                if found.stopped is not None:
                    return ran
                reason = same(found, derive(rep, r))
                if reason:
                    raise Underivable(reason)
    except Underivable as e:
        reason = str(e)
    if reason is not None:
        notes.append(f"ran every rank: classes= could not stand for them ({reason})")
        return ran
    with collector_paused():
        _derive_the_rest(members, traces)
    notes.append(f"ran {ran} of {world} ranks: one per class ({len(members)} classes) and "
                 "its group neighbours, each compared with its derivation; the others derived")
    return ran


def _derive_the_rest(members: dict[Hashable, list[int]], traces: list[Trace | None]) -> None:
    """Every rank not run, derived from its class's representative."""
    for ranks in members.values():
        first = traces[ranks[0]]
        assert first is not None, "a class's representative ran before the rest are derived"
        shared: dict[Hashable, tuple[str, Sequence[int]]] = {}
        for r in ranks[1:]:
            if traces[r] is None:
                traces[r] = derive(first, r, shared)


def _stopped(world: int, traces: list[Trace], ran: int, notes: list[str]) -> SpmdReport:
    found = [_bound_finding(t) for t in traces if t.stopped is not None]
    errors = tuple((t.rank, t.error_at, t.error) for t in traces if t.error is not None)
    return SpmdReport(world, 0, (), (), (), errors, tuple(found), 0, ran, tuple(notes))


def _bound_finding(t: Trace) -> Finding:
    """The finding of a run that went past its time limit or its memory bound."""
    if t.timed_out is not None:
        return Finding(FindingKind.TIMEOUT, f"rank {t.rank}'s program ran past its "
                       f"{t.timed_out:g} s time limit (a loop, or a wait for something that "
                       "never comes: a check runs each rank alone, so nothing a peer sends "
                       "arrives)",
                       "timeout", (t.rank,))
    grown, bound = t.ran_out or (0, 0)
    return Finding(FindingKind.MEMORY, f"rank {t.rank}'s program grew the process by "
                   f"{grown >> 20} MiB, past its per-rank bound of {bound >> 20} MiB "
                   "(rank_memory=): a check runs every rank in one process, so a rank's program "
                   "should hold shapes or meta tensors, not real data", "memory", (t.rank,))


def analyse(world: int, traces: Sequence[Trace], kind: Kind, *, topology: Topology | None,
            budget: int | None, slots: int, per_comm: int, ran: int | None = None,
            notes: Sequence[str] = (), model: TorchModel | None = None) -> SpmdReport:
    """The report for every rank's recorded run (``traces[r]`` is rank ``r``'s), modelling
    torch ``model`` (None: the installed one)."""
    nccl = is_nccl(kind, {d for t in traces for d in t.device_types})
    model = TorchModel.of() if model is None else model
    meets: dict[Key, Meet] = {}
    findings: list[Finding] = []
    to_all: list[Any] = []
    shared: dict[int, Step] = {}  # a call's step, made once for the members deriving it
    steps = [_lowered(t, world, nccl, meets, to_all, findings, shared, model) for t in traces]
    outcome = replay(steps, meets)
    never, more = creation_findings(outcome, meets, traces, world)
    calls_found = call_findings(outcome, meets, traces, to_all, world)
    if any(f.pattern.startswith("world-wide creation desync") for f in more):
        # torch groups made after ranks' world-wide creations drifted: their calls cannot
        # meet (they are named differently); the drift is the finding
        calls_found = [f for f in calls_found if not f.pattern.startswith("never pg ")]
    findings = more + findings + calls_found
    findings += topology_findings(traces, world, topology, nccl, budget=budget, slots=slots,
                                  per_comm=per_comm)
    waiting, blocked, words = _waits(outcome, meets, traces)
    errors = tuple((t.rank, t.error_at, t.error) for t in traces if t.error is not None)
    creates = {e.barrier for t in traces for e in t.events if isinstance(e, Create)}
    calls = sum(isinstance(e, Call) for t in traces for e in t.events)
    unique = tuple(dict.fromkeys(findings))  # the same finding from every member: once
    return SpmdReport(world, len(creates), tuple(never), waiting, blocked, errors, unique,
                      calls, world if ran is None else ran, tuple(notes), words)


def _lowered(t: Trace, world: int, nccl: bool, meets: dict[Key, Meet], to_all: list[Any],
             findings: list[Finding], shared: dict[int, Step], model: TorchModel
             ) -> list[Step]:
    """Rank ``t.rank``'s run as replay steps (creations, calls, lifecycle events), with the
    findings met on the way (a call on an ended group, a creation that cannot be made, the
    run's own problems) added to ``findings``."""
    life = Lifecycle(t.rank, nccl, meets)
    creating = CreationLowering(world, nccl, meets, model)
    calling = CallLowering(t.rank, meets, to_all, shared)
    mine: list[Step] = []
    for i, e in enumerate(t.events):
        if type(e) is Call and not e.p2p:  # most events: a collective, lowered directly
            if not life.breaks(e, findings):
                mine.append(calling.collective(e, i))
        elif isinstance(e, (Create, TorchCreate)):
            mine.append(creating.step(e, i, findings))
        elif isinstance(e, Call):
            if not life.breaks(e, findings):
                mine.append(calling.step(e, i))
        elif isinstance(e, WaitWork):
            mine.append(calling.step(e, i))
        else:
            step = life.see(e, i, findings)
            if step is not None:
                mine.append(step)
    findings += _run_findings(t)
    return mine


def _run_findings(t: Trace) -> list[Finding]:
    found = []
    for line, what in t.foreign[:1]:
        found.append(Finding(FindingKind.FOREIGN, f"rank {t.rank} {what} ({line})",
                             f"foreign {line}", (t.rank,)))
    if len(t.threads) > 1:
        found.append(Finding(FindingKind.THREADS, f"rank {t.rank}'s calls come from "
                             f"{len(t.threads)} threads: their order is not the same from run "
                             "to run, so members may issue them in different orders",
                             "threads", (t.rank,)))
    if t.left_threads:
        found.append(Finding(FindingKind.THREADS, f"rank {t.rank}'s program returned with "
                             f"{t.left_threads} thread(s) it started still running: "
                             "their calls are not checked (join them)",
                             "left threads", (t.rank,)))
    return found


def _waits(outcome: Outcome, meets: dict[Key, Meet], traces: Sequence[Trace]
           ) -> tuple[Any, Any, tuple[tuple[int, str], ...]]:
    words: dict[int, str] = {}

    def where(r: int) -> tuple[str, tuple[int, ...]]:
        step = outcome.stuck[r]
        said = wait_words(step, traces[r])
        if said is not None:
            words[r] = said
        for key in step.keys:
            info = meets[key].info
            if isinstance(info, Create):
                return info.dim, (() if info.split else tuple(info.members))
            if isinstance(info, Call):
                return info.group.label, tuple(info.group.members)
            if isinstance(info, TorchCreate):
                return info.what, info.parent or tuple(range(len(traces)))
        return "?", ()

    waiting = tuple(tuple((r, *where(r)) for r in sorted(c)) for c in outcome.cycles)
    blocked = tuple(StuckRank(r, where(r), tuple(sorted(outcome.waits[r])))
                    for r in outcome.blocked)
    return waiting, blocked, tuple(sorted(words.items()))


def _check_arguments(world_size: object, program: object, backend: object, limit: object,
                     torch: object, classes: object, rank_timeout: object,
                     rank_memory: object) -> None:
    if type(limit) is not int or limit < 1:
        raise BackendConfigError(f"limit must be a positive int, got {show(limit)}")
    if type(world_size) is not int or world_size < 1:
        raise BackendConfigError(f"world_size must be a positive int, got {show(world_size)}")
    if world_size > limit:
        raise BackendConfigError(
            f"world_size {show(world_size)} is over check_spmd's limit of {limit} ranks (it "
            "runs the program once per rank); pass limit= to check a larger world")
    if not callable(program):
        raise BackendConfigError(f"program must be callable, got {show(program)}")
    if not isinstance(backend, str) or backend not in _KINDS:
        raise BackendConfigError(
            f"backend must be one of {', '.join(map(repr, _KINDS))}, got {show(backend)}")
    if type(torch) is not bool:
        raise BackendConfigError(f"torch must be True or False, got {show(torch)}")
    if not (classes is None or callable(classes) or (isinstance(classes, str) and classes in
                                                      ("auto", "every"))):
        raise BackendConfigError(f"classes must be 'auto', 'every', None or a function of the "
                                 f"rank, got {show(classes)}")
    if not isinstance(rank_timeout, (int, float)) or isinstance(rank_timeout, bool) or \
            not math.isfinite(rank_timeout) or rank_timeout <= 0:
        raise BackendConfigError(f"rank_timeout must be a positive number of seconds, got "
                                 f"{show(rank_timeout)}")
    if rank_memory is not None and (type(rank_memory) is not int or rank_memory < 1):
        raise BackendConfigError(f"rank_memory must be a positive number of bytes or None "
                                 f"(unbounded), got {show(rank_memory)}")


def _check_machine(world_size: int, topology: object, communicators: object, slots: object,
                   per_comm: object) -> None:
    if topology is not None:
        if not isinstance(topology, Topology):
            raise BackendConfigError(f"topology must be a mesh.Topology, got {show(topology)}")
        if topology.world_size != world_size:
            raise BackendConfigError(f"the topology places {topology.world_size} ranks, but the "
                                     f"world has {world_size}")
    for name, value, least in (("communicators", communicators, 1), ("nvls_slots", slots, 1),
                               ("nvls_per_communicator", per_comm, 1)):
        if value is None and name == "communicators":
            continue
        if type(value) is not int or value < least:
            raise BackendConfigError(f"{name} must be an int >= {least}, got {show(value)}")

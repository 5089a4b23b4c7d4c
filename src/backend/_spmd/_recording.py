"""The torch-free recording backend a program runs on under ``check_spmd``: every group
request and every collective, point-to-point and lifecycle call of one rank, recorded in
program order as the values of ``_events``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from layout import show
from mesh import Dim, MeshView

from .._c10d import GroupSpec, Plan
from .._core import (
    BackendConfigError,
    CachedBackend,
    CacheObserver,
    FakeBackend,
    FakeGroup,
    GroupKey,
    GroupOptions,
    Onward,
    Retired,
    as_options,
)
from ._events import (
    Abort,
    AdoptedKey,
    Call,
    Create,
    Destroy,
    Event,
    GroupRef,
    Hit,
    Kind,
    Retire,
    Revoke,
    Shrink,
    ShrunkKey,
    Trace,
    WaitRevoke,
    WaitWork,
    is_nccl,
    program_reads,
    site,
    spec_ref,
    world_ref,
)
from ._reads import Reads, asked_by_program, plain
from ._torch_model import TorchModel, pipeline_creations

__all__ = ["REDUCE_OPS", "Recording", "SpmdBackend", "recorder_factory"]


# ---- the recording part every recorder shares ---------------------------------------------

if TYPE_CHECKING:
    _Backend = CachedBackend[Any]  # what Recording is mixed into, for the type checker
else:
    _Backend = object


class _Ended(CacheObserver):
    """Hears the groups the backend's cache evicts while :attr:`ended` is a list."""

    def __init__(self) -> None:
        self.ended: list[Any] | None = None

    def evicted(self, key: GroupKey, value: Any) -> None:
        if self.ended is not None:
            self.ended.append(value)


class Recording(_Backend):
    """Recording of group requests and lifecycle calls, mixed into a backend class
    (:class:`SpmdBackend` here, a torch fake backend in ``_torch``) before it, so that its
    ``get_group``, ``adopt`` and ``retire`` wrap the backend's.

    ``kind`` is the backend being modelled; ``trace`` collects the events.
    """

    trace: Trace
    kind: Kind
    _refs: dict[int, tuple[Any, GroupRef]]
    _known: set[Any]
    _adopted: set[int]
    _closed: bool
    _quiet: int
    _ended: _Ended

    def _start_recording(self, kind: Kind, model: TorchModel | None) -> None:
        self.kind = kind
        self.model = TorchModel.of() if model is None else model  # the torch modelled
        self._schedules: set[Any] = set()  # the pipeline schedules made (torch caches them)
        self.trace = Trace(self._rank)
        self._refs = {}  # id(group) -> (group, ref): the groups this rank holds
        self._known = set()  # the (family, options) this rank created or was answered
        self._adopted = set()  # id() of the groups adopted (from_group)
        self._closed = False
        self._quiet = 0  # > 0 while our own backend code creates (torch calls not recorded)
        self._ended = _Ended()
        self.observe(self._ended)
        self.reads: Reads | None = None  # automatic classes: the rank-dependent reads

    def note(self, event: Event) -> int:
        """Record ``event`` (in program order); its index in the trace."""
        self.trace.events.append(event)
        return len(self.trace.events) - 1

    def close(self) -> None:
        """The program has ended: calls from threads it left running are no longer recorded."""
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether the program has ended (:meth:`close`)."""
        return self._closed

    @property
    def quiet(self) -> bool:
        """Whether our own backend code is at work (:meth:`quietly`): torch calls it makes
        are not the program's."""
        return self._quiet > 0

    @contextlib.contextmanager
    def quietly(self) -> Iterator[None]:
        """While our own backend code creates or ends groups (nested)."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    @property
    def rank(self) -> int:
        """This process's global rank (a read by the program itself is noted: under
        automatic classes, as a read of :mod:`._reads`; else the check cannot derive
        another rank's run from this one)."""
        if self.reads is not None:  # automatic classes: the program gets a Sym (as an int)
            return cast(int, self.reads.rank()) if asked_by_program(2) else self._rank
        if not self.trace.raw_rank and program_reads(2):
            self.trace.raw_rank = True
        return self._rank

    def splits(self) -> bool:
        """Whether the modelled backend makes a family covering the world with one
        ``split_group``: NCCL with a device-bound default group (``NcclBackend.from_env``),
        while no rank is lost (then new groups are made among the survivors)."""
        return self.nccl() and not self.lost

    def nccl(self) -> bool:
        """Whether the modelled backend is NCCL (:func:`~._events.is_nccl`)."""
        return is_nccl(self.kind, self.trace.device_types)

    def told(self, device_type: str) -> None:
        """Hear that a mesh of this ``device_type`` (``"cpu"``, ``"cuda"``, ...) is bound to
        this backend (``"auto"`` models NCCL once a ``"cuda"`` mesh is)."""
        if not isinstance(device_type, str):
            raise BackendConfigError(f"device_type must be a str such as 'cpu' or 'cuda', got "
                                     f"{show(device_type)}")
        self.trace.device_types.add(device_type)

    def pipeline_schedule(self, stages: Sequence[int], group: Any = None) -> None:
        """A pipeline schedule set up over ``group`` (the PP group; None: the world), its
        logical stage ``i`` on group rank ``stages[i]`` (``(0, 1, 2, 3)`` for PP4,
        ``(0, 1, 2, 3, 0, 1, 2, 3)`` looped): recorded as the communicators the modelled
        torch's pipelining makes for it (:meth:`~._torch_model.TorchModel.pipeline_splits`:
        none unless its config turns on per-direction (2.14) or per-edge (2.15) p2p), each
        one ``split_group`` that every rank of the group enters.  A second schedule over
        the same group and stages makes none (torch caches them)."""
        ref = self.ref(group)
        if ref.index(self._rank) is None:
            raise BackendConfigError(f"rank {self._rank} is not in {ref.describe()}")
        key = (ref.key, tuple(stages) if isinstance(stages, (list, tuple)) else stages)
        made = pipeline_creations(self.model, stages, tuple(ref.members), site(2))
        if key not in self._schedules:
            self._schedules.add(key)
            for event in made:
                self.note(event)

    def note_thread(self) -> None:
        """Note the thread making a call (kept, so that threads are told apart)."""
        self.trace.threads.add(threading.current_thread())

    def _spec(self, view: MeshView, dim: int, options: GroupOptions) -> GroupSpec:
        return GroupSpec.of(view, dim, options, rank=self._rank, world_size=self._world_size,
                            can_split=self.splits())

    def _note_create(self, view: MeshView, dim: int, options: GroupOptions, group: Any) -> None:
        self._known.add((view.family(dim), options))
        spec = self._spec(view, dim, options)
        ref = spec_ref(spec, view.group_offset(self._rank, dim))
        self._refs[id(group)] = (group, ref)
        if spec.plan is Plan.DEFAULT:
            return
        split = spec.plan is Plan.SPLIT
        hidden = not split and self.nccl()  # members only, on a device-bound NCCL world
        self.note(Create(spec.barrier, spec.dim, spec.barrier_members(), split, hidden, ref,
                         site(3), options.backend, bool(getattr(options.pg_options, "lazy_init",
                                                                False))))

    def _note_hit(self, view: MeshView, dim: int, options: GroupOptions, group: Any,
                  source: str) -> None:
        spec = self._spec(view, dim, options)
        if spec.plan is Plan.DEFAULT:
            return
        known = self._refs.get(id(group))
        ref = known[1] if known is not None else spec_ref(spec, view.group_offset(self._rank,
                                                                                  dim))
        self.note(Hit(spec.barrier, spec.dim, spec.barrier_members(), spec.plan is Plan.SPLIT,
                      source, ref, site(3)))

    def get_group(self, view: MeshView, dim: Dim, options: GroupOptions | None = None) -> Any:
        """As the backend answers; a request answered from a group this rank did not create
        for the family (adopted, or kept across a rebind) is recorded as a cache hit."""
        group = super().get_group(view, dim, options)
        k = view.index(dim)
        opts = as_options(options)
        key = (view.family(k), opts)
        if key not in self._known:  # no creation answered it: a group held already
            self._known.add(key)
            source = ("adopted with from_group" if id(group) in self._adopted
                      else "kept across a rebind")
            self._note_hit(view, k, opts, group, source)
        return group

    def adopt(self, view: MeshView, dim: Dim, options: GroupOptions, group: Any) -> Any:
        """As the backend adopts (``from_group``); noted, so that a later request answered
        by it is recorded as a cache hit."""
        self._adopted.add(id(group))
        return super().adopt(view, dim, options, group)

    def retire(self, lost: Iterable[int], *, among: Sequence[int] | None = None,
               onward: Onward | None = None) -> Retired:
        """As the backend retires; recorded with the ranks it newly lost and the groups it
        ended (as the cache's observer hears them evicted)."""
        before = self.lost
        ended: list[Any] = []
        self._ended.ended = ended
        try:
            done = super().retire(lost, among=among, onward=onward)
        finally:
            self._ended.ended = None
        self.note(Retire(self.lost - before, tuple(self.ref(g) for g in ended), site(2)))
        return done

    def ref(self, group: Any) -> GroupRef:
        """The :class:`GroupRef` of a group this rank holds (refined by subclasses)."""
        known = self._refs.get(id(group))
        if known is None:
            raise BackendConfigError(f"{show(group)} is not a group of this rank's backend")
        return known[1]


class SpmdBackend(Recording, FakeBackend):
    """The backend a program runs on under :func:`~backend.check_spmd` (no torch): a
    :class:`~backend.FakeBackend` that records, besides every group request, the calls a
    training step makes on its groups, in ``torch.distributed``'s words.

    A call takes its tensor as a shape (an int or a tuple of ints, with ``dtype=``, default
    ``"float32"``) or as anything with ``.shape`` and ``.dtype`` (a torch tensor, a NumPy
    array); ``group`` is a group of this backend (``mesh.get_group(dim)``), None for the
    world; ``src``/``dst`` are global ranks, as in torch.  Nothing is sent: the calls are
    matched offline, across ranks, by :func:`~backend.check_spmd`.

    >>> from backend import check_spmd, init_device_mesh
    >>> def step(backend):
    ...     mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend=backend)
    ...     backend.all_reduce((1024,), group=mesh.get_group("dp"))
    ...     backend.broadcast((8, 8), src=mesh.mesh[0, 0].item(), group=None)
    >>> check_spmd(4, step).ok
    True
    """

    def __init__(self, world_size: int, rank: int, kind: Kind = "auto",
                 model: TorchModel | None = None) -> None:
        super().__init__(world_size, rank)
        self._start_recording(kind, model)
        self._batch = 0

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> FakeGroup:
        group = super()._create(view, dim, options)
        self._note_create(view, dim, options, group)
        return group

    def ref(self, group: Any) -> GroupRef:
        """The :class:`GroupRef` of ``group`` (None: the world); a group of another backend
        (or not this rank's) raises, after the call is noted as a foreign one."""
        if group is None:
            return world_ref(self._world_size)
        known = self._refs.get(id(group))
        if known is not None:
            return known[1]
        if isinstance(group, FakeGroup) and group.member == self._rank:
            # adopted by from_group or made elsewhere for this rank: named by its members
            members = group.ranks
            ref = GroupRef(AdoptedKey(group.name, members), group.name, members)
            self._refs[id(group)] = (group, ref)
            return ref
        what = (f"{show(group)} (rank {group.member}'s group, not rank {self._rank}'s)"
                if isinstance(group, FakeGroup) else show(group))
        self.trace.foreign.append((site(3), f"calls a collective on {what}"))
        raise BackendConfigError(
            f"rank {self._rank} called a collective on {what}, which is not a group of its "
            "backend (pass mesh.get_group(dim) of a mesh bound to this backend, or None for "
            "the world)")

    # ---- the calls ------------------------------------------------------------------------
    def _record(self, op: str, tensors: Sequence[Any], group: Any, *, dtype: str | None,
                reduce_op: Any = None, root: int | None = None, peer: int | None = None,
                splits: tuple[Sequence[int], Sequence[int]] | None = None,
                post: bool = False) -> int:
        if self._closed:
            raise BackendConfigError(
                f"rank {self._rank}'s program has ended under check_spmd: this call comes from "
                "a thread it left running (join the threads a step starts)")
        ref = self.ref(group)
        me = ref.index(self._rank)
        if me is None:
            self.trace.foreign.append((site(3), f"calls {op} on {ref.describe()}, which it is "
                                                "not in"))
            raise BackendConfigError(f"rank {self._rank} is not in {ref.describe()}")
        shapes, dt = [], None
        for t in tensors:
            shape, d = _tensor(t, dtype)
            shapes.append(shape)
            dt = dt or d
        call = Call(op, ref, tuple(shapes), dt or "float32", site(3),
                    None if reduce_op is None else _reduce_name(reduce_op),
                    None if root is None else self._place(ref, root, "src/dst"),
                    None if peer is None else self._place(ref, peer, "peer", me),
                    None if splits is None else (_sizes(splits[0], ref), _sizes(splits[1], ref)),
                    post, self._batch)
        self.note_thread()
        return self.note(call)

    def _place(self, ref: GroupRef, rank: object, what: str, me: int | None = None) -> int:
        rank = plain(rank)
        if type(rank) is not int:
            raise BackendConfigError(f"{what} must be a global rank (an int), got {show(rank)}")
        place = ref.index(rank)
        if place is None:
            raise BackendConfigError(f"{what} {rank} is not in {ref.describe()}")
        if me is not None and place == me:
            raise BackendConfigError(f"rank {self._rank} cannot send to or receive from itself")
        return place

    def all_reduce(self, tensor: Any, op: Any = "sum", group: Any = None, *,
                   dtype: str | None = None) -> None:
        """``dist.all_reduce``."""
        self._record("all_reduce", [tensor], group, dtype=dtype, reduce_op=op)

    def broadcast(self, tensor: Any, src: int, group: Any = None, *,
                  dtype: str | None = None) -> None:
        """``dist.broadcast`` from global rank ``src``."""
        self._record("broadcast", [tensor], group, dtype=dtype, root=src)

    def reduce(self, tensor: Any, dst: int, op: Any = "sum", group: Any = None, *,
               dtype: str | None = None) -> None:
        """``dist.reduce`` to global rank ``dst``."""
        self._record("reduce", [tensor], group, dtype=dtype, reduce_op=op, root=dst)

    def all_gather(self, tensor: Any, group: Any = None, *, dtype: str | None = None) -> None:
        """``dist.all_gather_into_tensor`` of this rank's ``tensor`` (the input)."""
        self._record("all_gather", [tensor], group, dtype=dtype)

    def reduce_scatter(self, tensor: Any, op: Any = "sum", group: Any = None, *,
                       dtype: str | None = None) -> None:
        """``dist.reduce_scatter_tensor`` into this rank's ``tensor`` (the output)."""
        self._record("reduce_scatter", [tensor], group, dtype=dtype, reduce_op=op)

    def all_to_all(self, tensor: Any, group: Any = None, *, dtype: str | None = None,
                   input_splits: Sequence[int] | None = None,
                   output_splits: Sequence[int] | None = None) -> None:
        """``dist.all_to_all_single`` of ``tensor`` (the input), with split sizes per
        member when uneven (each member's input split for ``j`` must be ``j``'s output
        split for it)."""
        if (input_splits is None) != (output_splits is None):
            raise BackendConfigError("all_to_all takes both input_splits and output_splits, "
                                     "or neither")
        splits = None if input_splits is None or output_splits is None else \
            (input_splits, output_splits)
        self._record("all_to_all", [tensor], group, dtype=dtype, splits=splits)

    def gather(self, tensor: Any, dst: int, group: Any = None, *,
               dtype: str | None = None) -> None:
        """``dist.gather`` of this rank's ``tensor`` to global rank ``dst``."""
        self._record("gather", [tensor], group, dtype=dtype, root=dst)

    def scatter(self, tensor: Any, src: int, group: Any = None, *,
                dtype: str | None = None) -> None:
        """``dist.scatter`` from global rank ``src`` into this rank's ``tensor``."""
        self._record("scatter", [tensor], group, dtype=dtype, root=src)

    def barrier(self, group: Any = None) -> None:
        """``dist.barrier``."""
        self._record("barrier", [], group, dtype="none")

    def send(self, tensor: Any, dst: int, group: Any = None, *, dtype: str | None = None
             ) -> None:
        """``dist.send`` to global rank ``dst`` (waits for the matching ``recv``)."""
        self._record("send", [tensor], group, dtype=dtype, peer=dst)

    def recv(self, tensor: Any, src: int, group: Any = None, *, dtype: str | None = None
             ) -> None:
        """``dist.recv`` from global rank ``src`` (waits for the matching ``send``)."""
        self._record("recv", [tensor], group, dtype=dtype, peer=src)

    def isend(self, tensor: Any, dst: int, group: Any = None, *, dtype: str | None = None
              ) -> Work:
        """``dist.isend``: returns at once; ``.wait()`` on the result waits for the match."""
        return Work(self, self._record("send", [tensor], group, dtype=dtype, peer=dst,
                                       post=True))

    def irecv(self, tensor: Any, src: int, group: Any = None, *, dtype: str | None = None
              ) -> Work:
        """``dist.irecv``: returns at once; ``.wait()`` on the result waits for the match."""
        return Work(self, self._record("recv", [tensor], group, dtype=dtype, peer=src,
                                       post=True))

    def batch_isend_irecv(self, ops: Sequence[tuple[str, Any, int]], group: Any = None, *,
                          dtype: str | None = None) -> Work:
        """``dist.batch_isend_irecv``: ``ops`` are ``("send" | "recv", tensor, peer)``, issued
        together (one NCCL group: they do not wait on each other); ``.wait()`` on the
        result waits for all of them."""
        if type(ops) not in (list, tuple):
            raise BackendConfigError(f"batch_isend_irecv takes a list of (\"send\" | \"recv\", "
                                     f"tensor, peer) triples, got {show(ops)}")
        self._batch += 1
        done = []
        for op in ops:
            if not (type(op) is tuple and len(op) == 3 and op[0] in ("send", "recv")):
                raise BackendConfigError(f"batch_isend_irecv takes (\"send\" | \"recv\", tensor, "
                                         f"peer) triples, got {show(op)}")
            done.append(self._record(op[0], [op[1]], group, dtype=dtype, peer=op[2], post=True))
        return Work(self, *done)

    # ---- lifecycle ----------------------------------------------------------------------
    def destroy_process_group(self, group: Any) -> None:
        """``dist.destroy_process_group(group)`` (on NCCL a finalize: waits for its peers)."""
        self.note(Destroy(self.ref(group), site(2)))

    def abort_process_group(self, group: Any) -> None:
        """``dist._abort_process_group(group)`` (never waits for peers)."""
        self.note(Abort(self.ref(group), site(2)))

    def shrink_group(self, ranks_to_exclude: Sequence[int], group: Any = None
                     ) -> FakeGroup | None:
        """``dist.shrink_group(ranks_to_exclude, group)``: collective among the members not
        excluded; returns the shrunk group (the members left, in group order; None on an
        excluded rank)."""
        if not (type(ranks_to_exclude) in (list, tuple)
                and all(type(r) is int for r in ranks_to_exclude)):
            raise BackendConfigError(f"shrink_group takes the global ranks to exclude as a list "
                                     f"of ints, got {show(ranks_to_exclude)}")
        ref = self.ref(group)
        exclude = tuple(sorted(set(ranks_to_exclude)))
        keep = [r for r in ref.members if r not in exclude]
        made_ref = None
        made = None
        if self._rank in keep and keep:
            view = MeshView.from_ranks(keep, ("shrunk",))
            made = FakeGroup.of(view, "shrunk", self._rank, f"{ref.label}-shrunk")
            made_ref = GroupRef(ShrunkKey(ref.key, exclude), f"{ref.label} shrunk",
                                tuple(keep))
            self._refs[id(made)] = (made, made_ref)
        self.note(Shrink(ref, exclude, made_ref, site(2)))
        return made

    def revoke_process_group(self, group: Any, *, wait: bool = True) -> None:
        """A revoke of ``group`` (``ncclCommRevoke``: stops its work, keeps it as a parent
        for a shrink); ``wait=False`` returns before the revoke ends: wait with
        :meth:`wait_revoked` before the next call on the group."""
        self.note(Revoke(self.ref(group), bool(wait), site(2)))

    def wait_revoked(self, group: Any) -> None:
        """Wait until the revoke of ``group`` has ended."""
        self.note(WaitRevoke(self.ref(group), site(2)))


class Work:
    """What ``isend``/``irecv``/``batch_isend_irecv`` return: ``wait()`` waits for the
    matching calls of the peers."""

    def __init__(self, backend: SpmdBackend, *calls: int) -> None:
        self._backend = backend
        self._calls = calls

    def wait(self) -> bool:
        """Wait for the calls (recorded: the match must come before the program goes on)."""
        self._backend.note(WaitWork(self._calls, site(2)))
        return True

    def is_completed(self) -> bool:
        return False


def _tensor(t: Any, dtype: str | None) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of a call's tensor argument."""
    t = plain(t)
    if type(t) is int:
        t = (t,)
    if type(t) in (tuple, list):
        t = tuple(map(plain, t))
    if type(t) in (tuple, list):  # exactly: a subclass may iterate as it likes
        if not all(type(s) is int and s >= 0 for s in t):
            raise BackendConfigError(f"a tensor is given as a shape of ints >= 0, or as an "
                                     f"object with .shape and .dtype; got {show(t)}")
        return tuple(t), _dtype("float32" if dtype is None else dtype)
    shape = getattr(t, "shape", None)
    found = getattr(t, "dtype", None)
    if shape is None or found is None:
        raise BackendConfigError(f"a tensor is given as a shape (a tuple of ints) or as an "
                                 f"object with .shape and .dtype; got {show(t)}")
    try:
        dims = tuple(int(s) for s in shape)
    except (TypeError, ValueError, OverflowError):
        raise BackendConfigError(f"a tensor's .shape must be ints, got {show(shape)}") from None
    return dims, _dtype(found if dtype is None else dtype)


def _dtype(dtype: Any) -> str:
    """A dtype's name: a str (``"float32"``) or a torch or NumPy dtype (anything with an
    ``itemsize``)."""
    if not isinstance(dtype, str) and not hasattr(dtype, "itemsize"):
        raise BackendConfigError(f"dtype must be a name such as 'float32' or a torch or NumPy "
                                 f"dtype, got {show(dtype)}")
    text = str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")
"""The reduce ops of ``torch.distributed.ReduceOp``, as a program names them (any case)."""


def _reduce_name(op: Any) -> str:
    """The name of a reduce op: one of :data:`REDUCE_OPS` (any case), or an enum value of
    one (``dist.ReduceOp.SUM``)."""
    name = op if isinstance(op, str) else getattr(op, "name", None)
    text = name.lower().rpartition(".")[2] if isinstance(name, str) else None
    if text not in REDUCE_OPS:
        raise BackendConfigError(f"op must be one of {', '.join(REDUCE_OPS)} (or a "
                                 f"dist.ReduceOp), got {show(op)}")
    return text


def _sizes(sizes: Sequence[int], ref: GroupRef) -> tuple[int, ...]:
    out = tuple(map(plain, sizes)) if type(sizes) in (list, tuple) else ()
    if len(out) != len(ref.members) or not all(type(s) is int and s >= 0 for s in out):
        raise BackendConfigError(f"all_to_all splits must be {len(ref.members)} sizes (one per "
                                 f"member of {ref.describe()}), got {show(sizes)}")
    return out


def recorder_factory(kind: Kind) -> Callable[[int, int], SpmdBackend]:
    """Makes the torch-free recorder of each rank."""
    return lambda world, rank: SpmdBackend(world, rank, kind)

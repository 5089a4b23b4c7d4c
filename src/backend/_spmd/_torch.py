"""Recording torch-level programs: ``torch.distributed`` calls, functional collectives,
DTensor redistributes, FSDP2 and TP hooks, run on torch's fake process group (one rank at a
time, its world started and shut down per rank).

What is relied on in torch 2.13 (read in ``site-packages/torch/distributed``):

- Every eager collective reaches the dispatcher as a ``c10d`` op (``c10d::allreduce_``,
  ``c10d::_allgather_base_``, ``c10d::send``, ...) whose process-group argument is a boxed
  ``ProcessGroup`` (``ProcessGroup.unbox``), and every functional collective (what DTensor
  redistributes and TP's hooks issue) as a ``_c10d_functional`` op naming its group
  (``_resolve_process_group``): a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
  sees both, with their tensors (the argument positions are those torch's own
  ``torch/distributed/_tools/fake_collectives.py`` reads).  Ranks given to these ops are
  places in the group (``root_rank``, ``dst``/``src``).  Dispatch modes are per thread:
  calls torch code makes from threads the program starts are not seen.
- ``isend``/``irecv``/``batch_isend_irecv`` reach the same ``c10d::send``/``c10d::recv_``
  as ``send``/``recv``; they are told apart by patching those entry points, as are
  ``new_group``/``split_group`` (group creations), ``destroy_process_group``,
  ``_abort_process_group`` and ``shrink_group`` (lifecycle), ``get_rank`` (a program that
  reads its raw rank) and ``_warn_not_in_group`` (a call on a group the rank is not in,
  which torch skips).  Patches replace the function wherever a loaded module holds it
  (``torch.distributed`` and the modules that imported it by name), for the run only.
- Object collectives (``broadcast_object_list``, ``all_gather_object``, ...) would move
  pickled sizes through the fake group, which moves no data: they are recorded, not
  run (``all_gather_object`` fills the output with this rank's object).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from layout import show
from mesh import MeshView

from .._c10d import TorchFakeBackend
from .._core import BackendConfigError, GroupOptions, family_view
from ._events import (
    Abort,
    Call,
    Destroy,
    GroupRef,
    Kind,
    Shrink,
    TorchCreate,
    TorchGroupKey,
    program_reads,
    site,
    world_ref,
)
from ._reads import Reads
from ._recording import Recording
from ._torch_model import TorchModel
from ._torch_private import (
    ABORT_PROCESS_GROUP,
    WARN_NOT_IN_GROUP,
    TorchDispatchMode,
    allgather_base,
    c10d_functional,
    c10d_functional_autograd,
    dtensor_ops,
    hash_ranks_to_str,
    reduce_scatter_base,
    resolve_process_group,
)

__all__ = ["TorchRecorder", "TorchSession"]

_REDUCE = {int(v.value): v.name.lower()
           for v in dist.ReduceOp.RedOpType.__members__.values()}


class TorchRecorder(Recording, TorchFakeBackend):  # type: ignore[misc]  # torch's classes are Any
    """A torch fake backend that records: rank ``rank`` of ``world_size`` in torch's fake
    world (started here, ended by :meth:`shutdown`)."""

    def __init__(self, world_size: int, rank: int, kind: Kind = "auto",
                 model: TorchModel | None = None) -> None:
        TorchFakeBackend.__init__(self, world_size, rank)
        self._start_recording(kind, model)
        self._by_name: dict[str, GroupRef] = {}
        self._post = 0
        self._blocking = 0
        self._batch = 0

    def _create(self, view: MeshView, dim: int, options: GroupOptions) -> Any:
        with self.quietly():
            group = super()._create(view, dim, options)
        self._note_create(view, dim, options, group)
        ref = self._refs[id(group)][1]
        if not ref.world:
            self._by_name[str(group.group_name)] = ref
        return group

    def retire(self, lost: Any, *, among: Sequence[int] | None = None,
               onward: Any = None) -> Any:
        with self.quietly():
            return super().retire(lost, among=among, onward=onward)

    def shutdown(self) -> None:
        with self.quietly():
            super().shutdown()

    @contextlib.contextmanager
    def blocking(self) -> Iterator[None]:
        """While the program is in a blocking ``send``/``recv`` (its calls wait)."""
        self._blocking += 1
        try:
            yield
        finally:
            self._blocking -= 1

    @contextlib.contextmanager
    def posting(self, batch: bool) -> Iterator[None]:
        """While the program is in ``isend``/``irecv`` (its calls do not wait), or in a new
        ``batch_isend_irecv`` (``batch``)."""
        self._post += 1
        if batch:
            self.new_batch()
        try:
            yield
        finally:
            self._post -= 1

    def new_batch(self) -> None:
        """The calls recorded next belong to a new batch of p2p ops."""
        self._batch += 1

    def ref(self, group: Any) -> GroupRef:
        """The :class:`GroupRef` of a torch process group (None: the world)."""
        if group is None or group is dist.group.WORLD:
            return world_ref(self._world_size)
        known = self._refs.get(id(group))
        if known is not None:
            return known[1]
        name = str(group.group_name)
        found = self._by_name.get(name)
        if found is None:
            members = tuple(dist.get_process_group_ranks(group))
            found = GroupRef(TorchGroupKey(name, members), name, members)
            self._by_name[name] = found
        self._refs[id(group)] = (group, found)
        return found

    def record(self, op: str, group: Any, tensors: Sequence[Any], *, reduce_op: Any = None,
               root: int | None = None, peer: int | None = None,
               splits: tuple[Sequence[int], Sequence[int]] | None = None,
               post: bool = False) -> None:
        """Record one call seen in torch (ranks given as places in the group)."""
        if self.quiet or self.closed:
            return
        ref = self.ref(group)
        if ref.index(self._rank) is None:
            self.trace.foreign.append((site(3), f"calls {op} on {ref.describe()}, which it is "
                                                "not in"))
            return
        shapes = tuple(tuple(int(s) for s in t.shape) for t in tensors)
        dtype = _dtype(tensors[0].dtype) if tensors else "none"
        if splits is not None and not (splits[0] or splits[1]):
            splits = None  # even
        self.note_thread()
        post = post or (self._post > 0 and not self._blocking)
        self.note(Call(
            op, ref, shapes, dtype, site(3),
            None if reduce_op is None else _reduce(reduce_op), root, peer,
            None if splits is None else (tuple(map(int, splits[0])), tuple(map(int, splits[1]))),
            post, self._batch if self._post else 0))


def _dtype(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _reduce(op: Any) -> str:
    if isinstance(op, str):
        return op.lower()
    try:
        return _REDUCE.get(int(op.op()), str(op.op()))
    except Exception:
        return show(op)


class TorchSession:
    """One check's torch side: refuses a process whose torch.distributed is initialized
    already (each rank starts a fake world of its own), and finds once where the patched
    entry points are held."""

    def __init__(self, kind: Kind, model: TorchModel | None = None) -> None:
        if dist.is_initialized():
            raise BackendConfigError(
                "check_spmd(torch=True) starts torch's fake world once per rank, but "
                f"torch.distributed is already initialized in this process "
                f"({dist.get_backend()} rank {dist.get_rank()} of {dist.get_world_size()}): "
                "shut it down first (destroy_process_group, or the backend's shutdown())")
        self.kind = kind
        self.model = model
        self.holders = _holders()

    def make(self, world: int, rank: int) -> TorchRecorder:
        """Rank ``rank``'s recorder (starts its fake world)."""
        return TorchRecorder(world, rank, self.kind, self.model)

    @contextlib.contextmanager
    def around(self, recorder: TorchRecorder) -> Iterator[None]:
        """For one rank's run: the dispatch mode and the patched entry points."""
        ours = _patches(recorder)
        for module, name, _ in self.holders:
            setattr(module, name, ours[name])
        try:
            with _Calls(recorder), _in_threads(recorder):
                yield
        finally:
            for module, name, original in self.holders:
                setattr(module, name, original)

    def end(self, recorder: TorchRecorder) -> None:
        """Shut the rank's fake world down (whatever the program left)."""
        try:
            recorder.shutdown()
        except Exception:  # the program may have destroyed groups itself
            pass
        if dist.is_initialized():
            dist.destroy_process_group()


@contextlib.contextmanager
def _in_threads(recorder: TorchRecorder) -> Iterator[None]:
    """Threads started during the run record too: dispatch modes are per thread, so each
    thread ``threading`` starts enters its own mode before its first call (through
    ``threading.setprofile``, which every such thread installs before ``run``; the hook
    then puts the profile function that was there back).  Threads started before the run
    (a pool the program made earlier) are not seen."""
    before = threading.getprofile()

    def enter(frame: Any, event: str, arg: Any) -> None:
        sys.setprofile(before)
        if not threading.current_thread().name.startswith("check_spmd-"):  # not our watchers
            contextlib.ExitStack().enter_context(_Calls(recorder))  # for the thread's life

    threading.setprofile(enter)
    try:
        yield
    finally:
        threading.setprofile(before)


# ---- the dispatch mode -----------------------------------------------------------------------

_c = torch.ops.c10d
_f = c10d_functional
_fa = c10d_functional_autograd


def _unbox(pg: Any) -> Any:
    return dist.ProcessGroup.unbox(pg)


def _named(name: Any) -> Any:
    return resolve_process_group(name)


def _list(x: Any) -> list[Any]:
    return [t for t in x if isinstance(t, torch.Tensor)]


def _rows(t: Any, parts: int) -> Any:
    """A stand-in with the shape of one of ``parts`` row blocks of ``t`` (reduce_scatter's
    output, from a functional op's input)."""
    shape = list(t.shape)
    if shape:
        shape[0] //= max(parts, 1)
    return torch.empty(shape, dtype=t.dtype, device="meta")


# op -> (name, reader(args) -> (group, tensors, extras))
_OPS: dict[Any, Callable[[tuple[Any, ...]], tuple[str, Any, list[Any], dict[str, Any]]]] = {
    _c.allreduce_.default: lambda a: ("all_reduce", _unbox(a[1]), _list(a[0]),
                                      {"reduce_op": a[2]}),
    _c.allreduce_coalesced_.default: lambda a: ("all_reduce", _unbox(a[1]), _list(a[0]),
                                                {"reduce_op": a[2]}),
    _c.broadcast_.default: lambda a: ("broadcast", _unbox(a[1]), _list(a[0]), {"root": a[2]}),
    _c.reduce_.default: lambda a: ("reduce", _unbox(a[1]), _list(a[0]),
                                   {"reduce_op": a[2], "root": a[3]}),
    _c.allgather_.default: lambda a: ("all_gather", _unbox(a[2]), _list(a[1]), {}),
    allgather_base.default: lambda a: ("all_gather", _unbox(a[2]), [a[1]], {}),
    _c.allgather_coalesced_.default: lambda a: ("all_gather", _unbox(a[2]), _list(a[1]), {}),
    _c.allgather_into_tensor_coalesced_.default: lambda a: ("all_gather", _unbox(a[2]),
                                                            _list(a[1]), {}),
    _c.reduce_scatter_.default: lambda a: ("reduce_scatter", _unbox(a[2]), _list(a[0]),
                                           {"reduce_op": a[3]}),
    reduce_scatter_base.default: lambda a: ("reduce_scatter", _unbox(a[2]), [a[0]],
                                                 {"reduce_op": a[3]}),
    _c.reduce_scatter_tensor_coalesced_.default: lambda a: ("reduce_scatter", _unbox(a[2]),
                                                            _list(a[0]), {"reduce_op": a[3]}),
    _c.gather_.default: lambda a: ("gather", _unbox(a[2]), _list(a[1]), {"root": a[3]}),
    _c.scatter_.default: lambda a: ("scatter", _unbox(a[2]), _list(a[0]), {"root": a[3]}),
    _c.alltoall_.default: lambda a: ("all_to_all", _unbox(a[2]), _list(a[1]), {}),
    _c.alltoall_base_.default: lambda a: ("all_to_all", _unbox(a[2]), [a[1]],
                                          {"splits": (a[4], a[3])}),
    _c.barrier.default: lambda a: ("barrier", _unbox(a[1]), [], {}),
    _c.monitored_barrier_.default: lambda a: ("barrier", _unbox(a[1]), [], {}),
    _c.send.default: lambda a: ("send", _unbox(a[1]), _list(a[0]), {"peer": a[2]}),
    _c.recv_.default: lambda a: ("recv", _unbox(a[1]), _list(a[0]), {"peer": a[2]}),
    _f.all_reduce.default: lambda a: ("all_reduce", _named(a[2]), [a[0]], {"reduce_op": a[1]}),
    _f.all_reduce_.default: lambda a: ("all_reduce", _named(a[2]), [a[0]],
                                       {"reduce_op": a[1]}),
    _f.all_reduce_coalesced.default: lambda a: ("all_reduce", _named(a[2]), _list(a[0]),
                                                {"reduce_op": a[1]}),
    _f.all_reduce_coalesced_.default: lambda a: ("all_reduce", _named(a[2]), _list(a[0]),
                                                 {"reduce_op": a[1]}),
    _f.broadcast.default: lambda a: ("broadcast", _named(a[2]), [a[0]], {"root": a[1]}),
    _f.broadcast_.default: lambda a: ("broadcast", _named(a[2]), [a[0]], {"root": a[1]}),
    _f.all_gather_into_tensor.default: lambda a: ("all_gather", _named(a[2]), [a[0]], {}),
    _f.all_gather_into_tensor_out.default: lambda a: ("all_gather", _named(a[2]), [a[0]], {}),
    _fa.all_gather_into_tensor.default: lambda a: ("all_gather", _named(a[2]), [a[0]], {}),
    _f.all_gather_into_tensor_coalesced.default: lambda a: ("all_gather", _named(a[2]),
                                                            _list(a[0]), {}),
    _f.reduce_scatter_tensor.default: lambda a: ("reduce_scatter", _named(a[3]),
                                                 [_rows(a[0], a[2])], {"reduce_op": a[1]}),
    _f.reduce_scatter_tensor_out.default: lambda a: ("reduce_scatter", _named(a[3]),
                                                     [_rows(a[0], a[2])], {"reduce_op": a[1]}),
    _fa.reduce_scatter_tensor.default: lambda a: ("reduce_scatter", _named(a[3]),
                                                  [_rows(a[0], a[2])], {"reduce_op": a[1]}),
    _f.reduce_scatter_tensor_coalesced.default: lambda a: (
        "reduce_scatter", _named(a[3]), [_rows(t, a[2]) for t in a[0]], {"reduce_op": a[1]}),
    _f.all_to_all_single.default: lambda a: ("all_to_all", _named(a[3]), [a[0]],
                                             {"splits": (a[2], a[1])}),
    _fa.all_to_all_single.default: lambda a: ("all_to_all", _named(a[3]), [a[0]],
                                              {"splits": (a[2], a[1])}),
    _f.isend.default: lambda a: ("send", _named(a[3]), [a[0]], {"peer": a[1], "post": True}),
    _f.irecv.default: lambda a: ("recv", _named(a[3]), [a[0]], {"peer": a[1], "post": True}),
    dtensor_ops.shard_dim_alltoall.default: lambda a: (
        "shard_dim_alltoall", _named(a[3]), [a[0]], {"reduce_op": f"dims {a[1]}->{a[2]}"}),
}


class _Calls(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's mode is untyped
    """Records every collective the dispatcher sees into the recorder."""

    def __init__(self, recorder: TorchRecorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's mode is untyped
        self.recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        read = _OPS.get(func)
        if read is not None:
            op, group, tensors, extra = read(args)
            self.recorder.record(op, group, tensors, **extra)
        elif func is _f.batch_p2p_ops.default:
            group = _named(args[4])
            self.recorder.new_batch()
            for kind, peer, t in zip(args[0], args[1], args[3]):
                self.recorder.record("send" if kind == "isend" else "recv", group, [t],
                                     peer=peer, post=True)
        return func(*args, **(kwargs or {}))


# ---- the patched entry points ------------------------------------------------------------------


class _Patches:
    """torch.distributed's entry points as the recorder patches them: each calls torch's
    own (``originals``) and records what the program did."""

    def __init__(self, recorder: TorchRecorder) -> None:
        self.recorder = recorder
        self.originals = {name: getattr(c10d, name) for name in _PATCHED}

    def blocking(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self.recorder.blocking():
                return self.originals[name](*args, **kwargs)
        return call

    def nonblocking(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self.recorder.posting(batch=name == "batch_isend_irecv"):
                return self.originals[name](*args, **kwargs)
        return call

    def new_group(self, ranks: Any = None, *args: Any, **kwargs: Any) -> Any:
        made = self.originals["new_group"](ranks, *args, **kwargs)
        if not self.recorder.quiet:
            local = bool(kwargs.get("use_local_synchronization", False))
            members = tuple(range(self.recorder.world_size)) if ranks is None else tuple(
                ranks if kwargs.get("sort_ranks", True) is False else sorted(ranks))
            name = str(getattr(made, "group_name", "")) if made not in (None,) and \
                made is not c10d.GroupMember.NON_GROUP_MEMBER else ""
            if local and not name:
                name = str(hash_ranks_to_str(list(members)))
            backend = kwargs.get("backend", args[1] if len(args) > 1 else None)
            options = kwargs.get("pg_options", args[2] if len(args) > 2 else None)
            self.recorder.note(TorchCreate(
                "new_group", members, local, name or "(not a member)", site(2),
                None if backend is None else str(backend),
                bool(getattr(options, "lazy_init", False))))
        return made

    def split_group(self, *args: Any, **kwargs: Any) -> Any:
        made = self.originals["split_group"](*args, **kwargs)
        if not self.recorder.quiet:
            parent = kwargs.get("parent_pg", args[0] if args else None)
            splits = kwargs.get("split_ranks", args[1] if len(args) > 1 else None) or []
            name = str(getattr(made, "group_name", "")) if made is not None else ""
            ranks = tuple(dist.get_process_group_ranks(parent)) if parent is not None else \
                tuple(range(self.recorder.world_size))
            self.recorder.note(TorchCreate(
                "split_group", tuple(tuple(ranks[r] for r in s) for s in splits), False, name,
                site(2), parent=ranks))
        return made

    def lifecycle(self, name: str, event: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.recorder.quiet and not self.recorder.closed:
                event(*args, **kwargs)
            return self.originals[name](*args, **kwargs)
        return call

    def destroyed(self, group: Any = None) -> None:
        if group is not None and group is not c10d.GroupMember.NON_GROUP_MEMBER:
            self.recorder.note(Destroy(self.recorder.ref(group), site(4)))

    def aborted(self, group: Any = None) -> None:
        if group is not None and group is not c10d.GroupMember.NON_GROUP_MEMBER:
            self.recorder.note(Abort(self.recorder.ref(group), site(4)))

    def shrink_group(self, ranks_to_exclude: Any, group: Any = None, *args: Any, **kwargs: Any
                     ) -> Any:
        ref = self.recorder.ref(group)
        exclude = tuple(sorted(int(r) for r in ranks_to_exclude))
        made = None
        try:
            made = self.originals["shrink_group"](ranks_to_exclude, group, *args, **kwargs)
        finally:
            if not self.recorder.quiet:
                mine = None if made is None else self.recorder.ref(made)
                self.recorder.note(Shrink(ref, exclude, mine, site(2)))
        return made

    def get_rank(self, *args: Any, **kwargs: Any) -> Any:
        reads = self.recorder.reads
        if reads is not None:  # automatic classes: the program's read is a Sym
            group = (*args, *kwargs.values(), None)[0]
            if program_reads(2):
                return self.rank_in(reads, group, self.originals["get_rank"](group))
        elif not self.recorder.trace.raw_rank and program_reads(2):
            self.recorder.trace.raw_rank = True
        return self.originals["get_rank"](*args, **kwargs)

    def rank_in(self, reads: Reads, group: Any, value: int) -> Any:
        """``dist.get_rank(group)`` read by the program: its rank, or its place in a group
        made from a view, as a read; in a group torch code made, a read not derived."""
        if group is None or group is dist.group.WORLD:
            return reads.rank()
        ref = self.recorder.ref(group)
        if ref.spec is None:
            self.recorder.trace.raw_rank = True
            return value
        return reads.local(family_view(ref.spec.family), 0, value, depth=4)

    def warn_not_in_group(self, op_name: Any) -> Any:
        if not self.recorder.quiet:
            self.recorder.trace.foreign.append((site(2), f"calls {op_name} on a group it is not in "
                                                    "(torch skips the call)"))
        return self.originals[WARN_NOT_IN_GROUP](op_name)

    def objects(self, name: str) -> Callable[..., Any]:
        signature = inspect.signature(self.originals[name])

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs).arguments
            listed = bound.get("object_list")
            size = len(listed) if isinstance(listed, list) else 1
            if name == "all_gather_object" and isinstance(listed, list):
                listed[:] = [bound.get("obj")] * len(listed)
            self.recorder.record(name, bound.get("group"), [torch.empty((size,), device="meta")])
        return call

    def table(self) -> dict[str, Callable[..., Any]]:
        """Entry point name -> its patched version."""
        out: dict[str, Callable[..., Any]] = {
            "send": self.blocking("send"), "recv": self.blocking("recv"),
            "isend": self.nonblocking("isend"), "irecv": self.nonblocking("irecv"),
            "batch_isend_irecv": self.nonblocking("batch_isend_irecv"),
            "new_group": self.new_group, "split_group": self.split_group,
            "destroy_process_group": self.lifecycle("destroy_process_group", self.destroyed),
            ABORT_PROCESS_GROUP: self.lifecycle(ABORT_PROCESS_GROUP, self.aborted),
            "shrink_group": self.shrink_group, "get_rank": self.get_rank,
            WARN_NOT_IN_GROUP: self.warn_not_in_group,
        }
        for name in _OBJECTS:
            out[name] = self.objects(name)
        return out


def _patches(recorder: TorchRecorder) -> dict[str, Callable[..., Any]]:
    """The patched entry points of ``recorder``'s run (see :class:`_Patches`)."""
    return _Patches(recorder).table()


_OBJECTS = ("all_gather_object", "broadcast_object_list", "gather_object",
            "scatter_object_list", "send_object_list", "recv_object_list")
_PATCHED = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "new_group", "split_group",
            "destroy_process_group", ABORT_PROCESS_GROUP, "shrink_group", "get_rank",
            WARN_NOT_IN_GROUP, *_OBJECTS)


def _holders() -> list[tuple[Any, str, Any]]:
    """(module, name, original) for every loaded module holding one of the patched
    functions under that name."""
    wanted = {name: getattr(c10d, name) for name in _PATCHED}
    found = []
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for name, original in wanted.items():
            if space.get(name) is original:
                found.append((module, name, original))
    return found

"""Torch process groups: creating one from its :class:`~backend._c10d._spec.GroupSpec` (default,
split, new_group), and destroying a backend's groups."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs

from mesh._core import group_desc

from .._core import BackendConfigError, GroupCreationError, MembersMissingError
from ._rendezvous import Rendezvous
from ._rounds import torch_name
from ._spec import GroupSpec, Plan
from ._store import Lease, lease

__all__ = ["create_torch_group", "destroy_groups", "start_fake_world"]

log = logging.getLogger(__name__)


def create_torch_group(spec: GroupSpec, rendezvous: Rendezvous | None = None) -> Any:
    """Create this process's torch group for ``spec`` (collective; see :class:`Plan`).

    The group is named :attr:`GroupSpec.name` (the same on every process, whatever else
    each created).  With a ``rendezvous`` its members first meet at the store barrier, so
    a creation that cannot complete fails on every member within its timeout with
    :class:`~backend.MembersMissingError` explaining why; a creation that fails in torch
    after they met names the members that stopped answering.  The barrier's round
    completes the name (:func:`~backend._c10d._rounds.torch_name`): a retry or a
    re-creation is a fresh group to torch, never one that meets an earlier attempt's keys.
    Creations from several threads run side by side (see :func:`_named`).
    """
    import torch.distributed as dist

    if spec.plan is Plan.DEFAULT and spec.backend not in (None, dist.get_backend()):
        spec = attrs.evolve(spec, plan=Plan.NEW_GROUP)
    if spec.plan is Plan.DEFAULT:
        return dist.group.WORLD
    log.debug("creating %s group %s: %s", spec.plan.value, spec.name, spec.describe())
    try:
        if rendezvous is None:
            return _create(spec, spec.name)
        timeout = spec.timeout or dist.distributed_c10d.default_pg_timeout
        with rendezvous.meet(spec.barrier, spec.barrier_members(), timeout.total_seconds(),
                             dim=spec.dim, desc=spec.describe(), shown=spec.members) as k:
            start = time.monotonic()
            try:
                return _watched(spec, torch_name(spec.name, k), rendezvous, (spec.barrier, k),
                                timeout.total_seconds())
            except MembersMissingError:
                raise
            except Exception as e:  # a failure after a second or more, or one connecting
                # to a member (Gloo is refused by one that died after it published its
                # address, at once or in ~3 s): who stopped?
                waited = time.monotonic() - start > min(timeout.total_seconds() / 2, 1.0) or \
                    _peer_failure(e)
                raise _after_meeting(spec, rendezvous, e, waited, (spec.barrier, k)) from e
    except GroupCreationError:
        raise
    except Exception as e:
        raise GroupCreationError(
            f"creating {spec.describe()} ({spec.plan.value}) on rank {spec.rank} failed: "
            f"{e}") from e


def _create(spec: GroupSpec, name: str) -> Any:
    import torch.distributed as dist

    desc = spec.options.group_desc or group_desc(spec.dim)  # torch's group_desc
    with _named(name):
        if spec.plan is Plan.SPLIT:
            return dist.split_group(split_ranks=spec.groups(), timeout=spec.timeout,
                                    pg_options=spec.options.pg_options, group_desc=desc,
                                    backend=spec.backend)
        return dist.new_group(list(spec.members), timeout=spec.timeout, backend=spec.backend,
                              pg_options=spec.options.pg_options,
                              use_local_synchronization=True, group_desc=desc,
                              sort_ranks=False)


def _watched(spec: GroupSpec, name: str, rendezvous: Rendezvous, passed: tuple[str, int],
             timeout_s: float) -> Any:
    """Torch's creation of ``spec``'s group, watched: past its timeout, while torch still
    has not returned (Gloo retries connecting to a member that died after it published its
    address, for several timeouts), a member that stopped beating fails the creation here,
    named (torch's creation goes on in its thread and its result is dropped); so does one
    found silent while torch's creation failed meanwhile (at its own timeout: a member
    frozen, then woken, would answer a later look).  In the main
    thread a Ctrl-C acts at once too.  Without beats there is nothing to watch."""
    if not rendezvous.beating:
        return _create(spec, name)
    box: list[tuple[bool, Any]] = []
    done = threading.Event()

    def create() -> None:
        try:
            box.append((True, _create(spec, name)))
        except BaseException as e:  # handed to the caller
            box.append((False, e))
        done.set()

    threading.Thread(target=create, daemon=True, name=f"meshlayout-create-{name}").start()
    end = time.monotonic() + timeout_s
    while not done.wait(max(0.0, end - time.monotonic())):
        members = [r for r in spec.barrier_members() if r != spec.rank]
        lost = rendezvous.silent(members, passed=passed) if len(members) <= 4096 else {}
        if lost and not (done.is_set() and box[0][0]):  # still waiting, or failed meanwhile
            raise _named_lost(spec, rendezvous, lost, (
                "torch's creation failed meanwhile" if done.is_set() else
                "torch's creation is still waiting for it") +
                f" after {time.monotonic() - end + timeout_s:.1f} s")
        end = time.monotonic() + rendezvous.explain_s
    ok, value = box[0]
    if ok:
        return value
    raise value


def _peer_failure(error: Exception) -> bool:
    """Whether torch's creation failed reaching a member (a refused or timed-out connection,
    a store wait for a member's address), not in this process."""
    text = f"{type(error).__name__}: {error}".lower()
    return type(error).__name__ in ("DistStoreError", "DistNetworkError") or \
        "connect" in text or "timed out" in text or "timeout" in text


def _after_meeting(spec: GroupSpec, rendezvous: Rendezvous, error: Exception,
                   waited: bool, passed: tuple[str, int]) -> Exception:
    """Torch's creation failed after the members met.  If it failed after waiting, or
    reaching a member (``waited``), name the members that stopped answering (a
    :class:`~backend.MembersMissingError`); a quick failure of its own is this rank's, and
    is reported as torch's."""
    members = [r for r in spec.barrier_members() if r != spec.rank]
    try:
        lost = rendezvous.silent(members, passed=passed) if waited and len(members) <= 4096 \
            else {}
        if lost:
            return _named_lost(spec, rendezvous, lost, f"torch said: {type(error).__name__}: "
                               f"{error}")
    except Exception:  # the store itself is gone (it lives on rank 0)
        pass
    return GroupCreationError(
        f"rank {spec.rank} could not create {spec.describe()} after its members met at "
        f"the barrier: torch's {spec.plan.value} failed: {type(error).__name__}: {error}")


def _named_lost(spec: GroupSpec, rendezvous: Rendezvous, lost: dict[int, float | None],
                said: str) -> MembersMissingError:
    """The failure of a creation whose members met, naming those that stopped answering."""
    try:
        stopped = rendezvous.interrupted(list(lost))
    except Exception:
        stopped = {}
    who = "; ".join(f"rank {r} " + (f"was interrupted ({stopped[r]})" if r in stopped else
                                     "never answered" if s is None else
                                     f"has not answered for {s:.1f} s") for r, s in lost.items())
    return MembersMissingError(
        f"rank {spec.rank} could not create {spec.describe()}: its members met, then {who} "
        "(it likely exited or hung) while torch created the group. Likely cause: a member "
        f"exited or stopped answering. ({said})",
        rank=spec.rank, dim=spec.dim, ranks=spec.members, missing=tuple(lost),
        doing={r: "stopped answering while creating the group" for r in lost})


_NAMES = threading.Lock()  # guards the names in flight and who uses the default store
_PROLOGUE = threading.Lock()  # held from a swap of the default store to torch's naming call
_in_flight: set[str] = set()
_users: list[Any] = [0, None]  # creations in flight, torch's own _process_group_name
_root_busy = [False]  # whether a creation in flight uses the default store's own connection
_this = threading.local()  # this thread's creation: .name, .restore


@contextlib.contextmanager
def _named(name: str) -> Iterator[None]:
    """Have torch name the group this thread creates now ``name`` (not its per-process count),
    and let creations in other threads run at the same time.

    Torch 2.13 has no argument for the name: ``new_group`` and ``split_group`` ask
    ``distributed_c10d._process_group_name``, which is replaced while any creation is in
    flight by one that answers each thread's own name.  A name already taken in this
    process (a second family with the same members and options but other ``pg_options``)
    gets a suffix.  Nothing is locked across torch's creation, which blocks until the
    group's members connect: a lock held there deadlocked processes whose threads created
    different groups in different orders.  For the same reason, a creation that starts
    while another is in flight gives torch a connection of its own (one TCPStore connection
    serves one blocking wait at a time, and Gloo's connection exchange waits in it): torch
    reads the default group's store before it asks for the name, so that entry is swapped
    for a leased clone from just before the call until torch asks for the name.  Every
    creation holds :data:`_PROLOGUE` over that step, so none reads another's entry.
    """
    name, own = _enter(name)
    held = None
    try:
        _this.restore, held = _prologue(swap=not own)
        _this.name = name
        yield
    finally:
        restore, _this.restore, _this.name = getattr(_this, "restore", None), None, None
        if restore is not None:  # torch never asked for the name (it failed before)
            restore()
        if held is not None:  # the group keeps it; the next creation may use it too
            held.release()
        _leave(name, own)


def _enter(name: str) -> tuple[str, bool]:
    """Take ``name`` (suffixed while taken) for a creation now in flight, torch's naming
    call replaced while any is; the name, and whether the creation has the default store's
    own connection."""
    from . import _torch_private as private

    with _NAMES:
        taken = set(private.world.pg_names.values()) | _in_flight
        while name in taken:
            name += "+"
        _in_flight.add(name)
        if _users[0] == 0:
            _users[1] = private.process_group_name()
            private.set_process_group_name(_ours)
        _users[0] += 1
        own = not _root_busy[0]
        _root_busy[0] = True
    return name, own


def _leave(name: str, own: bool) -> None:
    """The creation named ``name`` is over (:func:`_enter` undone)."""
    from . import _torch_private as private

    with _NAMES:
        _in_flight.discard(name)
        _users[0] -= 1
        if _users[0] == 0 and private.process_group_name() is _ours:
            private.set_process_group_name(_users[1])
        if own:
            _root_busy[0] = False


def _ours(ranks: Any, use_hashed_name: bool) -> Any:
    """Torch's ``_process_group_name`` while creations are in flight: this thread's name."""
    name = getattr(_this, "name", None)
    if name is None or not use_hashed_name:
        return _users[1](ranks, use_hashed_name)
    restore, _this.restore = getattr(_this, "restore", None), None
    if restore is not None:  # torch has read the default store: give the entry back
        restore()
    return name


def _prologue(swap: bool) -> tuple[Any, Lease | None]:
    """Hold :data:`_PROLOGUE` until the returned function is called (once: when torch asks
    for the name, after it read the default store), and meanwhile, with ``swap``, make the
    default group's store a connection of this creation's own (a :class:`Lease`, returned
    too: given back when the creation is over)."""
    from . import _torch_private as private

    _PROLOGUE.acquire()
    try:
        default = private.get_default_group()
        pg_map: Any = private.world.pg_map
        entry = pg_map[default]
        held = lease(entry[1], "torch") if swap else None
        if held is not None:
            pg_map[default] = (entry[0], held.conn)
    except BaseException:
        _PROLOGUE.release()
        raise

    def restore() -> None:
        pg_map[default] = entry
        _PROLOGUE.release()

    return restore, held


_FAKE_WORLD: list[Any] = []  # a weak reference to the backend that started torch's fake world


def start_fake_world(world_size: int, rank: int, owner: object = None) -> bool:
    """Start torch's fake default group as ``rank`` of ``world_size`` (the dry run) for
    ``owner``, unless torch.distributed is initialized: then it must be that rank of that
    world.  A fake world whose owner is gone (garbage: a test that forgot ``shutdown()``)
    is destroyed and started again; one whose owner lives is an error naming it and
    ``shutdown()``.  Returns whether this call started a world."""
    import gc
    import weakref

    import torch.distributed as dist

    if dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
        gc.collect()  # an owner no one holds any more is collected now
        holder = _FAKE_WORLD[0]() if _FAKE_WORLD else None
        if _FAKE_WORLD and holder is None and str(dist.get_backend()) == "fake":
            dist.destroy_process_group()  # a leftover of a backend that is gone
        else:
            by = f" by {holder!r}" if holder is not None else ""
            raise BackendConfigError(
                f"torch.distributed is already initialized{by} as rank {dist.get_rank()} of "
                f"{dist.get_world_size()}, not rank {rank} of {world_size}; call that "
                "backend's shutdown() first (in tests: in a fixture's teardown, see the "
                "README's 'Testing without GPUs')")
    if dist.is_initialized():
        return False
    from ._torch_private import fake_store

    dist.init_process_group("fake", store=fake_store(), rank=rank, world_size=world_size)
    _FAKE_WORLD[:] = [weakref.ref(owner) if owner is not None else (lambda: None)]
    return True


def destroy_groups(groups: list[Any], default: bool, *, abort: bool = False) -> None:
    """Destroy ``groups`` (newest first), then the default group if ``default``: the one
    shutdown loop every backend uses.  With ``abort``, torch's ``_abort_process_group``
    instead (NCCL: without waiting for peers)."""
    if not groups and not default:
        return  # nothing of torch's to destroy: don't import it
    import torch.distributed as dist

    from ._torch_private import abort_process_group

    if not dist.is_initialized():
        return
    end = abort_process_group if abort else dist.destroy_process_group
    for g in reversed(groups):
        if g is not None and g is not dist.group.WORLD:
            end(g)
    if default:
        end()

"""Every private name of torch that ``backend._c10d`` uses, each imported here once (ARCHITECTURE
§8): what it is for, and the torch releases it was checked on.  No other module of the
sub-package reads a torch private name (``tests/test_torch_private.py`` checks both: that torch
still has each name of :data:`REGISTRY`, and that nothing else reads one).

Imports torch: the sub-package's modules import this one where they import torch, on first
use of a backend (``import backend`` loads no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed.distributed_c10d as c10d

__all__ = ["OPTIONAL", "RECONFIGURES", "REGISTRY", "abort_process_group", "fake_store",
           "get_default_group", "get_default_store", "process_group_name", "reconfigure",
           "reconfigure_handle", "set_group_ranks", "set_process_group_name",
           "supports_reconfigure", "world"]

# The default group's store (the creation barrier's and discovery's store);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
get_default_store: Callable[[], Any] = c10d._get_default_store

# The default process group (its store entry is swapped during a creation; a split's device);
# checked on torch 2.13.0, 2.14.1 and 2.15.0.
get_default_group: Callable[[], Any] = c10d._get_default_group

# torch's process-group registry (``pg_names``: the names taken; ``pg_map``: each group's
# backend and store); torch mutates it and never rebinds it; checked on torch 2.13.0, 2.14.1 and
# 2.15.0.
world: Any = c10d._world


def process_group_name() -> Callable[[Any, bool], Any]:
    """The function torch asks for a new group's name (``_process_group_name``, read at call
    time: creations replace it while in flight); checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    found: Callable[[Any, bool], Any] = c10d._process_group_name
    return found


def set_process_group_name(name: Callable[[Any, bool], Any]) -> None:
    """Replace torch's ``_process_group_name`` on its module (see :func:`process_group_name`):
    ``new_group`` and ``split_group`` look it up there at each call."""
    c10d._process_group_name = name  # type: ignore[assignment]  # torch types it as a function; we override it on purpose


def abort_process_group(group: Any = None) -> None:
    """End ``group`` (None: the default group) without waiting for peers
    (``_abort_process_group``; NCCL), looked up on torch's module at each call, as a patch of
    it (``check_spmd``'s recorder) must see the call; checked on torch 2.13.0, 2.14.1 and
    2.15.0."""
    c10d._abort_process_group(group)


def fake_store() -> Any:
    """A new ``FakeStore``, the store of torch's fake world (``torch.testing._internal``,
    imported on first use only); checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()


RECONFIGURES = all(hasattr(c10d, n.rsplit(".", 1)[1]) for n in (
    "torch.distributed.distributed_c10d._reconfigure",
    "torch.distributed.distributed_c10d._get_reconfigure_handle",
    "torch.distributed.distributed_c10d._supports_reconfigure"))
"""Whether this torch can re-form a group in place from its members' ordered handles
(``_reconfigure``, ``_get_reconfigure_handle``, ``_supports_reconfigure``; feature-detected):
torch 2.14 on; checked on torch 2.13.0, 2.14.1 and 2.15.0 (2.13.0 lacks them).  On Gloo a
group made by ``new_group`` supports it without ``enable_reconfigure`` (measured on 2.14.1
and 2.15.0)."""


def supports_reconfigure(group: Any) -> bool:
    """Whether ``group`` can be reconfigured (``_supports_reconfigure``; False on a torch
    without it); checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    if not RECONFIGURES:
        return False
    return bool(_since_214("_supports_reconfigure")(group))


def reconfigure_handle(group: Any) -> str:
    """This process's handle for re-forming ``group`` (``_get_reconfigure_handle``: on Gloo
    the store's address, which peers pass back in group order); checked on torch 2.13.0,
    2.14.1 and 2.15.0 (2.13.0 lacks it: call only where :data:`RECONFIGURES`)."""
    return str(_since_214("_get_reconfigure_handle")(group))


def reconfigure(uuid: int, handles: list[str], group: Any, timeout: Any) -> Any:
    """Re-form ``group`` among the holders of ``handles`` (``_reconfigure``; the position in
    the list is the new group rank; ``uuid`` the same on every member, fresh per
    re-forming); returns torch's work.  Torch does not update its own record of the group's
    global ranks: see :func:`set_group_ranks`.  Checked on torch 2.13.0, 2.14.1 and 2.15.0
    (2.13.0 lacks it: call only where :data:`RECONFIGURES`)."""
    return _since_214("_reconfigure")(uuid, handles, group, timeout=timeout)


def _since_214(name: str) -> Any:
    """c10d's function ``name``, one of the reconfigure names torch 2.14 added (read by
    name: torch 2.13's stubs lack them, so an attribute read would not type-check there)."""
    return getattr(c10d, name)


def set_group_ranks(group: Any, ranks: tuple[int, ...]) -> None:
    """Record ``group``'s global ranks, in group order, in torch's registry
    (``_world.pg_group_ranks``, what ``get_process_group_ranks`` and ``get_group_rank``
    read), after a reconfigure changed them; checked on torch 2.13.0, 2.14.1 and 2.15.0."""
    world.pg_group_ranks[group] = {r: i for i, r in enumerate(ranks)}


OPTIONAL: tuple[tuple[str, str], ...] = (
    ("torch.distributed.distributed_c10d._reconfigure",
     "torch 2.14 on: re-forming a broken Gloo group in place among its survivors"),
    ("torch.distributed.distributed_c10d._get_reconfigure_handle",
     "torch 2.14 on: each survivor's handle for the re-forming, passed in group order"),
    ("torch.distributed.distributed_c10d._supports_reconfigure",
     "torch 2.14 on: whether a group can be re-formed in place"),
)
"""(torch's name, what for), the names only some supported torches have (here: 2.14 on); in
:data:`REGISTRY` where this torch has them (:data:`RECONFIGURES`)."""

REGISTRY: tuple[tuple[str, str], ...] = (
    ("torch.distributed.distributed_c10d._get_default_store",
     "the default group's store: the creation barrier's and discovery's store"),
    ("torch.distributed.distributed_c10d._get_default_group",
     "the default process group: its store entry swapped during a creation, a split's device"),
    ("torch.distributed.distributed_c10d._world",
     "torch's registry of process groups: names taken (pg_names), stores (pg_map)"),
    ("torch.distributed.distributed_c10d._process_group_name",
     "the function torch asks for a new group's name: replaced while creations are in flight"),
    ("torch.distributed.distributed_c10d._abort_process_group",
     "ending a group without waiting for peers (NCCL's shutdown and rebind)"),
    ("torch.testing._internal.distributed.fake_pg.FakeStore",
     "the store of torch's fake world (TorchFakeBackend, the dry run)"),
    *(OPTIONAL if RECONFIGURES else ()),
)
"""(torch's name, what ``backend._c10d`` uses it for), one entry per name above."""

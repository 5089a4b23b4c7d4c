"""The process's backend per device type: what ``init_device_mesh``, ``DeviceMesh(...)``
and unpickling bind to when no backend is named.

A backend becomes the process's backend for a device type when a mesh of that
device type is bound to it (``backend.bind``, ``init_device_mesh(backend=...)``), and
a c10d backend (Gloo, NCCL, ``TorchFakeBackend``) also when it is made, for its
device types.
When none is, or the one there no longer matches torch.distributed's state (its
default group was destroyed), :func:`process_backend` asks the factory: one over
the already initialized default group, or, if there is none, one initialized from
torchrun's environment (Gloo for ``"cpu"``, NCCL for ``"cuda"``).

**Plugs.** The core needs three things only the wings above it make: the factory of
default backends and a torch fake backend (the c10d wing), and the facade class of meshes
whose groups are torch process groups (the facade wing).  It names them here as slots
(:data:`SLOTS`), and the package's ``__init__`` is the one place that plugs the wings
into them, importing each wing on first use: so the core imports no wing and loads no
torch.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._errors import BackendConfigError

__all__ = ["SLOTS", "Factory", "overriding", "plug", "plugged", "process_backend", "register"]

Factory = Callable[[str, Any], Any]
"""``factory(device_type, current)``: ``current`` if it still matches, else a new backend."""

_lock = threading.RLock()  # re-entrant: a backend the factory makes registers itself
_bound: dict[str, Any] = {}
_plugs: dict[str, Callable[..., Any]] = {}

SLOTS = {
    "process_default": "factory(device_type, current): current if it still matches torch's "
                       "world, else a new default backend (a Factory)",
    "torch_fake": "torch_fake(world_size, rank): a backend of torch's fake c10d groups that "
                  "binds no device type (a FakeBackend's torch_group)",
    "torch_facade": "torch_facade(): the facade class of meshes over torch process groups",
}
"""The slots the package plugs wings into, and what each plug does."""
_override: list[tuple[Any, Callable[[str], None]]] = []  # (backend, told of each device type)


def plug(slot: str, fn: Callable[..., Any]) -> None:
    """Plug ``fn`` into ``slot`` (one of :data:`SLOTS`)."""
    if slot not in SLOTS:
        raise BackendConfigError(f"no plug slot {slot!r}; the slots are {sorted(SLOTS)}")
    _plugs[slot] = fn


def plugged(slot: str) -> Callable[..., Any]:
    """What is plugged into ``slot``."""
    try:
        return _plugs[slot]
    except KeyError:
        raise BackendConfigError(f"nothing is plugged into {slot!r} ({SLOTS.get(slot, '?')}); "
                                 "import the backend package, which plugs its wings in") from None


def register(device_type: str, backend: Any) -> None:
    """Make ``backend`` this process's backend for ``device_type``."""
    with _lock:
        _bound[device_type] = backend
        if _override and backend is _override[-1][0]:
            _override[-1][1](device_type)


def process_backend(device_type: str) -> Any:
    """This process's backend for ``device_type`` (made by the factory if need be)."""
    with _lock:
        if _override:
            _override[-1][1](device_type)
            return _override[-1][0]
        current = _bound.get(device_type)
        factory = _plugs.get("process_default")
        if factory is None:
            if current is None:
                raise BackendConfigError(f"no backend is bound for device type {device_type!r}; "
                                         "bind a mesh to one first (backend.bind(view, a_backend))")
            return current
        backend = factory(device_type, current)
        _bound[device_type] = backend
        return backend


@contextlib.contextmanager
def overriding(backend: Any, told: Callable[[str], None]) -> Iterator[None]:
    """For the duration, ``backend`` is the process's backend for every device type, and
    ``told(device_type)`` hears of each device type a mesh is bound with (``check_spmd``'s
    recorder); the bindings before are restored after."""
    with _lock:
        saved = dict(_bound)
        _override.append((backend, told))
    try:
        yield
    finally:
        with _lock:
            _override.pop()
            _bound.clear()
            _bound.update(saved)

"""The process's backend per device type: what ``init_device_mesh``, ``DeviceMesh(...)``
and unpickling bind to when no backend is named.

A backend becomes the process's backend for a device type when a mesh of that
device type is bound to it (``backend.bind``, ``init_device_mesh(backend=...)``), and
a c10d backend (Gloo, NCCL, ``TorchFakeBackend``) also when it is made, for its
device types.
When none is, or the one there no longer matches torch.distributed's state (its
default group was destroyed), :func:`process_backend` asks the factory: one over
the already initialized default group, or, if there is none, one initialized from
torchrun's environment (Gloo for ``"cpu"``, NCCL for ``"cuda"``).  The factory needs
torch, so the package plugs it in (``backend/__init__.py``); this module imports none.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._errors import BackendConfigError

__all__ = ["Factory", "overriding", "process_backend", "register", "set_factory"]

Factory = Callable[[str, Any], Any]
"""``factory(device_type, current)``: ``current`` if it still matches, else a new backend."""

_lock = threading.RLock()  # re-entrant: a backend the factory makes registers itself
_bound: dict[str, Any] = {}
_factory: list[Factory] = []
_override: list[tuple[Any, Callable[[str], None]]] = []  # (backend, told of each device type)


def set_factory(factory: Factory) -> None:
    """Plug in the function that makes (or keeps) the default backend of a device type."""
    _factory[:] = [factory]


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
        if not _factory:
            if current is None:
                raise BackendConfigError(f"no backend is bound for device type {device_type!r}; "
                                         "bind a mesh to one first (backend.bind(view))")
            return current
        backend = _factory[0](device_type, current)
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

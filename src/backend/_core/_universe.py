"""What a backend remembers about one universe (rank map) beyond its groups."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Universe"]


class Universe:
    """A backend's state for one universe, shared by every mesh over it.

    - ``torch_meshes``: torch ``DeviceMesh`` conversions by (view, options, device
      type), and ``torch_roots`` the one torch root per device type they share, so
      separately converted slices compose (``_concatenate``, FSDP2 + TP).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.torch_meshes: dict[Any, Any] = {}
        self.torch_roots: dict[str, Any] = {}

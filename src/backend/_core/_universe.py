"""What a backend remembers about one universe (rank map) beyond its groups."""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["Universe"]


class Universe:
    """A backend's state for one universe, shared by every mesh over it.

    - ``torch_meshes``: torch ``DeviceMesh`` conversions (``to_torch``) by (view,
      options, device type, names, root), so separately converted slices of one root
      share its conversion as their root (``_concatenate``, FSDP2 + TP);
      ``torch_ranks``: the universe's ranks as torch reads them (a tensor and a
      sequence), made once by the facade.
    - ``memos``: the objects (meshes) that memoized groups of this backend; each has a
      ``forget_groups()`` that a loss of ranks calls (:meth:`forget`), so no memo hands
      out a group the loss ended.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.torch_meshes: dict[Any, Any] = {}
        self.torch_ranks: Any = None
        self.memos: weakref.WeakSet[Any] = weakref.WeakSet()

    def forget(self) -> None:
        """Drop every memo of groups and every torch conversion (after ranks were lost)."""
        with self.lock:
            memos = list(self.memos)
            self.memos.clear()
            self.torch_meshes.clear()
        for memo in memos:
            memo.forget_groups()

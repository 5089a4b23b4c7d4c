"""Reading boxes of tensors from a torch DCP checkpoint: only the saved chunks a box
overlaps, on this rank alone.

Torch's own load reads what each rank's target shard needs, and a replicated target reads
the whole tensor on every rank; a recovery needs only what no survivor holds (the elements
of a failed rank that nobody else has), box by box.  :func:`read_boxes` asks DCP for
exactly those boxes: DCP's resharding read (``create_read_items_for_chunk_list``) turns
each box into reads of the saved chunks it overlaps, and the storage reader fetches those
chunks (a saved chunk is its unit: a chunk overlapping a box is read whole, none other is
read).  No collective: each rank reads its own boxes (``no_dist``).
"""

from __future__ import annotations

import dataclasses
import operator
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from layout import show

from .._core import BackendConfigError

__all__ = ["read_boxes"]

Box = tuple[tuple[int, int], ...]


def _key(name: str, i: int) -> str:
    return f"{name}\x00box{i}"


def _index(value: object) -> int:
    """An int (or an integer-like, never a float or a bool), or TypeError."""
    if isinstance(value, bool):
        raise TypeError(value)
    return operator.index(value)  # type: ignore[arg-type]  # TypeError for a non-integer


def _checked_boxes(wanted: object) -> list[tuple[str, list[Box]]]:
    if not isinstance(wanted, Mapping):
        raise BackendConfigError(f"read_boxes takes a mapping tensor name -> boxes, got "
                                 f"{show(wanted)}")
    out = []
    for name, boxes in wanted.items():
        if not isinstance(name, str) or not isinstance(boxes, Sequence) or \
                isinstance(boxes, str):
            raise BackendConfigError(f"read_boxes: {show(name)} -> {show(boxes)} is not a "
                                     "tensor name and a sequence of boxes")
        checked: list[Box] = []
        for box in boxes:
            try:
                if not isinstance(box, Sequence):
                    raise TypeError
                pairs = tuple((_index(a), _index(b)) for a, b in box)
            except (TypeError, ValueError):
                raise BackendConfigError(f"read_boxes: a box of {name!r} is (start, stop) per "
                                         f"dim, in ints, got {show(box)}") from None
            if any(not 0 <= a < b for a, b in pairs):
                raise BackendConfigError(f"read_boxes: the box {pairs} of {name!r} is empty "
                                         "or negative")
            checked.append(pairs)
        out.append((name, checked))
    return out


def read_boxes(checkpoint: str | os.PathLike[str], wanted: Mapping[str, Sequence[Box]]
               ) -> dict[str, list[Any]]:
    """The boxes ``wanted`` (tensor name -> boxes, each ``(start, stop)`` per dim of the
    global tensor) read from the DCP checkpoint in the folder ``checkpoint``, as tensors of
    the saved dtype, in the order asked; only the saved chunks that a box overlaps are read.

    A name the checkpoint lacks, a box outside its tensor or of another rank: a typed error
    naming it, before anything is read.
    """
    import torch
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorStorageMetadata,
    )
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list
    from torch.distributed.checkpoint.state_dict_loader import load

    asked = _checked_boxes(wanted)
    reader = FileSystemReader(os.fspath(checkpoint))
    saved = reader.read_metadata().state_dict_metadata
    targets: dict[str, Any] = {}
    items: list[Any] = []
    for name, boxes in asked:
        md = saved.get(name)
        if not isinstance(md, TensorStorageMetadata):
            raise BackendConfigError(f"read_boxes: the checkpoint {os.fspath(checkpoint)!r} "
                                     f"holds no tensor {name!r}")
        shape = tuple(md.size)
        for i, box in enumerate(boxes):
            if len(box) != len(shape) or any(b > n for (_, b), n in zip(box, shape)):
                raise BackendConfigError(f"read_boxes: the box {box} does not fit {name!r}, "
                                         f"of shape {shape}")
            key = _key(name, i)
            sizes = [b - a for a, b in box]
            targets[key] = torch.empty(sizes, dtype=md.properties.dtype)
            chunk = ChunkStorageMetadata(offsets=torch.Size([a for a, _ in box]),
                                         sizes=torch.Size(sizes))
            items += [dataclasses.replace(item, dest_index=MetadataIndex(key))
                for item in create_read_items_for_chunk_list(name, md, [chunk])]
    if items:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            load(targets, storage_reader=reader, planner=_planner(items), no_dist=True)
    return {name: [targets[_key(name, i)] for i in range(len(boxes))] for name, boxes in asked}


def _planner(items: list[Any]) -> Any:
    """DCP's default load planner over the reads :func:`read_boxes` made: its local plan is
    exactly those reads (the targets are the boxes, by their keys), nothing else."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import LoadPlan

    class BoxPlanner(DefaultLoadPlanner):
        def create_local_plan(self) -> Any:
            return LoadPlan(items)

    return BoxPlanner(allow_partial_load=True)

"""Reading boxes of a DCP checkpoint (``backend._tensor._checkpoint.read_boxes``, what a
recovery reads for the elements no survivor holds): the values are the saved ones, only the
saved chunks a box overlaps are read, and bad requests are typed errors naming the value.

The checkpoint is saved by 8 Gloo processes (``reshard_gloo_worker.py save``: ``w`` 12 x 10
in 8 row chunks, ``m`` 8 x 8 in 2 x 4 chunks, values ``arange``) and read here, in one
process, with no process group.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gloo_launch
import pytest
import torch
import torch.distributed.checkpoint as dcp

from backend import BackendConfigError
from backend._tensor._checkpoint import read_boxes

WORKER = Path(__file__).with_name("reshard_gloo_worker.py")
W = torch.arange(120.).reshape(12, 10)
M = torch.arange(64, dtype=torch.int64).reshape(8, 8)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="loopback Gloo worlds need POSIX")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("save")
    codes, reports, logs = gloo_launch.launch(WORKER, 8, "save", out, 400)
    assert codes == [0] * 8 and sorted(reports) == list(range(8)), logs
    (found,) = out.glob("attempt*/ckpt")
    yield found


def _chunks_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, ...]]]:
    """The saved chunks every storage read asks for (fqn, chunk offsets), recorded."""
    seen: list[tuple[str, tuple[int, ...]]] = []
    real = dcp.FileSystemReader.read_data

    def recording(self: Any, plan: Any, planner: Any) -> Any:
        seen.extend((i.storage_index.fqn, tuple(i.storage_index.offset)) for i in plan.items)
        return real(self, plan, planner)

    monkeypatch.setattr(dcp.FileSystemReader, "read_data", recording)
    return seen


def test_boxes_read_are_the_saved_values_in_the_saved_dtype(checkpoint: Path) -> None:
    boxes = {"w": [((0, 12), (0, 10)), ((2, 5), (3, 7)), ((11, 12), (9, 10))],
             "m": [((3, 6), (1, 7))]}
    got = read_boxes(checkpoint, boxes)
    assert [torch.equal(t, W[a0:a1, b0:b1]) for t, ((a0, a1), (b0, b1)) in
            zip(got["w"], boxes["w"])] == [True, True, True]
    (m,) = got["m"]
    assert m.dtype == torch.int64 and torch.equal(m, M[3:6, 1:7])


def test_only_the_saved_chunks_a_box_overlaps_are_read(checkpoint: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``w``'s rows are saved in 8 chunks of 2 rows (12 rows over 8 ranks, as torch.chunk:
    2, 2, 2, 2, 2, 2, 0, 0); rows 3..5 overlap the chunks starting at rows 2 and 4 only.
    ``m``'s 2 x 4 chunks are 4 x 2; the box rows 3..5, columns 1..3 overlaps 4 of 8."""
    seen = _chunks_read(monkeypatch)
    read_boxes(checkpoint, {"w": [((3, 5), (0, 10))], "m": [((3, 5), (1, 3))]})
    assert sorted(seen) == [("m", (0, 0)), ("m", (0, 2)), ("m", (4, 0)), ("m", (4, 2)),
                            ("w", (2, 0)), ("w", (4, 0))]


def test_nothing_asked_reads_nothing(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _chunks_read(monkeypatch)
    assert read_boxes(checkpoint, {"w": []}) == {"w": []}
    assert seen == []


@pytest.mark.parametrize(("wanted", "says"), [
    ({"nope": [((0, 1),)]}, "no tensor 'nope'"),
    ({"w": [((0, 13), (0, 10))]}, "does not fit 'w'"),
    ({"w": [((0, 1),)]}, "does not fit 'w'"),
    ({"w": [((3, 3), (0, 10))]}, "empty or negative"),
    ({"w": [("ab",)]}, "(start, stop) per dim"),
    ({"w": [((0.5, 2.7), (0, 10))]}, "in ints"),
    ({"w": [((True, 2), (0, 10))]}, "in ints"),
    ({"w": {((0, 1), (0, 10))}}, "a sequence of boxes"),
    ({"w": [{(0, 1), (0, 10)}]}, "(start, stop) per dim"),
    (["w"], "mapping tensor name -> boxes"),
])
def test_a_bad_request_is_a_typed_error_naming_it(checkpoint: Path, wanted: Any,
                                                 says: str) -> None:
    with pytest.raises(BackendConfigError, match=None) as caught:
        read_boxes(checkpoint, wanted)
    assert says in str(caught.value)

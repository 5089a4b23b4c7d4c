"""A rank without a dump that its peers' records show got past a call: the report says what
the records show of it, and never that it died (issue 45).

The job (``tests/hang_synth.run``, Gloo): 3 steps of a tp all_reduce then a dp all_reduce on a
(dp=2, tp=4) mesh of 8 ranks, 4 a host; rank 1 stalls before its 2nd tp call, and one rank of
host1 gave no dump.  Its tp group (4, 5, 6, 7) completed its 2nd call (the others made a dp
call after it: a Gloo call returns once it completed), which needs it, and every rank issues
that call after the 1st dp call: so it got past its 1st dp call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hang_synth import clockless, run, step, write

from mesh import HangReport, MeshView, Topology, read_flight_records

VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))
PROGRAM = step(3)
STALLS = {r: PROGRAM[:2] if r == 1 else PROGRAM for r in range(8)}  # rank 1, before tp 2


def _read(tmp: Path, missing: int, clock: bool = True, backend: str = "gloo",
          in_flight: Callable[[int, dict[str, Any]], bool] | None = None) -> HangReport:
    """The report of the job without ``missing``'s dump; ``in_flight(rank, entry)``: the
    records to mark not retired (their work unfinished when the rank dumped)."""
    dumps = run(VIEW, STALLS, frames=True, backend=backend)
    dumps.pop(missing)
    for rank, data in dumps.items():
        for entry in data["entries"]:
            if in_flight is not None and in_flight(rank, entry):
                entry["retired"] = False
    return read_flight_records(write(tmp, dumps if clock else clockless(dumps)), VIEW,
                               topology=Topology(8, 4))


def _found(report: HangReport) -> set[tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]]:
    return {(f.group.members, f.ranks, tuple(c.value for c in f.causes))
            for f in report.findings}


@pytest.mark.parametrize("clock", [True, False])
def test_a_call_a_rank_without_a_dump_got_past_is_taken_as_completed(
        tmp_path: Path, clock: bool) -> None:
    """Rank 4 gave no dump; rank 0, its dp partner, went on from their 1st dp call.  Rank 4
    was named "no dump" twice (it died, hangs elsewhere, ...) beside rank 1; now rank 1 is
    named alone, and a note says what the records show of rank 4."""
    report = _read(tmp_path, 4, clock)
    assert report.suspects == (1,)
    assert _found(report) == {((0, 1, 2, 3), (1,), ("stopped",)), ((1, 5), (1,), ("stopped",))}
    [note] = report.notes
    assert note.startswith("rank 4 gave no dump, but its peers' records show it got past calls "
                           "that every member with a dump made a call after, so those calls are "
                           "taken as completed (a Gloo call returns once it completed, and no "
                           "dump shows one made with async_op=True still in flight): rank 4 "
                           "past the 'dp' group (0, 4)'s 1st call (the 'tp' group (4, 5, 6, 7) "
                           "completed its 2nd call (all_reduce (4, 8) float32, seq 2)")
    assert report.no_dump == (4,)
    assert report.to_dict()["notes"] == [note]


def test_a_rank_without_a_dump_that_got_past_a_call_its_partner_waits_after_is_unsure(
        tmp_path: Path) -> None:
    """Rank 5 gave no dump; rank 1, its dp partner, made no call after their 1st dp call.  Rank
    5 was named alone ("no dump", which "died" first) and rank 1, the stalled rank, not at all;
    now both are named, each with both readings."""
    report = _read(tmp_path, 5)
    assert report.suspects == (1, 5)
    assert _found(report) == {((0, 1, 2, 3), (1,), ("unsure",)), ((1, 5), (5,), ("unsure",))}
    text = str(report)
    assert "(rank 5 (dp=1, tp=1; host host1): no dump was given for it, but its peers' records " \
           "show it got past this call: the 'tp' group (4, 5, 6, 7) completed its 2nd call " \
           "(all_reduce (4, 8) float32, seq 2), which needs it and which the other ranks issue " \
           "after that call (rank 4's records show it completed): either its program went on " \
           "without this call, or it made it and the ranks that entered it made no call since " \
           "(a stall after it))" in text
    assert "(rank 1 (dp=0, tp=1; host host0): its newest call (all_reduce (16,) float32 on the " \
           "'dp' group (1, 5), seq 1, at /job/train.py:101 in step) is one that rank 5 (no dump " \
           "given) got past, by its peers' records: either it stalled after that call " \
           "completed, or it waits there for rank 5, whose program went on without it)" in text
    assert "no dump was given for it: it died" not in text


def test_on_nccl_a_later_call_is_no_proof_that_a_call_completed(tmp_path: Path) -> None:
    """NCCL returns before a call completes (and marks it so when it does): the records here
    mark none completed, so rank 4 stays a rank without a dump, as before."""
    report = _read(tmp_path, 4, backend="nccl2")
    assert report.suspects == (1, 4)
    assert report.notes == ()


def _tp2(rank: int, entry: dict[str, Any]) -> bool:
    """Ranks 5, 6 and 7's 2nd tp call (they made a dp call after it)."""
    return rank in (5, 6, 7) and entry["process_group"][1] == "mesh_tp" \
        and entry["collective_seq_id"] == 2


def test_a_gloo_call_in_flight_behind_later_calls_is_no_proof_that_it_completed(
        tmp_path: Path) -> None:
    """The tp group (4, 5, 6, 7)'s 2nd call was still in flight when ranks 5, 6 and 7 dumped,
    though they had made a dp call since: they made it with ``async_op=True``, and their later
    call does not show that it completed (rank 4 may never have made it).  Read as if it had
    (rank 4 "got past" the dp call), the report named rank 1 alone: a confident wrong answer
    if rank 4 died.  Now rank 4 stays a rank without a dump, named beside rank 1, and a note
    says why."""
    report = _read(tmp_path, 4, in_flight=_tp2)
    assert report.suspects == (1, 4)
    assert ((0, 4), (4,), ("no dump",)) in _found(report)
    assert report.notes == (
        "3 Gloo calls were still in flight when their ranks dumped, though made before later "
        "calls (the first: rank 5's all_reduce (4, 8) float32 on the 'tp' group (4, 5, 6, 7), "
        "seq 2, at /job/train.py:102 in step): the program may make Gloo calls with "
        "async_op=True, or torch had not marked a finished call yet (seen in blocking programs "
        "under load), so a later call is not taken to show that an earlier one completed",)
    assert "got past" not in str(report)


def test_a_rank_s_last_call_in_flight_is_how_a_blocked_call_is_dumped(tmp_path: Path) -> None:
    """A rank dumped while blocked in a call (from another thread, before its timeout) has that
    call not retired; it is its last call, so nothing says the program overlaps its calls, and
    the reading of the first test stands: rank 1 alone, rank 4 got past the dp call."""
    def last(rank: int, entry: dict[str, Any]) -> bool:
        return entry["record_id"] == max(e["record_id"] for e in dumps[rank]["entries"])
    dumps = run(VIEW, STALLS, frames=True)
    report = _read(tmp_path, 4, in_flight=last)
    assert report.suspects == (1,)
    assert len(report.notes) == 1 and report.notes[0].startswith("rank 4 gave no dump, but")


def test_the_line_on_ranks_without_a_dump_speaks_of_one_as_one(tmp_path: Path) -> None:
    """One rank without a dump is "it", not "each"; several are "each", with "their dumps"."""
    one = str(_read(tmp_path / "one", 4, backend="nccl2"))
    assert "- no dump given for rank 4: it may have died, hang elsewhere, or its dump was not " \
           "collected; its dump would say which, and may name another culprit" in one
    dumps = run(VIEW, STALLS, frames=True)
    dumps.pop(4)
    dumps.pop(6)
    two = str(read_flight_records(write(tmp_path / "two", dumps), VIEW, topology=Topology(8, 4)))
    assert "- no dump given for ranks (4, 6): each may have died, hang elsewhere, or its dump " \
           "was not collected; their dumps would say which" in two

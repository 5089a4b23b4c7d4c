"""A rank without a dump that its peers' records show got past a call: the report says what
the records show of it, and never that it died (issue 45).

The job (``tests/hang_synth.run``, Gloo): 3 steps of a tp all_reduce then a dp all_reduce on a
(dp=2, tp=4) mesh of 8 ranks, 4 a host; rank 1 stalls before its 2nd tp call, and one rank of
host1 gave no dump.  Its tp group (4, 5, 6, 7) completed its 2nd call (the others made a dp
call after it: a Gloo call returns once it completed), which needs it, and every rank issues
that call after the 1st dp call: so it got past its 1st dp call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hang_synth import clockless, run, step, write

from mesh import HangReport, MeshView, Topology, read_flight_records

VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))
PROGRAM = step(3)
STALLS = {r: PROGRAM[:2] if r == 1 else PROGRAM for r in range(8)}  # rank 1, before tp 2


def _read(tmp: Path, missing: int, clock: bool = True, backend: str = "gloo") -> HangReport:
    dumps = run(VIEW, STALLS, frames=True, backend=backend)
    dumps.pop(missing)
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
                           "taken as completed (a Gloo call returns once it completed): rank 4 "
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

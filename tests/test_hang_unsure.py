"""Where the dumps cannot tell a stalled rank from one that skipped, the report says both
possibilities in words, under the cause ``unsure``, and never a confident one (issue 45).

The job: per step a tp all_reduce then a dp all_reduce on a (dp=2, tp=2) mesh of 4 ranks
(``tests/hang_synth``: dumps written by hand, in torch 2.13's Gloo format).  In each test
only some ranks' dumps are given, and those given disagree on the order of the program:
rank 0 waits in its 2nd tp call, while ranks 1 and 3 made their 2nd dp call.  Either the
program issues the 2nd tp call first (rank 1 went on without it) or the 2nd dp call first
(rank 1 stalled before the tp call, and rank 0 skipped its dp call): one dump against one
says nothing, and the clock cannot settle it (it tells a rank running from one stalled,
not which rank left the program's order).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hang_synth import clockless, dump, run, step, write

from mesh import HangReport, MeshView, read_flight_records

VIEW = MeshView.from_shape((2, 2), ("dp", "tp"))
TP1, DP1, TP2, DP2 = step(2)
BOTH = ("either it stalled before this call, or its program went on without it")
CONFIDENT = ("it stopped before this call", "its program went on without this call",
             "it went past it", "by the clock")


def _read(tmp: Path, dumps: dict[int, dict[str, Any]], view: MeshView = VIEW) -> HangReport:
    return read_flight_records(write(tmp, dumps), view)


def _causes(report: HangReport, rank: int) -> set[str]:
    return {c.value for f in report.findings for r, c in zip(f.ranks, f.causes) if r == rank}


def _disputed(view: MeshView, rank_1_at: int) -> dict[int, dict[str, Any]]:
    """Ranks 0, 1 and 3's dumps: rank 0 at its 2nd tp call (entered at 3 µs), rank 1's
    newest call its 2nd dp call (made at ``rank_1_at`` µs, with rank 3), rank 3 at its 2nd tp
    call after its 2nd dp call (rank 2, its tp partner, gave no dump)."""
    return {0: dump(view, 0, [TP1, DP1, TP2], at=[0, 1, 3]),
            1: dump(view, 1, [TP1, DP1, DP2], at=[0, 1, rank_1_at]),
            3: dump(view, 3, [TP1, DP1, DP2, TP2], at=[0, 1, 2, 4])}


@pytest.mark.parametrize("clock", ["none", "older", "newer"])
def test_ranks_that_disagree_on_the_order_leave_the_stopped_rank_unsure(
        tmp_path: Path, clock: str) -> None:
    """Without a clock, with rank 1's newest call older than rank 0's wait, and newer: the
    records of ranks 0 and 3 disagree, so the cause is ``unsure`` and both are said."""
    dumps = _disputed(VIEW, 2 if clock == "older" else 5)
    report = _read(tmp_path, clockless(dumps) if clock == "none" else dumps)
    [finding] = [f for f in report.findings if f.group.members == (0, 1)]
    assert (finding.ranks, finding.causes, finding.maybe) == ((1,), ("unsure",), ())
    assert BOTH in finding.text
    assert not any(words in str(report) for words in CONFIDENT), str(report)
    assert _causes(report, 1) == {"unsure"} and _causes(report, 0) == set()
    assert report.to_dict()["findings"][0]["ranks"][0]["cause"] == "unsure"


def test_an_unsure_gloo_rank_in_a_pipeline_names_its_neighbour(tmp_path: Path) -> None:
    """The same in stage 0 of a (pp=2, dp=2, tp=2) job on Gloo: rank 1 may also wait in a
    receive Gloo does not record, from rank 5, its neighbour along the pipeline."""
    view = MeshView.from_shape((2, 2, 2), ("pp", "dp", "tp"))
    report = _read(tmp_path, clockless(_disputed(view, 5)), view)
    [finding] = [f for f in report.findings if f.group.members == (0, 1)]
    assert (finding.ranks, finding.causes, finding.maybe) == ((1,), ("unsure",), (5,))
    assert BOTH in finding.text
    assert "Gloo records no point-to-point call: if it receives before this call, it may " \
           "wait for rank 5 (its neighbour along the pipeline)" in finding.text
    assert 5 in report.suspects


def _two_dumps(clock: bool) -> dict[int, dict[str, Any]]:
    """Ranks 0 and 1's dumps only: rank 0 waits at its 2nd tp call (entered at 2 µs), rank 1
    at its 2nd dp call (entered at 5 µs), whose partner, rank 3, gave no dump."""
    dumps = {0: dump(VIEW, 0, [TP1, DP1, TP2], at=[0, 1, 2]),
             1: dump(VIEW, 1, [TP1, DP1, DP2], at=[0, 1, 5])}
    return dumps if clock else clockless(dumps)


def test_without_a_clock_one_dump_against_one_leaves_the_waiting_rank_unsure(
        tmp_path: Path) -> None:
    """Only rank 0's records put rank 1's call after the pending one: rank 1 went past the
    tp call, or waits in its dp call for rank 3 (no dump): both are said, and rank 3 named."""
    report = _read(tmp_path, _two_dumps(clock=False))
    [finding] = [f for f in report.findings if f.group.members == (0, 1)]
    assert (finding.ranks, finding.causes) == ((1,), ("unsure",))
    assert "either it went past this call, or it waits there in turn, stuck behind that " \
           "group" in finding.text
    assert not any(words in str(report) for words in CONFIDENT), str(report)
    assert _causes(report, 3) == {"no dump"}
    assert report.suspects == (1, 2, 3)


def test_with_a_clock_the_cause_says_it_rests_on_the_clock(tmp_path: Path) -> None:
    """With the clock, rank 1 made its dp call 3 µs after rank 0 began waiting, and no other
    rank disputes the order: it went past, and the words say on what evidence."""
    report = _read(tmp_path, _two_dumps(clock=True))
    [finding] = [f for f in report.findings if f.group.members == (0, 1)]
    assert (finding.ranks, finding.causes) == ((1,), ("went past",))
    assert "by the clock, it went past it" in finding.text
    assert "made 3 µs after the first rank entered this call" in finding.text
    assert "the other ranks there issued after this call" not in finding.text


HIDDEN_BOTH = ("the other ranks' records tie on which of the two calls comes first, so the "
               "dumps cannot tell: either it skipped this call, hidden behind the hang above")


def _hidden_tie(tmp: Path, view: MeshView, programs: dict[int, Any], keep: set[int],
                clock: bool) -> HangReport:
    """``programs`` run to their hang (``tests/hang_synth.run``), the dumps of ``keep`` only."""
    dumps = {r: d for r, d in run(view, programs, frames=True).items() if r in keep}
    return _read(tmp, dumps if clock else clockless(dumps), view)


@pytest.mark.parametrize("clock", [True, False])
def test_a_skip_hidden_where_four_ranks_tie_on_the_order_is_named_unsure(
        tmp_path: Path, clock: bool) -> None:
    """3 steps on the (dp=2, tp=2) mesh: rank 1 stalls before its 2nd tp call; rank 3 skips its
    2nd dp call and waits at its 3rd tp call, where rank 2 never comes (it waits at its 2nd dp
    call behind rank 1).  Rank 2 made the dp call and not the tp call, rank 3 the other way
    round, and ranks 0 and 1 made neither: a tie.  Rank 3 was not named at all (rank 2 was,
    unsure); now both are, unsure, and rank 1 stopped."""
    program = step(3)
    report = _hidden_tie(tmp_path, VIEW, {0: program, 1: program[:2], 2: program,
                                          3: [c for i, c in enumerate(program) if i != 3]},
                         {0, 1, 2, 3}, clock)
    assert report.suspects == (1, 2, 3)
    assert {(f.group.members, f.ranks, f.causes) for f in report.findings} == {
        ((0, 1), (1,), ("stopped",)), ((2, 3), (2,), ("unsure",)), ((1, 3), (3,), ("unsure",))}
    hidden = next(f for f in report.findings if f.ranks == (3,))
    assert "rank 3 never issued its 2nd call (all_reduce (16,) float32, seq 2, at " \
           "/job/train.py:103 in step), which no member reached yet" in hidden.text
    assert "it waits at all_reduce (4, 8) float32 on the 'tp' group (2, 3), seq 3" in hidden.text
    assert HIDDEN_BOTH in hidden.text
    assert "or the program issues this call after that one and it merely waits there for its " \
           "peers" in hidden.text
    assert not any(words in hidden.text for words in CONFIDENT)
    assert report.to_dict()["findings"][2]["ranks"][0]["cause"] == "unsure"


def test_a_skip_hidden_where_the_dumps_given_tie_on_the_order_is_named_unsure(
        tmp_path: Path) -> None:
    """3 steps on a (dp=2, tp=4) mesh: rank 1 stalls, rank 6 skips its 2nd dp call (as in
    test_hang_kinds), and ranks 4 and 5 gave no dump: rank 7's records alone put the dp call
    first, rank 6's the tp call.  Rank 6 was not named; now it is, unsure."""
    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    program = step(3)
    programs = {r: program for r in range(8)} | {
        1: program[:2], 6: [c for i, c in enumerate(program) if i != 3]}
    report = _hidden_tie(tmp_path, view, programs, {0, 1, 2, 3, 6, 7}, clock=True)
    hidden = next(f for f in report.findings if f.ranks == (6,))
    assert (hidden.group.members, hidden.causes) == ((2, 6), ("unsure",))
    assert HIDDEN_BOTH in hidden.text
    assert 6 in report.suspects


def test_a_group_that_made_fewer_calls_where_nothing_is_stuck_is_no_hidden_skip(
        tmp_path: Path) -> None:
    """3 steps on the (dp=2, tp=2) mesh; ranks 0 and 2, the dp group (0, 2), both leave out
    their 2nd dp call and end after their 3rd tp call, while ranks 1 and 3 run all 6 calls:
    every call any rank made completed, and no rank waits.  The report named ranks 0 and 2 as
    skips "hidden behind the hang above", with no hang above ("0 stuck; problems found"); a
    skip is hidden only behind a hang, so the dumps show none."""
    program = step(3)
    fewer = [c for i, c in enumerate(program[:5]) if i != 3]
    report = _hidden_tie(tmp_path, VIEW, {0: fewer, 1: program, 2: fewer, 3: program},
                         {0, 1, 2, 3}, clock=True)
    assert report.ok and report.findings == () and report.suspects == ()
    assert str(report).startswith("meshlayout hang over 4 ranks: 4 dumps, 4 groups with "
                                  "calls, 0 stuck; no hang in the records")

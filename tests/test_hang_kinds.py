"""Each kind of planted hang, read from its dumps (:func:`mesh.read_flight_records`): the
report's first suspects are exactly the planted ranks, with the right cause, or, where the
dumps cannot tell, both possibilities in words, never a confident wrong cause (issue 45).

The dumps come from ``tests/hang_synth.run``: every rank's program run to its hang on
blocking calls, as Gloo records it (no point-to-point call recorded; a clock that ticks while
the others wait), stack frames at ``/job/train.py`` line 100 plus the call's place in the
program.  The program: 3 steps of a tp all_reduce then a dp all_reduce on a (dp=2, tp=4)
mesh of 8 ranks, 4 a host; each test plants one fault.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest
from hang_synth import Call, clockless, run, step, write

from mesh import HangReport, MeshView, Topology, read_flight_records

VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))
HOSTS = Topology(8, 4)
PROGRAM = step(3)  # places 0-5: tp1 dp1 tp2 dp2 tp3 dp3 (train.py lines 100-105)


def _skip(program: Sequence[Call], *places: int) -> list[Call | None]:
    return [None if i in places else c for i, c in enumerate(program)]


def _read(tmp: Path, programs: dict[int, Sequence[Call | None]], view: MeshView = VIEW,
          backend: str = "gloo", clock: bool = True) -> HangReport:
    dumps = run(view, programs, frames=True, backend=backend)
    return read_flight_records(write(tmp, dumps if clock else clockless(dumps)), view,
                               topology=HOSTS)


def _plant(**faults: Sequence[Call | None]) -> dict[int, Sequence[Call | None]]:
    """The program on every rank, but ``r5=...`` on rank 5."""
    return {r: faults.get(f"r{r}", PROGRAM) for r in range(8)}


def test_a_rank_that_skips_a_call_and_goes_on_is_named_as_going_on(tmp_path: Path) -> None:
    report = _read(tmp_path, _plant(r5=_skip(PROGRAM, 4)))
    assert report.suspects == (5,)
    [finding] = report.findings
    assert (finding.kind, finding.group.dim, finding.causes) == ("unmatched", "tp", ("went on",))
    assert "its program went on without this call" in finding.text


def test_a_stalled_rank_is_not_said_to_have_gone_on(tmp_path: Path) -> None:
    """Rank 5 stalls after its 2nd step (it was "its program went on without this call"):
    its newest call comes before the pending ones in every other rank's order; that it
    stalls and that its program ended look alike in the records, so both are said."""
    report = _read(tmp_path, _plant(r5=PROGRAM[:4]))
    assert report.suspects == (5,)
    assert {(f.group.dim, f.causes) for f in report.findings} == {("dp", ("stopped",)),
                                                                  ("tp", ("stopped",))}
    text = str(report)
    assert "went on" not in text
    assert "it stopped before this call" in text and "it stalls there" in text
    assert "or its program ended without this call" in text
    assert report.stalled_hosts == ()  # one rank of host1 is no host-wide stall


def test_a_stalled_host_is_named_as_the_host(tmp_path: Path) -> None:
    report = _read(tmp_path, _plant(**{f"r{r}": PROGRAM[:5] for r in range(4, 8)}))
    assert report.suspects == (4, 5, 6, 7)
    assert {f.causes for f in report.findings} == {("stopped",)}
    assert report.stalled_hosts == ("host1",)
    assert str(report).splitlines()[2].startswith("- all of host host1's ranks stopped")
    assert report.to_dict()["stalled_hosts"] == ["host1"]


def test_a_skip_of_the_last_call_says_both_possibilities(tmp_path: Path) -> None:
    """Rank 5 skips the program's last call: its records are those of a rank stalled before
    it, so the report says both (a stall, or its program ended without the call)."""
    report = _read(tmp_path, _plant(r5=_skip(PROGRAM, 5)))
    assert report.suspects == (5,)
    [finding] = report.findings
    assert finding.causes == ("stopped",)
    assert "it stalls there" in finding.text and "its program ended without this call" \
        in finding.text


def test_a_rank_that_skips_the_world_all_reduce_is_named_alone(tmp_path: Path) -> None:
    """Rank 3 skips the 2nd all_reduce on torch's default group and waits at its next dp
    call: it was "a cycle" naming ranks 3 and 7 (7 waits in the world group with the
    others); no other rank reached that dp call, so rank 3 went past the world call."""
    program = [c for _ in range(3) for c in (("tp", "all_reduce", (4, 8)),
                                             ("world", "all_reduce", (2,)),
                                             ("dp", "all_reduce", (16,)))]
    report = _read(tmp_path, {r: _skip(program, 4) if r == 3 else program for r in range(8)})
    assert report.suspects == (3,)
    [finding] = report.findings
    assert (finding.group.dim, finding.causes) == ("world", ("went past",))
    assert "wait on each other" not in str(report)


def test_two_ranks_skipping_calls_on_two_dims_are_both_named(tmp_path: Path) -> None:
    """Rank 1 skips its 3rd tp call, rank 6 its 2nd dp call, whose calls differ in size each
    step: rank 6's next dp call meets rank 2's 2nd (a desync of a 2-member group, the odd
    side found by the other dp groups), and rank 1 went on."""
    program = [c for k in (1, 2, 3) for c in (("tp", "all_reduce", (4, 8 * k)),
                                              ("dp", "all_reduce", (16 * k,)))]
    report = _read(tmp_path, {r: _skip(program, 4) if r == 1 else _skip(program, 3) if r == 6
                              else program for r in range(8)})
    assert report.suspects == (1, 6)
    assert {(f.kind, f.group.members, f.ranks) for f in report.findings} == {
        ("unmatched", (0, 1, 2, 3), (1,)), ("desync", (2, 6), (6,))}


def test_a_skip_matched_by_the_next_call_of_its_kind_is_found_from_the_order(
        tmp_path: Path) -> None:
    """As above with calls of one size: rank 6's 3rd dp call completes with rank 2's 2nd
    (Gloo scrambles the data) and hides behind rank 1's hang.  Rank 6 issued it after its
    3rd tp call; every other member of its tp and dp groups issues it before."""
    report = _read(tmp_path, _plant(r1=_skip(PROGRAM, 4), r6=_skip(PROGRAM, 3)))
    assert report.suspects == (1, 6)
    desync = next(f for f in report.findings if f.ranks == (6,))
    assert (desync.kind, desync.group.members) == ("desync", (2, 6))
    assert "it skipped a call or swapped two" in desync.text
    assert "at /job/train.py:105 in step" in desync.text  # where rank 6 made it


@pytest.mark.parametrize("clock", [True, False])
def test_a_skip_hidden_behind_a_stalled_rank_is_named_beside_it(tmp_path: Path,
                                                                  clock: bool) -> None:
    """Rank 1 stalls before its 2nd tp call; rank 6 skips its 2nd dp call and waits at its
    3rd tp call.  Its dp partner, rank 2, waits behind rank 1 and never reached a 2nd dp
    call, so no group shows the skip (it was "stuck behind" its tp peers); ranks 4, 5 and 7
    made their 2nd dp call before their 3rd tp call: rank 6 went past it."""
    report = _read(tmp_path, _plant(r1=PROGRAM[:2], r6=_skip(PROGRAM, 3)), clock=clock)
    assert report.suspects == (1, 6)
    assert {(f.group.members, f.ranks, f.causes) for f in report.findings} == {
        ((0, 1, 2, 3), (1,), ("stopped",)), ((1, 5), (1,), ("stopped",)),
        ((2, 6), (6,), ("went past",))}
    hidden = next(f for f in report.findings if f.ranks == (6,))
    assert "never issued its 2nd call (all_reduce (16,) float32, seq 2, at /job/train.py:103 " \
           "in step), which no member reached yet" in hidden.text
    assert "it waits at all_reduce (4, 8) float32 on the 'tp' group (4, 5, 6, 7), seq 3" \
        in hidden.text and "hidden behind the hang above" in hidden.text
    assert {b.rank for b in report.blocked} == {4, 6, 7}  # as check_spmd lists them


def test_a_skip_matched_behind_a_stalled_rank_is_found_from_the_order(tmp_path: Path) -> None:
    """Rank 1 stalls before its 3rd tp call; rank 6 skips its 2nd dp call, and its 3rd meets
    rank 2's 2nd (same shapes: it completes) before rank 2 waits behind rank 1."""
    report = _read(tmp_path, _plant(r1=PROGRAM[:4], r6=_skip(PROGRAM, 3)))
    assert report.suspects == (1, 6)
    assert {(f.kind, f.group.members, f.ranks, f.causes) for f in report.findings} == {
        ("unmatched", (0, 1, 2, 3), (1,), ("stopped",)),
        ("unmatched", (1, 5), (1,), ("stopped",)), ("desync", (2, 6), (6,), ("desync",))}


@pytest.mark.parametrize("clock", [True, False])
def test_a_skip_of_the_last_call_hidden_behind_another_skip_is_named_beside_it(
        tmp_path: Path, clock: bool) -> None:
    """Two steps: rank 1 skips its 2nd tp call, rank 6 its 2nd dp call, the program's last.
    Rank 2, its dp partner, waits behind rank 1 and never reached a 2nd dp call, so no group
    shows rank 6's skip, and it waits nowhere: its newest call (its 2nd tp) completed, and
    ranks 4, 5 and 7 made a 2nd dp call after it.  It was not named at all (seen on 8 Gloo
    processes); its records are a stalled rank's, so it is named as one: both readings."""
    program = step(2)
    report = _read(tmp_path, {r: _skip(program, 2) if r == 1 else program[:3] if r == 6
                              else program for r in range(8)}, clock=clock)
    assert report.suspects == (1, 6)
    assert {(f.group.members, f.ranks, f.causes) for f in report.findings} == {
        ((0, 1, 2, 3), (1,), ("went on",)), ((2, 6), (6,), ("stopped",))}
    hidden = next(f for f in report.findings if f.ranks == (6,))
    assert "never issued its 2nd call (all_reduce (16,) float32, seq 2, at /job/train.py:103 " \
           "in step), which no member reached yet" in hidden.text
    assert "its newest call (all_reduce (4, 8) float32 on the 'tp' group (4, 5, 6, 7), seq 2" \
        in hidden.text and "or its program ended without this call, hidden behind the " \
        "hang above" in hidden.text


def test_a_stage_with_a_completed_newest_call_is_no_hidden_stall(tmp_path: Path) -> None:
    """As above on a (pp=2, dp=2, tp=2) mesh (rank 1 skips its 2nd tp call, rank 2 stops
    before its 2nd dp call): on a pipeline's view a rank whose newest call completed and
    that made none since may wait in a receive Gloo does not record, and its stage's calls
    may differ by design; it is not named as stopped behind the hang."""
    view = MeshView.from_shape((2, 2, 2), ("pp", "dp", "tp"))
    program = step(2)
    report = _read(tmp_path, {r: _skip(program, 2) if r == 1 else program[:3] if r == 2
                              else program for r in range(8)}, view=view)
    assert report.suspects == (1,)


def test_two_ranks_that_skip_one_call_in_two_groups_are_both_named(tmp_path: Path) -> None:
    """Ranks 1 and 6 skip their 2nd tp call (two tp groups): ranks 1, 5, 6, 2 wait each for
    the next (it was a cycle of four, two of them innocent)."""
    report = _read(tmp_path, _plant(r1=_skip(PROGRAM, 2), r6=_skip(PROGRAM, 2)))
    assert report.suspects == (1, 6)
    assert {f.causes for f in report.findings} == {("went past",)}


def test_the_program_lines_of_the_call_and_of_the_culprit_are_shown(tmp_path: Path) -> None:
    report = _read(tmp_path, _plant(r5=_skip(PROGRAM, 4)))
    [finding] = report.findings
    assert "(all_reduce (4, 8) float32, seq 3, at /job/train.py:104 in step)" in finding.text
    assert "seq 3, at /job/train.py:105 in step) completed" in finding.text  # rank 5's newest


def _pipeline(rank: int, skip_send: bool) -> list[Call | None]:
    """2 steps on a (pp=2, dp=2, tp=2) mesh: stage 0 all_reduces on tp and sends to its
    stage-1 peer, which receives and all_reduces on tp; then both all_reduce on dp."""
    peer = rank ^ 4
    program: list[Call | None] = []
    for s in (1, 2):
        if rank < 4:
            send: Call | None = None if skip_send and s == 2 else ("p2p", "send", (peer,))
            program += [("tp", "all_reduce", (4, 8)), send]
        else:
            program += [("p2p", "recv", (peer,)), ("tp", "all_reduce", (4, 8))]
        program.append(("dp", "all_reduce", (16,)))
    return program


def test_a_skipped_send_on_gloo_names_the_receiver_and_its_peer_as_possibilities(
        tmp_path: Path) -> None:
    """Rank 0 skips its 2nd send; rank 4 waits in its receive, which Gloo does not record: it
    looks stalled.  It was "its program went on without this call", of rank 4 alone."""
    view = MeshView.from_shape((2, 2, 2), ("pp", "dp", "tp"))
    report = _read(tmp_path, {r: _pipeline(r, r == 0) for r in range(8)}, view)
    assert report.suspects == (0, 4)
    assert {(f.ranks, f.maybe, f.causes) for f in report.findings} == {((4,), (0,),
                                                                         ("stopped",))}
    text = str(report)
    assert "went on" not in text
    assert "Gloo records no point-to-point call: if it receives before this call, it may " \
           "wait for rank 0 (its neighbour along the pipeline)" in text
    data = report.to_dict()
    assert [r["rank"] for r in data["findings"][0]["maybe"]] == [0]
    finding = report.findings[0]
    assert pickle.loads(pickle.dumps(finding)) == finding  # its causes and maybe kept
    assert data["findings"][0]["ranks"][0]["cause"] == "stopped"


def test_on_nccl_a_stall_names_no_peer(tmp_path: Path) -> None:
    """NCCL records point-to-point calls: a rank stalled there is no Gloo receiver."""
    view = MeshView.from_shape((2, 2, 2), ("pp", "dp", "tp"))
    report = _read(tmp_path, {r: _pipeline(r, r == 0) for r in range(8)}, view,
                   backend="nccl2")
    assert report.suspects == (4,) and all(f.maybe == () for f in report.findings)
    assert "Gloo" not in str(report)


def _without(dumps_of: dict[int, Sequence[Call | None]], tmp: Path, missing: int,
             view: MeshView = VIEW) -> HangReport:
    """The report of ``dumps_of`` run to its hang, without rank ``missing``'s dump."""
    dumps = run(view, dumps_of, frames=True)
    dumps.pop(missing)
    return read_flight_records(write(tmp, dumps), view, topology=HOSTS)


def test_a_size_desync_whose_other_side_was_aborted_names_the_odd_rank(tmp_path: Path) -> None:
    """Rank 5 issues its 1st dp all_reduce as (8,) where the program's is (16,); on Gloo its
    partner, rank 1, is aborted by the mismatch and leaves no dump (here: it stops before the
    call, and its dump is dropped).  The group (1, 5) had only rank 1 named, "no dump" (the
    audit's plant: the culprit missed); now rank 5 is named too, a desync against the
    same call of every other dp group, which all made (16,)."""
    odd = [("dp", "all_reduce", (8,)) if i == 1 else c for i, c in enumerate(PROGRAM)]
    report = _without({r: odd if r == 5 else PROGRAM[:1] if r == 1 else PROGRAM
                       for r in range(8)}, tmp_path, 1)
    assert report.suspects == (1, 5)
    [desync] = [f for f in report.findings if f.kind == "desync"]
    assert (desync.group.members, desync.ranks, desync.causes) == ((1, 5), (5,), ("desync",))
    assert desync.text == (
        "the 'dp' group (1, 5) [view mesh, tp=1]: rank 5 issued its 1st call as all_reduce (8,) "
        "float32, at /job/train.py:101 in step, where every other 'dp' group issued all_reduce "
        "(16,) float32: a desync, whose other side (rank 1) left no dump (on Gloo a member "
        "whose buffer is smaller than the message it gets is aborted)")


def test_a_call_the_other_groups_disagree_on_names_no_desync(tmp_path: Path) -> None:
    """As above, but the other dp groups differ among themselves at that call (as stages of
    a pipeline reduce different shapes): nothing says which is the program's, so only the
    rank without a dump is named."""
    def program(r: int) -> list[Call]:
        shape = (8,) if r in (1, 5) else (16,) if r in (0, 4) else (32,)
        return [("dp", "all_reduce", shape) if i == 1 else c for i, c in enumerate(PROGRAM)]
    report = _without({r: program(r)[:1] if r == 1 else program(r) for r in range(8)},
                      tmp_path, 1)
    assert report.kinds() == {"unmatched"} and report.suspects == (1,)


def test_groups_of_other_pipeline_stages_are_not_compared(tmp_path: Path) -> None:
    """A (pp=4, dp=2) mesh: each stage's dp group all-reduces its own gradients, the last
    stage's of another shape (an output head).  Rank 7, the last stage's other member, dies
    before that call (no dump): the three other stages agree with each other, but they are
    other stages, so rank 6, which made the program's call, is not named a desync."""
    view = MeshView.from_shape((4, 2), ("pp", "dp"))

    def program(r: int) -> list[Call]:
        return [("dp", "all_reduce", (32,) if r >= 6 else (16,))]
    report = _without({r: [] if r == 7 else program(r) for r in range(8)}, tmp_path, 7, view)
    assert report.kinds() == {"unmatched"} and report.suspects == (7,), str(report)

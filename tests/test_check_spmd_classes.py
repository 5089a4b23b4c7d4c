"""Automatic classes (issue 37, part 1): ``check_spmd`` finds which ranks behave alike from
what each rank's program reads, runs one per class, and gives the full check's report.

Here: the law of a recorded read (evaluated for every rank at once, it is what the program
computes there), reports equal to the full run's on random valid and planted programs
(``tests/spmd_programs.py``) and on the corpus (``tests/spmd_corpus.py``), a desync planted
on one rank deep in a large world, the rank read through ``dist.get_rank()`` and the
environment, a program that branches on every rank (it falls back, and says so), and the
checks that catch a derivation that does not stand.
"""

from __future__ import annotations

import functools
import operator
import os
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spmd_corpus import CASES
from spmd_programs import program, titan_step

from backend import BackendConfigError, SpmdBackend, check_spmd, init_device_mesh
from backend._spmd._classes import MOST_CLASSES, Deriver
from backend._spmd._events import Call, Create
from backend._spmd._reads import Evaluator, Reads, Sym
from backend._spmd._reduce import derive, same
from mesh import MeshView


def _same_report(a: Any, b: Any) -> bool:
    return (a.ok, a.findings, a.never_created, a.waiting, a.blocked, a.errors, a.calls,
            a.groups) == (b.ok, b.findings, b.never_created, b.waiting, b.blocked, b.errors,
                          b.calls, b.groups)


# ---- the law of a read ------------------------------------------------------------------------

_VIEW = MeshView.from_shape((4, 3, 8), ("pp", "dp", "tp"))
_OPS = [("+", operator.add), ("-", operator.sub), ("*", operator.mul),
        ("//", operator.floordiv), ("%", operator.mod), ("&", operator.and_),
        ("^", operator.xor), (">>", operator.rshift)]
_CMPS = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]


def _apply(start: Any, steps: list[tuple[int, int, bool]], cmp: int, last: int) -> Any:
    """The program's computation: ``steps`` of (op, constant, constant on the left) on
    ``start``, then a comparison with ``last`` (``"raises"`` where Python raises)."""
    x = start
    try:
        for op, const, flipped in steps:
            fn = _OPS[op][1]
            x = fn(const, x) if flipped else fn(x, const)
        return _CMPS[cmp](x, last)
    except (ZeroDivisionError, ValueError):
        return "raises"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["rank", 0, 1, 2]), st.integers(0, 95),
       st.lists(st.tuples(st.integers(0, len(_OPS) - 1), st.integers(-9, 9), st.booleans()),
                max_size=4),
       st.integers(0, len(_CMPS) - 1), st.integers(-20, 20))
def test_a_read_evaluated_for_every_rank_is_what_the_program_computes(
        source: Any, rank: int, steps: list[tuple[int, int, bool]], cmp: int, last: int
) -> None:
    """Law: a program computes an int from its rank or a coordinate and compares it; the
    ranks the recorded read puts in rank ``rank``'s class are exactly the ranks where the
    same computation on plain ints gives the same outcome (a rank where it raises is in no
    class: it runs itself)."""
    reads = Reads(rank)
    coord = _VIEW.coordinate(rank)
    start = reads.rank() if source == "rank" else reads.coordinate(_VIEW, coord, depth=2)
    if source != "rank":
        start = start[source]  # type: ignore[index]
    mine = _apply(start, steps, cmp, last)
    if mine == "raises":
        return
    want = [_apply(r if source == "rank" else _VIEW.coordinate(r)[source], steps, cmp, last)
            == mine for r in range(96)]
    assert Evaluator(96).matching(reads, range(96)).tolist() == want


def test_every_use_of_a_read_that_can_steer_the_program_is_recorded() -> None:
    reads = Reads(6)
    r = reads.rank()
    assert isinstance(r + 1, Sym) and isinstance(2 * r, Sym)
    assert [10, 11, 12, 13, 14, 15, 16][r] == 16  # an index: the value itself
    assert f"{r // 2}" == "3" and bool(r % 3) is False
    assert list(reads.seen.values()) == [6, 3, False]


# ---- reports equal to the full run's ---------------------------------------------------------

@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("plant", [False, True])
def test_random_programs_get_the_full_runs_report(plant: bool) -> None:
    """Law: on random valid programs and the same with a desync planted on one rank,
    automatic classes give the report of running every rank (30 seeded programs of each,
    worlds of 4 to 32)."""
    differ = []
    for seed in range(2000 + 1000 * plant, 2030 + 1000 * plant):
        g = program(seed, max_world=32, plant=plant)
        auto = check_spmd(g.world, g.program, classes="auto", **g.check)
        full = check_spmd(g.world, g.program, classes="every", **g.check)
        if not _same_report(auto, full):
            differ.append(f"{g.words}\n{auto}\n-- every rank:\n{full}")
    assert not differ, "\n\n".join(differ[:2])


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_corpus_program_gets_the_full_runs_report(case: Any) -> None:
    auto = check_spmd(case.world, case.program, **{**case.check, "classes": "auto"})
    full = check_spmd(case.world, case.program, **{**case.check, "classes": "every"})
    assert _same_report(auto, full), f"{auto}\n-- every rank:\n{full}"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("seed", [7, 11])
def test_a_desync_planted_deep_in_a_large_world_is_found(seed: int) -> None:
    """A random program at 2,048 ranks, one rank (drawn from the seed, anywhere in the
    world) issuing another shape once: found, on that rank, with fewer ranks run."""
    g = program(seed, plant=True, world=2048)
    report = check_spmd(g.world, g.program, **g.check)  # automatic above 1,024 ranks
    assert g.planted, g.words
    assert "desync" in report.kinds(), f"{g.words}\n{report}"


@pytest.mark.filterwarnings("ignore")
def test_one_rank_issuing_another_shape_on_its_tp_group_is_named_as_the_full_run_names_it(
) -> None:
    """The torchtitan-like step through torch.distributed, rank 2,777 of 4,096 reading
    ``dist.get_rank()`` and all-reducing another shape on its tp group once: the words of
    the finding are those of the full run (written out from the planted fault)."""
    prog = functools.partial(titan_step, odd_rank=2777)
    report = check_spmd(4096, prog, torch=True)
    assert [(f.kind, f.ranks) for f in report.findings] == [("desync", (2777,))]
    assert report.findings[0].text.startswith(
        "the 'tp' group (2776, 2777, 2778, 2779) desyncs at its 1st call: ranks (2776, 2778, "
        "2779) all_reduce (1024, 512) float32 sum (spmd_programs.py:")
    assert "rank 2777 all_reduce (1024, 256) float32 sum" in report.findings[0].text
    assert report.ran is not None and report.ran < 200, report.notes
    assert report.notes[0].startswith("automatic classes: 5 by what each rank's program reads")


@pytest.mark.filterwarnings("ignore")
def test_the_same_desync_at_a_small_world_gives_the_same_words() -> None:
    small = check_spmd(256, functools.partial(titan_step, odd_rank=177), torch=True,
                       classes="every")
    auto = check_spmd(256, functools.partial(titan_step, odd_rank=177), torch=True,
                      classes="auto")
    assert _same_report(small, auto)
    assert small.findings[0].text.startswith("the 'tp' group (176, 177, 178, 179) desyncs")


# ---- reads of the rank ------------------------------------------------------------------------

def _rank_program(read: str) -> Any:
    def prog(backend: Any) -> None:
        import torch
        import torch.distributed as dist

        mesh = init_device_mesh("cpu", (4, 8), mesh_dim_names=("dp", "tp"), backend=backend)
        rank = dist.get_rank() if read == "dist" else int(os.environ["RANK"])
        shape = (8, 3) if rank == 21 else (8, 4)
        dist.all_reduce(torch.empty(shape, device="meta"), group=mesh.get_group("tp"))
    return prog


@pytest.mark.filterwarnings("ignore")
def test_a_rank_read_through_dist_get_rank_is_a_read_of_one_class() -> None:
    auto = check_spmd(32, _rank_program("dist"), torch=True, classes="auto")
    assert [(f.kind, f.ranks) for f in auto.findings] == [("desync", (21,))]
    assert auto.notes[0].startswith("automatic classes: 2 by what each rank's program reads; ")
    assert _same_report(auto, check_spmd(32, _rank_program("dist"), torch=True,
                                         classes="every"))


@pytest.mark.filterwarnings("ignore")
def test_a_rank_read_from_the_environment_runs_every_rank_and_says_so() -> None:
    """``int(os.environ["RANK"])`` gives the number itself (no Sym can stand for a str):
    every rank is a class of its own, so every rank runs; the report is the full run's."""
    auto = check_spmd(32, _rank_program("env"), torch=True, classes="auto")
    assert [(f.kind, f.ranks) for f in auto.findings] == [("desync", (21,))]
    assert auto.notes == ("ran every rank: the program reads its rank as a number (an index, "
                          "a str, the environment's RANK): every rank is a class of its own",)
    assert _same_report(auto, check_spmd(32, _rank_program("env"), torch=True,
                                         classes="every"))


def test_the_environment_holds_each_ranks_rank_and_is_restored() -> None:
    seen = []
    before = os.environ.get("RANK")
    check_spmd(4, lambda b: seen.append((os.environ["RANK"], os.environ["WORLD_SIZE"])),
               classes="auto")
    assert sorted(set(seen)) == [("0", "4"), ("1", "4"), ("2", "4"), ("3", "4")]
    assert os.environ.get("RANK") == before


def test_a_program_that_branches_on_every_rank_falls_back_and_says_so() -> None:
    def every(backend: SpmdBackend) -> None:
        mesh = init_device_mesh("cpu", (512,), mesh_dim_names=("w",), backend=backend)
        backend.all_reduce((1 + backend.rank % 300,), group=mesh.get_group("w"))

    report = check_spmd(512, every, classes="auto")
    assert report.notes[0] == (f"ran every rank: the program's reads split the ranks into "
                               f"more than {MOST_CLASSES} classes (it branches on nearly "
                               "every rank)")
    assert _same_report(report, check_spmd(512, every, classes="every"))
    assert "desync" in report.kinds()


def _sliced(world: int, kinds: int) -> Any:
    """A valid program of ``kinds`` classes: each 16-rank group all-reduces a shape of its
    own, ``(rank // 16) % kinds``, so that ranks of a class are in different groups."""
    def sliced(backend: SpmdBackend) -> None:
        mesh = init_device_mesh("cpu", (world // 16, 16), mesh_dim_names=("a", "b"),
                                backend=backend)
        backend.all_reduce((1 + (backend.rank // 16) % kinds,), group=mesh.get_group("b"))
    return sliced


def test_the_bound_on_classes_grows_with_the_world() -> None:
    """Issue 45: past 1,024 ranks a world allows one class per 4 ranks (it was 256 at any
    size, and 7 of 40 sampled programs ran every rank): 300 classes at 8,192 ranks run on
    classes, and give the full check's report."""
    report = check_spmd(8192, _sliced(8192, 300), classes="auto")
    assert report.notes[0].startswith("automatic classes: 300 by what each rank's program reads")
    assert report.ran < 8192 // 2 and report.ok
    assert _same_report(report, check_spmd(8192, _sliced(8192, 300), classes="every"))


def _indexing(shape: tuple[int, ...], odd: int | None = None) -> Any:
    """A valid program shaped like the sampled seeds 20029 and 20036 (which ran every
    rank): on a mesh of ``shape``, each rank indexes a table of uneven all_to_all splits
    by its place in its group of every dim but the last (so one class per combination of
    those coordinates: one per ``shape[-1]`` ranks, free along the last dim), then
    all-reduces on its group of the last dim; with ``odd``, that rank all-reduces another
    shape there (a desync)."""
    names = tuple("abcdef"[:len(shape)])

    def indexing(backend: SpmdBackend) -> None:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names, backend=backend)
        for d, size in zip(names[:-1], shape[:-1], strict=True):
            table = [[1 + (i + 2 * j) % 3 for j in range(size)] for i in range(size)]
            me = mesh.get_local_rank(d)
            backend.all_to_all((sum(table[me]), 2), group=mesh.get_group(d),
                               input_splits=table[me],
                               output_splits=[table[j][me] for j in range(size)])
        rows = 5 if odd is not None and backend.rank == odd else 4
        backend.all_reduce((rows, 2), group=mesh.get_group(names[-1]))
    return indexing


@pytest.mark.parametrize(("shape", "odd", "classes"), [
    ((4, 2, 4, 8), 77, 33),  # as 20029: 9 runs a class of 8 (all its neighbours) before
    ((8, 8, 8, 8), None, 512),  # as 20036: one class per 8 ranks, past the bound before
], ids=["as-20029", "as-20036"])
def test_programs_indexing_by_their_coordinates_run_on_classes_with_the_full_runs_report(
        shape: tuple[int, ...], odd: int | None, classes: int) -> None:
    """Issue 45: classes that read the same expressions (one shape of reads) past the first
    IN_FULL are verified by one neighbour each, so a program of one class per 8 ranks, each
    class a whole group, runs on classes (it ran every rank: its classes took more runs than
    it has ranks), on fewer runs than ranks, with the full check's report."""
    world = int(np.prod(shape))
    report = check_spmd(world, _indexing(shape, odd), classes="auto")
    assert report.notes[0].startswith(f"automatic classes: {classes} by what each rank's "
                                      "program reads"), report.notes
    runs = int(report.notes[0].split(" runs: ")[0].rsplit("(", 1)[1])
    assert runs < world // 2 and report.ran is not None and report.ran < world // 2
    assert _same_report(report, check_spmd(world, _indexing(shape, odd), classes="every"))
    assert [(f.kind, f.ranks) for f in report.findings] == ([] if odd is None else
                                                            [("desync", (odd,))])


def test_a_place_that_differs_past_a_shapes_first_classes_is_found_by_their_neighbours(
) -> None:
    """Law: the one neighbour of each class past a shape's first IN_FULL takes turns over
    the places of its group, so a difference the reads do not record (here from group
    members, read as plain ints), at one place of every class but the first two, is found:
    the check runs every rank, says so, and gives the full check's report."""
    def unrecorded(backend: SpmdBackend) -> None:
        mesh = init_device_mesh("cpu", (8, 8), mesh_dim_names=("a", "b"), backend=backend)
        a = mesh.get_coordinate()[0]  # recorded: one class per value, one shape
        backend.all_reduce((1 + a,), group=mesh.get_group("b"))
        first_of_b, first_of_a = mesh.get_group("b").ranks[0], mesh.get_group("a").ranks[0]
        if first_of_b >= 16 and first_of_a == 5:  # a >= 2 and b == 5, unrecorded
            backend.barrier(group=mesh.get_group("b"))

    report = check_spmd(64, unrecorded, classes="auto")
    assert report.notes[0].startswith("ran every rank: automatic classes could not stand "
                                      "for them (rank "), report.notes
    assert _same_report(report, check_spmd(64, unrecorded, classes="every"))
    assert not report.ok


def test_classes_whose_verification_costs_more_than_half_a_full_run_fall_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: once the runs per class so far, times the classes, pass WORTH of the world's
    runs, the check runs every rank instead, and says so (here WORTH is lowered so that 20
    classes of 512 ranks pass it)."""
    import backend._spmd._classes as classes

    monkeypatch.setattr(classes, "WORTH", 0.05)
    report = check_spmd(512, _sliced(512, 20), classes="auto")
    assert report.notes[0].startswith("ran every rank: verifying the 20 classes would take "
                                      "about "), report.notes
    assert "more than half of running the 512 ranks" in report.notes[0]
    assert report.ran == 512
    assert _same_report(report, check_spmd(512, _sliced(512, 20), classes="every"))


def test_a_program_that_behaves_differently_on_a_sym_falls_back() -> None:
    """A type test sees through no recording: the plain re-run of the representative
    differs from its symbolic run, and the check runs every rank."""
    def typed(backend: SpmdBackend) -> None:
        mesh = init_device_mesh("cpu", (8,), mesh_dim_names=("w",), backend=backend)
        size = 4 if isinstance(backend.rank, int) else 5
        backend.all_reduce((size,), group=mesh.get_group("w"))

    report = check_spmd(8, typed, classes="auto")
    assert report.ok
    assert report.notes[0].startswith("ran every rank: automatic classes could not stand for "
                                      "them (rank 0 runs differently on plain ints")


def test_the_default_is_automatic_above_1024_ranks_and_every_rank_below() -> None:
    assert check_spmd(1024, titan_step).ran == 1024
    big = check_spmd(2048, titan_step)
    assert big.ok and big.ran is not None and big.ran < 200
    assert big.notes[0].startswith("automatic classes: 4 by what each rank's program reads; ")


@pytest.mark.parametrize("bad", ["some", 3, ("auto",)])
def test_a_bad_classes_is_a_typed_refusal(bad: Any) -> None:
    with pytest.raises(BackendConfigError, match="classes must be 'auto', 'every', None or"):
        check_spmd(4, titan_step, classes=bad)


# ---- the derivation --------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore")
def test_the_fast_derivation_is_the_reference_derivation() -> None:
    """Law: for random valid programs, deriving each rank's run from rank 0's with shared
    groups (``Deriver``) gives, event by event, what ``_reduce.derive`` gives."""
    from backend._spmd._check import _recorders
    from backend._spmd._run import run_rank

    warnings.filterwarnings("ignore")
    for seed in range(40):
        g = program(seed, max_world=32, torch_share=0.0)
        make, _ = _recorders(g.check["backend"], False)
        rec = make(g.world, 0)
        run_rank(g.program, rec, 10.0)
        if rec.trace.error or any(not (e.group.world or e.group.spec) for e in rec.trace.events
                                  if hasattr(e, "group")):
            continue
        deriver = Deriver(g.world)
        for r in range(g.world):
            assert same(deriver.trace(rec.trace, r), derive(rec.trace, r)) is None, g.words


def test_a_coordinate_table_covers_every_rank_of_the_universe() -> None:
    reads = Reads(13)
    coord = reads.coordinate(_VIEW, _VIEW.coordinate(13), depth=2)
    assert coord is not None
    _ = coord[2] == 5
    np.testing.assert_array_equal(
        Evaluator(96).matching(reads, np.arange(96)),
        [_VIEW.coordinate(r)[2] == 5 for r in range(96)])


def test_rank_77777_of_131072_is_a_class_of_its_own_and_the_stages_the_others() -> None:
    """The classes of the titan step at 131,072 ranks with rank 77,777 planted (read as
    ``backend.rank``): one per pipeline stage, the planted rank's stage less that rank, and
    the rank alone; found from five runs (the derivation and the replay of every rank are
    the bench's: ``python bench/check_spmd.py --large``)."""
    from backend._spmd._classes import _place
    from backend._spmd._run import run_rank

    world = 1 << 17
    prog = functools.partial(titan_step, odd_rank=77777)

    def run(rank: int, reads: Reads | None) -> Any:
        recorder = SpmdBackend(world, rank)
        recorder.reads = reads
        run_rank(prog, recorder, 60.0)
        return recorder.trace

    found, ran = _place(world, run)
    assert not isinstance(found, str) and found is not None
    assert ran == 5
    assert [(int(c.members[0]), len(c.members)) for c in found] == [
        (0, 32768), (32768, 32768), (65536, 32767), (77777, 1), (98304, 32768)]
    assert 77777 not in found[2].members.tolist()


def _flattened(backend: Any) -> None:
    mesh = init_device_mesh("cpu", (4, 4, 4), mesh_dim_names=("pp", "dp", "tp"),
                            backend=backend)
    flat = mesh[("dp", "tp")]._flatten("dptp")
    backend.all_reduce((4,), group=flat.get_group())
    backend.all_reduce((2,), group=mesh.get_group("tp"))


def test_ranks_run_one_by_one_keep_one_list_of_a_groups_members() -> None:
    """Every rank run on plain ints keeps its own trace; the members of a group it lists
    are kept once for the group, not once per member (20014 at 65,536 ranks fell back to
    running every rank and went past 17 GB holding a list per member of each group)."""
    from backend._spmd._check import _Runs

    runs = _Runs(64, _flattened, lambda w, r: SpmdBackend(w, r, "gloo"), None, 10.0, None)
    assert runs.every("every") == 64
    events = [e for t in runs.traces if t is not None for e in t.events]
    refs = {id(e.group) for e in events if isinstance(e, Call) and e.group.label == "dptp"}
    members = {id(e.members) for e in events if isinstance(e, Create) and
               e.group.label == "dptp"}
    tp = {id(e.group) for e in events if isinstance(e, Call) and e.group.label == "tp"}
    assert (len(refs), len(members), len(tp)) == (4, 4, 16)  # one per group
    assert check_spmd(64, _flattened, classes="every").ok

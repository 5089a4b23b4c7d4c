"""check_spmd v2 (issue 27): the hangs of a parallel program found before launch.

The corpus (``tests/spmd_corpus.py``) holds a minimal program per class of the issue (1
collective mismatch, 2 cache hit against split, 3 hidden parent-wide split, 4 after a
failure, 5 uneven ranks per host, 6 communicator resources) and bad input, each with its
verdict, written by hand; its classes 1-3 also run for real on Gloo
(``tests/test_check_spmd_gloo.py``).  Here: every verdict, the words of each kind of
report (expected texts written out from the planted fault), reports at 1,024 ranks, the
``classes=`` reduction against the full check, bad input, and two properties over random
programs (``tests/spmd_programs.py``): no false positive on valid ones, a planted desync
always found.  The run of 10^4 random programs is a benchmark: ``python bench/check_spmd.py --valid
10000`` (its figures in ``bench/README.md``).
"""

from __future__ import annotations

import functools
import inspect
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from spmd_corpus import CASES, verdict
from spmd_programs import program, titan_step

from backend import (
    FINDING_KINDS,
    BackendConfigError,
    Finding,
    SpmdBackend,
    check_spmd,
    init_device_mesh,
)
from mesh import Topology


def _line(fn: Any, text: str) -> str:
    """``spmd_corpus.py:N``: where ``text`` is in ``fn``'s source."""
    lines, start = inspect.getsourcelines(fn)
    return f"spmd_corpus.py:{start + next(i for i, s in enumerate(lines) if text in s)}"


def _case(name: str) -> Any:
    return next(c for c in CASES if c.name == name)


def _report(name: str) -> Any:
    c = _case(name)
    return check_spmd(c.world, c.program, **c.check)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_corpus_program_gets_its_verdict(case: Any) -> None:
    report = check_spmd(case.world, case.program, **case.check)
    assert verdict(report) == case.expect, str(report)
    assert report.ok == (not case.expect)
    assert len(str(report)) < 4000
    for finding in report.findings:
        assert isinstance(finding, Finding) and finding.kind in FINDING_KINDS
        assert finding.text in str(report) or "more alike" in str(report)


def test_the_corpus_covers_every_class_with_a_fixed_twin() -> None:
    classes = {c.cls for c in CASES if c.expect}
    assert classes >= {1, 2, 3, 4, 5, 6}
    assert sum(not c.expect for c in CASES) >= 8  # valid twins


def test_every_kind_of_finding_is_met_in_the_corpus() -> None:
    expected = set().union(*(c.expect for c in CASES)) - {"never_created", "deadlock", "error"}
    assert expected == set(FINDING_KINDS)
    with pytest.raises(TypeError):
        FINDING_KINDS["mine"] = "a kind of my own"  # type: ignore[index]


# ---- the words of the reports -------------------------------------------------------------

def test_a_desync_names_the_group_and_each_sides_first_call() -> None:
    at = _line(_case("shape").program, "dist.all_reduce(torch.ones(n)")
    report = _report("shape")
    assert str(report).splitlines()[1] == (
        f"- the 'tp' group (2, 3) desyncs at its 1st call: rank 2 all_reduce (8,) float32 sum "
        f"({at}); rank 3 all_reduce (4,) float32 sum ({at}) (each side's first differing "
        "call)")
    (finding,) = report.findings
    assert finding.kind == "desync" and finding.ranks in ((2,), (3,))


def test_a_send_without_its_recv_names_the_pair() -> None:
    at = _line(_case("send without recv").program, "dist.send(")
    text = str(_report("send without recv"))
    assert (f"rank 0's 1st send to rank 1 on the world group (0, 1) (send (8,) float32 to 1, "
            f"{at}) has no matching recv at rank 1: the sender waits for it") in text


def test_a_ring_of_blocking_sends_is_a_deadlock_naming_each_wait() -> None:
    report = _report("send ring")
    assert [r for r, _, _ in report.waiting[0]] == [0, 1, 2]
    assert "rank 2 waits in send (8,) float32 to 0 on the world group (0, 1, 2)" in str(report)


def test_a_cache_hit_names_the_rank_that_skips_and_the_peers_that_wait() -> None:
    text = str(_report("cache hit against split"))
    at = _line(_case("cache hit against split").program, "_adopting(backend, (0,))")
    assert ("rank 0 already holds its 'tp' group (0, 1) (adopted with from_group, asked at "
            in text)
    assert "skips the split of dim 'tp' over the world, which ranks (1, 2, 3) enter" in text
    assert at.startswith("spmd_corpus.py:")


def test_a_hidden_split_names_the_group_and_the_ranks_outside() -> None:
    text = str(_report("hidden split of a members-only group"))
    at = _line(_case("hidden split of a members-only group").program, "copy.get_group()")
    assert (f"the 'tp_copy' group (0, 1, 2, 3) is created by its members only ({at}), but on a "
            "device-bound NCCL world torch creates it with ncclCommSplit over the default "
            "group, which all 8 ranks must enter; the 4 ranks outside it never do") in text


def test_a_subset_new_group_names_each_sides_call() -> None:
    text = str(_report("new_group by a subset"))
    assert "ranks (0, 1) new_group([0, 1])" in text and "rank 2 new_group([0, 1, 2])" in text


@pytest.mark.parametrize(("name", "words"), [
    ("destroy instead of abort", "destroys the 'tp' group (4, 5, 6, 7) ({at}) after a failure: "
                                 "it holds lost rank 7, and NCCL's destroy waits for every peer"),
    ("shrink from outside", "rank 7 calls shrink_group on the 'tp' group (4, 5, 6, 7) ({at}) "
                            "though the shrink excludes it"),
    ("group used after rebind", "calls all_reduce on the 'tp' group (4, 5, 6, 7) ({at}), which "
                                "was ended by the rebind at"),
    ("revoke not awaited", "shrinks the 'tp' group (4, 5, 6, 7) ({at}) before the revoke it "
                           "started at"),
])
def test_each_lifecycle_break_is_named(name: str, words: str) -> None:
    anchor = {"destroy instead of abort": "backend.destroy_process_group(tp)",
              "shrink from outside": "backend.shrink_group([7], tp)",
              "group used after rebind": "backend.all_reduce((8,), group=tp)  #",
              "revoke not awaited": "backend.shrink_group([7], tp)"}[name]
    text = str(_report(name))
    assert words.format(at=_line(_case(name).program, anchor)) in text, text


def test_the_machine_models_name_hosts_domains_and_budgets() -> None:
    text = str(_report("uneven ranks per host"))
    assert "the 'sp' communicator of 6 ranks has 4 + 2 ranks on its 2 hosts (host0: 4, " \
           "host1: 2)" in text and "NVIDIA/nccl #2385" in text
    text = str(_report("NVLS slots"))
    # 4 + 2 + 2 + 4 + 4 groups of the five families, and the world: 17 in the one domain
    assert "NVLink domain 0 (ranks 0 to 7) holds 17 communicators using NVLS" in text
    assert "about 170 multicast groups" in text and "128 slots" in text
    text = str(_report("communicators over budget"))
    # the world, a, b, c, and the (4, 2) plan's d (e is c's family): 5 per rank
    assert "hold up to 5 communicators, over the budget of 4 per rank" in text


def test_gloo_and_nccl_differ_where_only_nccl_splits() -> None:
    """A tagged group made by its members is fine on Gloo, a hang on NCCL (class 3)."""
    c = _case("hidden split of a members-only group")
    assert check_spmd(c.world, c.program, backend="gloo").ok
    assert "hidden_split" in check_spmd(c.world, c.program, backend="nccl").kinds()


def test_uneven_hosts_are_checked_only_with_a_topology_and_for_nccl() -> None:
    c = _case("uneven ranks per host")
    assert check_spmd(c.world, c.program, backend="nccl").ok
    assert check_spmd(c.world, c.program, backend="gloo", topology=Topology(12, 4)).ok


# ---- at 1,024 ranks ---------------------------------------------------------------------------

def test_a_desync_in_every_tp_group_at_1024_ranks_is_one_short_line() -> None:
    """The ranks at tp coordinate 1 all-reduce a wrong shape once (titan_step's bug=1)."""
    report = check_spmd(1024, functools.partial(titan_step, bug=1))
    assert [f.kind for f in report.findings] == ["desync"] * 256  # one per tp group
    text = str(report)
    assert len(text) < 4000, len(text)
    assert ("- the 'tp' group (0, 1, 2, 3) desyncs at its 1st call: ranks (0, 2, 3) all_reduce "
            "(1024, 512) float32 sum") in text
    assert "rank 1 all_reduce (1024, 256) float32 sum" in text
    assert "and 255 more alike (in all: every 4th rank from 1 (1, 5, 9, ..., 1021; 256 " \
           "ranks))" in text


# ---- classes=: fewer ranks run ----------------------------------------------------------------

def _stage(rank: int) -> int:
    return rank // 64  # titan_step at 256 ranks: pp = 4 stages of 64


def test_classes_run_a_few_ranks_and_give_the_full_checks_report() -> None:
    def staged(backend: SpmdBackend) -> None:  # stage 2 all-reduces a wrong shape once
        titan_step(backend, bug=None)
        if backend.world_size and _stage(mesh_rank(backend)) == 2:
            backend.all_reduce((3,), group=None)

    for prog in (titan_step, staged):
        full, reduced = check_spmd(256, prog), check_spmd(256, prog, classes=_stage)
        assert reduced.ran is not None and reduced.ran < 256 // 4, reduced.notes
        assert "the others derived" in reduced.notes[0]
        assert (reduced.ok, reduced.findings, reduced.never_created) == \
            (full.ok, full.findings, full.never_created)


def mesh_rank(backend: SpmdBackend) -> int:
    """The rank as a program computes it from its coordinate (no raw read)."""
    mesh = init_device_mesh("cpu", (backend.world_size,), mesh_dim_names=("w",),
                            backend=backend)
    return mesh.get_coordinate()[0]


def test_a_program_its_classes_do_not_describe_falls_back_to_every_rank() -> None:
    """The bug depends on the tp coordinate, the classes on the stage only: a group
    neighbour of the representative differs from its derivation."""
    bug = functools.partial(titan_step, bug=1)
    report = check_spmd(256, bug, classes=_stage)
    assert report.ran == 256
    assert report.notes[0].startswith("ran every rank: classes= could not stand for them "
                                      "(rank 1's event")
    assert report.findings == check_spmd(256, bug).findings


def test_a_program_reading_its_raw_rank_is_run_on_every_rank() -> None:
    def reads(backend: SpmdBackend) -> None:
        titan_step(backend)
        if backend.rank == 200:  # beyond any verifying rank
            backend.all_reduce((3,), group=None)

    report = check_spmd(256, reads, classes=_stage)
    assert report.ran == 256 and "reads its raw rank" in report.notes[0]
    assert "unmatched" in report.kinds()


def test_classes_that_raise_are_refused() -> None:
    with pytest.raises(BackendConfigError, match=r"classes\(0\)"):
        check_spmd(4, titan_step, classes=lambda r: 1 // 0)


# ---- bad input: a clear verdict or a typed error, never a hang of the checker -----------------

def test_an_async_program_is_refused_before_any_rank_runs() -> None:
    ran: list[int] = []

    async def step(backend: SpmdBackend) -> None:
        ran.append(backend.world_size)

    with pytest.raises(BackendConfigError, match=r"asyncio\.run"):
        check_spmd(2, step)
    with pytest.raises(BackendConfigError, match=r"asyncio\.run"):
        check_spmd(2, functools.partial(step))
    assert ran == []


def test_a_looping_program_stops_the_check_at_its_first_rank() -> None:
    ran: list[int] = []

    def loop(backend: SpmdBackend) -> None:
        ran.append(1)
        while True:
            pass

    report = check_spmd(64, loop, rank_timeout=0.2)
    assert ran == [1] and report.kinds() == {"timeout"} and report.ran == 1
    assert "ranks 1 and up did not run" in report.notes[0]


def test_the_first_rank_to_run_may_take_longer_for_its_first_imports() -> None:
    """A program whose first call is slow (imports, caches: 2.5 x the limit) passes; one that
    is that slow on every rank stops at the second rank, the note naming the limit."""
    import time

    from backend._spmd._check import FIRST_RUN_ALLOWANCE

    calls: list[int] = []

    def warm_up_once(backend: SpmdBackend) -> None:
        if not calls:
            time.sleep(0.5)  # 2.5 x the 0.2 s limit: within the first run's allowance
        calls.append(backend.rank)

    assert FIRST_RUN_ALLOWANCE * 0.2 > 0.5
    assert check_spmd(8, warm_up_once, rank_timeout=0.2).ok and len(calls) == 8

    def always_slow(backend: SpmdBackend) -> None:
        time.sleep(0.5)

    report = check_spmd(8, always_slow, rank_timeout=0.2)
    assert report.kinds() == {"timeout"} and report.ran == 2
    assert "rank 1's program ran past its 0.2 s limit" in report.notes[0]


def test_the_time_limit_nests_inside_a_timer_already_set() -> None:
    """pytest-timeout's alarm (or anyone's) is restored, less the time the check took."""
    fired: list[int] = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 50.0)
    try:
        check_spmd(2, _case("a program that loops").program, rank_timeout=0.2)
        handler, (left, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(
            signal.ITIMER_REAL)
        assert handler is not None and handler not in (signal.SIG_DFL, signal.SIG_IGN)
        assert 45.0 < left < 50.0 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_check_run_off_the_main_thread_stops_a_loop_too() -> None:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(
        check_spmd(4, _case("a program that loops").program, rank_timeout=0.2)))
    t.start()
    t.join(10)
    assert not t.is_alive() and out[0].kinds() == {"timeout"}


_TRACED_AFTER = """
import sys, threading
from backend import check_spmd

def loop(backend):
    while True:
        pass

out = []
t = threading.Thread(target=lambda: out.append(check_spmd(2, loop, rank_timeout=0.2)))
t.start()
t.join(20)
events = []

def trace(frame, event, arg):
    events.append(event)
    return trace

def traced():
    return 1

sys.settrace(trace)
traced()
sys.settrace(None)
print(sorted(out[0].kinds()), "call" in events)
"""


def test_code_traced_after_a_check_off_the_main_thread_still_runs() -> None:
    """The watchdog that stopped the loop leaves nothing pending: on CPython 3.11, clearing a
    thread's asynchronous exception (``PyThreadState_SetAsyncExc(id, NULL)``) left the eval
    breaker set, and the next function run under ``sys.settrace`` (coverage, a debugger,
    ``tests/work_bound.py``) looped for ever.  In a subprocess, so that a regression fails
    by its timeout instead of hanging the suite."""
    out = subprocess.run([sys.executable, "-c", _TRACED_AFTER], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.stdout.strip() == "['timeout'] True", out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"topology": Topology(8, 4)}, "places 8 ranks"),
    ({"topology": "8x4"}, "mesh.Topology"),
    ({"nvls_slots": 0}, "nvls_slots"),
    ({"communicators": 2.0}, "communicators"),
    ({"rank_timeout": float("nan")}, "rank_timeout"),
    ({"rank_timeout": True}, "rank_timeout"),
    ({"torch": "yes"}, "torch must be"),
    ({"classes": 3}, "classes must be"),
])
def test_bad_arguments_are_typed_refusals(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(BackendConfigError, match=words):
        check_spmd(4, titan_step, **kwargs)


def test_a_torch_check_refuses_a_process_whose_world_is_up() -> None:
    from backend import TorchFakeBackend

    tb = TorchFakeBackend(2, 0)
    try:
        with pytest.raises(BackendConfigError, match="already initialized"):
            check_spmd(2, titan_step, torch=True)
    finally:
        tb.shutdown()


# ---- properties over random programs ----------------------------------------------------------

@pytest.mark.filterwarnings("ignore")
def test_random_valid_programs_pass() -> None:
    """Law: a program that asks every rank for the same groups in the same order and issues
    the same calls on them (shapes equal within each group, p2p in chains, all_to_all sizes
    that pair up; under NCCL only families it splits) gets an ok report.  120 seeded
    programs here (worlds of 4 to 32, a tenth at the torch level); the run of 10^4 is
    ``python bench/check_spmd.py --valid 10000``."""
    bad = []
    for seed in range(120):
        g = program(seed, max_world=32)
        report = check_spmd(g.world, g.program, **g.check)
        if not report.ok:
            bad.append(f"{g.words}\n{report}")
    assert not bad, "\n\n".join(bad[:3])


@pytest.mark.filterwarnings("ignore")
def test_a_planted_desync_is_always_found() -> None:
    """Law: the same programs with one rank giving one collective on a group of two or more
    another op and shape are reported with a desync (where the bug could be planted: a
    call on such a group at or after the chosen one)."""
    missed, planted = [], 0
    for seed in range(1000, 1060):
        g = program(seed, max_world=32, plant=True)
        report = check_spmd(g.world, g.program, **g.check)
        planted += bool(g.planted)
        if g.planted and "desync" not in report.kinds():
            missed.append(f"{g.words}\n{report}")
    assert not missed, "\n\n".join(missed[:3])
    assert planted >= 40

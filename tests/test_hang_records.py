"""Reading a hung job's flight-recorder dumps (:func:`mesh.read_flight_records`) without
processes: hand-written dumps in torch 2.13's format (``tests/hang_synth.py``).  What is
read and how it is worded; bad input (truncated, foreign, hostile, oversized, mixed-job or
other-version dumps, a plan that does not fit) is a :class:`mesh.FlightRecordError` naming
it, or a mismatch the report lists, never another exception."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest
from hang_synth import dump, step, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mesh import FlightRecordError, HangFinding, HangReport, MeshView, Topology, read_flight_records
from mesh._hang._records import MAX_DUMP_BYTES, MAX_DUMP_ENTRIES

VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))


def _skip_job(tmp: Path, *, as_json: bool = False) -> list[str]:
    """8 ranks, 3 steps; rank 5 skips its 3rd tp all_reduce and its program ends."""
    calls = {r: step(3) for r in range(8)}
    calls[5] = [*step(2), ("dp", "all_reduce", (16,))]
    waiting_tp = {4, 6, 7}  # they wait at the 3rd tp call; their dp peers wait behind them
    for r in waiting_tp:
        calls[r] = [*step(2), ("tp", "all_reduce", (4, 8))]
    return write(tmp, {r: dump(VIEW, r, c) for r, c in calls.items()}, as_json=as_json)


def test_a_skipped_call_names_the_group_by_dim_and_coordinate_and_the_skipper(
        tmp_path: Path) -> None:
    report = read_flight_records(_skip_job(tmp_path), {"train": VIEW},
                                 topology=Topology(8, 4))
    [finding] = report.findings
    assert isinstance(finding, HangFinding)
    assert (finding.kind, finding.group.dim, finding.group.members, finding.ranks) == \
        ("unmatched", "tp", (4, 5, 6, 7), (5,))
    assert finding.group.coordinate == (("dp", 1),)
    assert "rank 5 (dp=1, tp=1; host host1)" in finding.text
    assert "its 3rd call (all_reduce (4, 8) float32, seq 3)" in finding.text
    assert {b.rank for b in report.blocked} == {0, 2, 3}  # their dp peers 4, 6, 7 wait
    assert report.suspects == (5,)
    assert str(report).splitlines()[1] == "look first at rank 5 (host1)"


def test_json_dumps_read_as_the_pickles_do(tmp_path: Path) -> None:
    pickles = read_flight_records(_skip_job(tmp_path / "p"), VIEW)
    jsons = read_flight_records(_skip_job(tmp_path / "j", as_json=True), VIEW)
    assert jsons.findings == pickles.findings and jsons.blocked == pickles.blocked


def test_a_folder_reads_as_its_dumps(tmp_path: Path) -> None:
    paths = _skip_job(tmp_path)
    assert read_flight_records([str(tmp_path)], VIEW).findings == \
        read_flight_records(paths, VIEW).findings


def test_a_shape_desync_names_both_sides_and_the_first_differing_call(tmp_path: Path) -> None:
    calls = {r: step(2) for r in range(8)}
    calls[2] = [*step(1), ("tp", "all_reduce", (8, 4)), ("dp", "all_reduce", (16,))]
    report = read_flight_records(write(tmp_path, {r: dump(VIEW, r, c) for r, c in
                                                  calls.items()}), VIEW)
    [finding] = report.findings
    assert (finding.kind, finding.group.members, finding.ranks) == ("desync", (0, 1, 2, 3), (2,))
    assert "desyncs at its 2nd call (seq 2): ranks (0, 1, 3) all_reduce (4, 8) float32; " \
           "rank 2 all_reduce (8, 4) float32" in finding.text


def test_a_job_without_a_hang_reports_none(tmp_path: Path) -> None:
    report = read_flight_records(write(tmp_path, {r: dump(VIEW, r, step(2)) for r in range(8)}),
                                 VIEW)
    assert report.ok and report.findings == () and "no hang in the records" in str(report)


def _error(paths: list[str], views: object = VIEW) -> str:
    with pytest.raises(FlightRecordError) as e:
        read_flight_records(paths, views)  # type: ignore[arg-type]  # bad input on purpose
    return str(e.value)


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch PWNED",))


def test_a_pickle_naming_code_is_refused_without_running_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fr_trace_rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Boom()]}))
    monkeypatch.chdir(tmp_path)  # where the code would write; the next tests run where they were
    assert "names the object posix.system" in _error([str(path)]) or \
        "names the object os.system" in _error([str(path)])
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(("data", "words"), [
    (pickle.dumps({"version": "2.10", "entries": []})[:-5], "cannot be decoded"),
    (pickle.dumps([1, 2, 3]), "holds list, not a dict"),
    (b"\x00\x01garbage", "cannot be decoded"),
    (b"{\"version\": \"2.10\"", "cannot be decoded"),
    (pickle.dumps({"entries": []}), "lacks 'version'"),
    (pickle.dumps({"version": "2.4", "entries": []}), "its format is '2.4'"),
    (pickle.dumps({"version": "2.10", "entries": [{"process_group": 5}]}), "process_group"),
    (pickle.dumps({"version": "2.10", "entries": [None] * (MAX_DUMP_ENTRIES + 1)}),
     "at most 65,536 calls"),
    (b"[" * 100_000 + b"]" * 100_000, "cannot be decoded"),
])
def test_a_file_that_is_no_dump_is_refused_naming_why(tmp_path: Path, data: bytes,
                                                       words: str) -> None:
    path = tmp_path / "fr_trace_rank_0"
    path.write_bytes(data)
    assert words in _error([str(path)])


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "fr_trace_rank_0"
    with open(path, "wb") as f:
        f.truncate(MAX_DUMP_BYTES + 1)  # sparse: nothing written, nothing read
    assert "more than the 67,108,864 a dump may have" in _error([str(path)])


def test_a_name_without_a_rank_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.pkl"
    path.write_bytes(pickle.dumps(dump(VIEW, 0, step(1))))
    assert "must end in its rank" in _error([str(path)])


def test_two_dumps_of_one_rank_are_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a", {3: dump(VIEW, 3, step(1))})
    b = write(tmp_path / "b", {3: dump(VIEW, 3, step(1))})
    assert "two dumps of rank 3" in _error(a + b)


def test_dumps_of_different_formats_or_days_are_not_one_job(tmp_path: Path) -> None:
    mixed = _versions_mixed(tmp_path)  # the older file alone is unreadable: a partial report
    report = read_flight_records(mixed, VIEW)
    assert report.partial and len(report.unreadable) == 1 and report.dumped == (0,)
    assert mixed[1] in report.unreadable[0] and "its format is '2.9'" in report.unreadable[0]
    days = write(tmp_path / "d", {0: dump(VIEW, 0, step(1)),
                                  1: dump(VIEW, 1, step(1), t0=10**18 + 3 * 86_400 * 10**9)})
    assert "hours apart: these dumps are not of one hang of one job" in _error(days)


def _versions_mixed(tmp_path: Path) -> list[str]:
    return write(tmp_path / "m", {0: dump(VIEW, 0, step(1)),
                                  1: dump(VIEW, 1, step(1), version="2.9")})


def test_a_newer_format_is_read_and_noted_and_a_mix_refused(tmp_path: Path) -> None:
    newer = write(tmp_path / "n", {r: dump(VIEW, r, step(1), version="2.11") for r in range(8)})
    report = read_flight_records(newer, VIEW)
    assert report.ok and report.notes == (
        "the dumps' format 2.11 is newer than 2.10, which this release was checked on (torch "
        "2.13 to 2.15): read as that, field by field",)
    mixed = write(tmp_path / "x", {0: dump(VIEW, 0, step(1)),
                                   1: dump(VIEW, 1, step(1), version="2.11")})
    assert "different torch versions" in _error(mixed)


def test_a_plan_that_does_not_fit_the_job_is_said_so(tmp_path: Path) -> None:
    paths = _skip_job(tmp_path)
    words = _error(paths, MeshView.from_shape(8, ("x",)))
    assert "the plan does not match the job" in words
    assert "(group_desc 'mesh_tp') with calls from ranks (0, 1, 2, 3) is no group of the " \
           "plan (its dims: mesh.x)" in words  # the first mismatch, before any finding
    # a plan of fewer ranks than the dumps: refused, naming the first dump past it, before
    # any finding (it gave findings under the wrong plan, the mismatch listed after them)
    words = _error(paths, MeshView.from_shape((2, 2), ("dp", "tp")))
    assert "the plan does not match the job" in words and "the plan has 4 ranks" in words


def test_a_plan_whose_groups_are_larger_than_the_jobs_is_refused(tmp_path: Path) -> None:
    """The dumps of a (dp=2, tp=4) job read under (dp=4, tp=2) name their groups "mesh_dp" and
    "mesh_tp" alike: the job's tp groups (0..3) do not fit the plan's (0, 1); read under a
    plan whose dp is the job's but whose tp is all 8 ranks, two of the job's tp groups, with
    no rank in common, land on the plan's one.  Both are refused before any finding."""
    paths = _skip_job(tmp_path)
    words = _error(paths, MeshView.from_shape((4, 2), ("dp", "tp")))
    assert "the plan does not match the job" in words and "'mesh_tp'" in words, words
    words = _error(paths, {"job": MeshView.from_shape((2, 4), ("dp", "x")),
                           "wide": MeshView.from_shape((8,), ("tp",))})
    assert "both land on the 'tp' group" in words, words
    assert "the job's groups are smaller than the plan's" in words


def test_bad_arguments_are_typed_errors(tmp_path: Path) -> None:
    assert "wrap it in a list" in _error("fr_trace_rank_0")  # type: ignore[arg-type]  # on purpose
    assert "no dump files given" in _error([])
    assert "a mesh.MeshView or a non-empty mapping" in _error(["x0"], {"a": 1})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 4000),
                                                          st.integers(0, 255)), max_size=8),
       as_json=st.booleans())
def test_any_damaged_dump_is_read_or_refused_in_bounded_time(tmp_path: Path, cut: int,
                                                             flips: list[tuple[int, int]],
                                                             as_json: bool) -> None:
    """Law: a dump truncated anywhere and with any bytes changed gives a report or a
    FlightRecordError, never another exception, within seconds (work bounded by its size)."""
    folder = tmp_path / f"f{cut}-{len(flips)}-{as_json}"
    paths = write(folder, {r: dump(VIEW, r, step(2)) for r in range(8)}, as_json=as_json)
    data = bytearray(Path(paths[5]).read_bytes())
    for at, byte in flips:
        data[at % len(data)] = byte
    Path(paths[5]).write_bytes(bytes(data[:cut]) if cut < len(data) else bytes(data))
    start = time.monotonic()
    try:
        out: object = read_flight_records(paths, VIEW)
    except FlightRecordError as e:
        out = e
    assert isinstance(out, (HangReport, FlightRecordError)), out
    assert time.monotonic() - start < 5.0  # bounded by its size (a loaded machine: slack)


@pytest.mark.parametrize(("args", "words"), [
    (["--dims", "dp=2,tp=4"], "is not a flight-recorder dump: it cannot be decoded"),
    ([], "give the job's plan: --plan FILE or --dims"),
    (["--dims", "dp=2,tp=4", "--plan", "examples/hang/plan.py"], "one of them"),
    (["--dims", "x=8"], None),  # the good dumps against a plan without their dims
])
def test_the_command_refuses_bad_input_with_a_message_and_status_2(
        tmp_path: Path, args: list[str], words: str | None) -> None:
    import subprocess
    import sys

    paths = _skip_job(tmp_path)
    if words is not None and "decoded" in words:  # every dump garbage: nothing to report
        for path in paths:
            Path(path).write_bytes(b"\x80\x04garbage")
    out = subprocess.run([sys.executable, "-m", "mesh", "hang", *paths, *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (words or "the plan does not match the job") in out.stderr


def test_members_an_nccl_dump_lists_place_a_hand_made_group(tmp_path: Path) -> None:
    """A group with a desc of its own (not the facade's ``mesh_<dim>``) is the plan's group
    whose members ``pg_config`` lists, though only some of them recorded calls."""
    dumps = {}
    for r in (0, 1):  # ranks 2 and 3 of the 'tp' group (0, 1, 2, 3) never call on it
        data = dump(VIEW, r, [("tp", "all_reduce", (4, 8))])
        for e in data["entries"]:
            e["process_group"] = ("7", "my_tp")
        data["pg_config"] = {"7": {"name": "7", "desc": "my_tp", "ranks": "[0, 1, 2, 3]"}}
        dumps[r] = data
    report = read_flight_records(write(tmp_path, dumps), VIEW)
    [finding] = report.findings
    assert (finding.group.dim, finding.group.by, finding.ranks) == ("tp", "members", (2, 3))
    data = dumps[0]
    data["pg_config"]["7"]["ranks"] = "[0, 1, 5]"  # members no group of the plan has
    words = _error(write(tmp_path / "b", {0: data}))
    assert "members (0, 1, 5) in pg_config is no group of the plan" in words


def test_two_ranks_that_swap_the_order_of_their_calls_are_named_not_their_partners(
        tmp_path: Path) -> None:
    """Ranks 1 and 4 issue their 2nd dp call before their 2nd tp call; the 6 others the other
    way round.  Ranks 0, 1, 5, 4 wait in a cycle, each for the next; the others' order names
    1 and 4 (they went past the tp call), not their partners 0 and 5, which merely wait in
    those tp groups (all four were named, "the ranks wait on each other")."""
    tail = {0: "tp", 1: "dp", 5: "tp", 4: "dp", 2: "tp", 3: "tp", 6: "tp", 7: "tp"}
    dumps = {r: dump(VIEW, r, [*step(1), (dim, "all_reduce", (4, 8) if dim == "tp" else (16,))])
             for r, dim in tail.items()}
    report = read_flight_records(write(tmp_path, dumps), VIEW)
    assert {(f.group.dim, f.group.members, f.ranks) for f in report.findings} == {
        ("tp", (0, 1, 2, 3), (1,)), ("tp", (4, 5, 6, 7), (4,))}
    assert all(f.causes == ("went past",) for f in report.findings)
    assert report.suspects == (1, 4)


def test_ranks_that_wait_on_each_other_in_an_even_split_are_each_named(tmp_path: Path) -> None:
    """Half the ranks issue tp before dp at their 2nd step, half the other way round: no order
    is the program's, so every stuck group is a finding, worded as a cycle."""
    tail = {0: "tp", 1: "dp", 2: "tp", 3: "dp", 4: "dp", 5: "tp", 6: "dp", 7: "tp"}
    dumps = {r: dump(VIEW, r, [*step(1), (dim, "all_reduce", (4, 8) if dim == "tp" else (16,))])
             for r, dim in tail.items()}
    report = read_flight_records(write(tmp_path, dumps), VIEW)
    assert report.findings and report.blocked == ()
    assert all(set(f.causes) == {"cycle"} for f in report.findings)
    assert all("the ranks wait on each other" in f.text for f in report.findings)
    assert set(report.suspects) == set(range(8))


@pytest.mark.parametrize("backend", ["nccl2", "nccl-legacy", "nccl"])
def test_torch_2_15s_nccl_names_read_as_gloos(tmp_path: Path, backend: str) -> None:
    """Torch 2.15's ``nccl`` is torchcomms' ``nccl2``, whose flight-recorder hook names a call
    ``nccl2:all_reduce`` (``nccl-legacy`` keeps the old backend): a call is read by its op,
    whatever backend names it, so the report is the one of the same job on Gloo."""
    calls = {r: step(3) for r in range(8)}
    calls[5] = [*step(2), ("dp", "all_reduce", (16,))]
    gloo = read_flight_records(write(tmp_path / "gloo", {r: dump(VIEW, r, c)
                                                         for r, c in calls.items()}), VIEW)
    other = read_flight_records(write(tmp_path / backend, {
        r: dump(VIEW, r, c, backend=backend) for r, c in calls.items()}), VIEW)
    assert other.findings == gloo.findings and other.blocked == gloo.blocked
    [finding] = other.findings
    assert (finding.kind, finding.ranks) == ("unmatched", (5,))
    assert "all_reduce (4, 8) float32" in finding.text


@pytest.mark.parametrize("op", ["all_to_all_single", "all_to_all"])
def test_uneven_all_to_all_sizes_are_no_desync(tmp_path: Path, op: str) -> None:
    """An all_to_all's members send buffers of their own sizes (uneven splits): as torch's
    analyzer (2.15's ``_UNEVEN_COLLECTIVES``), its shapes are not compared, and a job whose
    members all entered it is no hang; its dtypes and every other op's shapes still are."""
    calls = {r: [*step(1), ("tp", op, (4 + r % 4,))] for r in range(8)}
    report = read_flight_records(write(tmp_path / "a", {r: dump(VIEW, r, c, backend="nccl2")
                                                        for r, c in calls.items()}), VIEW)
    assert report.ok and report.findings == ()
    other = {r: dump(VIEW, r, c, backend="nccl2") for r, c in calls.items()}
    other[2]["entries"][-1]["input_dtypes"] = ["BFloat16"]  # rank 2's all_to_all
    [finding] = read_flight_records(write(tmp_path / "b", other), VIEW).findings
    assert (finding.kind, finding.ranks) == ("desync", (2,)) and "bfloat16" in finding.text


def test_one_unreadable_dump_among_many_is_a_line_and_the_others_are_read(tmp_path: Path) -> None:
    """Issue: one bad file among N aborted the whole report.  Now it is named, with why, the
    report says it is partial, and what the other dumps show is found as without it."""
    paths = _skip_job(tmp_path)
    whole = read_flight_records(paths, VIEW)
    broken = next(p for p in paths if p.endswith("0") or p.endswith("0.pkl"))
    Path(broken).write_bytes(b"\x80\x04junk")
    report = read_flight_records(paths, VIEW)
    assert report.partial and not whole.partial and len(report.unreadable) == 1
    assert report.unreadable[0].startswith(broken) or broken in report.unreadable[0]
    assert 0 in report.no_dump and 0 not in report.dumped
    assert [f.ranks for f in whole.findings] == [(5,)]
    assert (5,) in [f.ranks for f in report.findings]  # the culprit is still found
    text = str(report)
    assert "partial: 1 of 8 dumps could not be read" in text and broken in text
    assert report.to_dict()["partial"] is True and report.to_dict()["unreadable"] == \
        list(report.unreadable)


def test_when_no_dump_can_be_read_the_call_is_refused_naming_the_first(tmp_path: Path) -> None:
    paths = _skip_job(tmp_path)
    for p in paths:
        Path(p).write_bytes(b"junk")
    assert f"none of the 8 dumps could be read; the first: {paths[0]}" in _error(paths) or \
        "none of the 8 dumps could be read" in _error(paths)


def test_the_command_adds_4_to_its_exit_status_when_the_report_is_partial(tmp_path: Path) -> None:
    import subprocess
    import sys

    for folder, calls in (("hung", None), ("calm", 2)):
        paths = _skip_job(tmp_path / folder) if calls is None else \
            write(tmp_path / folder, {r: dump(VIEW, r, step(calls)) for r in range(8)})
        Path(paths[3]).write_bytes(b"junk")
        report = read_flight_records(paths, VIEW)
        run = subprocess.run([sys.executable, "-m", "mesh", "hang", *paths, "--dims", "dp=2,tp=4"],
                             capture_output=True, text=True, timeout=120, check=False)
        assert report.partial and run.returncode == (0 if report.ok else 1) | 4, \
            run.stdout + run.stderr


def test_a_host_whose_dumps_were_not_given_is_said_so_and_the_culprit_still_found(
        tmp_path: Path) -> None:
    """Issue 45: the dumps of host 1 only (ranks 4-7; a folder per host, as docs suggest) of
    the job where rank 5 skips its 3rd tp call.  Ranks 0-3 are "no dump given", never "died";
    rank 5 is still the one to look at (its newest call, on the dp group it shares with rank
    1, went through unless rank 1 did not come: both possibilities said); before, the ranks
    without a dump were blamed and rank 5 was only "waited for"."""
    paths = [p for p in _skip_job(tmp_path) if int(p.rsplit("_", 1)[1]) >= 4]
    report = read_flight_records(paths, VIEW, topology=Topology(8, 4))
    assert report.suspects == (5,) and report.no_dump == (0, 1, 2, 3)
    [finding] = report.findings
    assert finding.group.dim == "tp" and finding.ranks == (5,)
    assert "unless rank 1 (no dump given) did not come" in finding.text
    text = str(report)
    assert "no dump given for ranks (0, 1, 2, 3)" in text and "died, or" not in text


def test_a_rank_whose_host_mates_gave_dumps_is_a_possible_cause_worded_so(
        tmp_path: Path) -> None:
    """Rank 5's dump alone is missing (its host-mates' are there): it may have died, so it is
    named in the group it never entered, worded as what the dumps cannot tell."""
    paths = [p for p in _skip_job(tmp_path) if not p.endswith("_5")]
    report = read_flight_records(paths, VIEW, topology=Topology(8, 4))
    assert 5 in report.suspects
    assert any("no dump was given for it: it died, hangs elsewhere, or its dump was not "
               "collected" in f.text for f in report.findings), str(report)


def test_in_a_two_member_group_the_order_swapper_is_found_by_the_other_groups(
        tmp_path: Path) -> None:
    """Issue 45: rank 5 swaps the order of two dp all_reduces; its dp group (1, 5) has two
    members, one on each side of the desync.  The other dp groups all made rank 1's call
    there, so rank 5 is the one to look at (it went to the lower rank, 1, on a tie)."""
    normal = [("tp", "all_reduce", (4, 8)), ("dp", "all_reduce", (16,)),
              ("dp", "all_reduce", (32,))]
    calls = {r: list(normal) for r in range(8)}
    calls[5] = [normal[0], normal[2], normal[1]]
    report = read_flight_records(write(tmp_path, {r: dump(VIEW, r, c)
                                                  for r, c in calls.items()}), VIEW)
    [finding] = report.findings
    assert finding.kind == "desync" and finding.group.members == (1, 5)
    assert finding.ranks == (5,) and report.suspects == (5,)


def test_the_stack_names_the_programs_own_frame_and_junk_frames_are_no_refusal(
        tmp_path: Path) -> None:
    """A call's place in the program is its innermost frame outside torch's files; frames
    not as torch writes them leave it unsaid, and the dump is read all the same."""
    from mesh._hang._records import read_dump

    data = dump(VIEW, 0, step(1))
    data["entries"][0]["frames"] = [
        {"name": "all_reduce", "filename": "/venv/lib/torch/distributed/distributed_c10d.py",
         "line": 3245},
        {"name": "wrapper", "filename": "/venv/lib/torch/distributed/c10d_logger.py", "line": 83},
        {"name": "forward", "filename": "/job/model.py", "line": 41},
        {"name": "<module>", "filename": "/job/train.py", "line": 9}]
    data["entries"][1]["frames"] = [{"name": "f", "filename": 7, "line": "x"}, None]
    path = write(tmp_path, {0: data})[0]
    first, second = read_dump(path).calls
    assert first.where == "/job/model.py:41 in forward"
    assert second.where == ""
    for junk in ("frames", [None], [{"filename": "x" * 5000, "line": 1}], [[1, 2]]):
        data["entries"][1]["frames"] = junk
        assert read_dump(write(tmp_path / "j", {0: data})[0]).calls[1].where == ""

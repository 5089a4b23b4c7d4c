"""The machine on the command line: ``--topology FILE``, ``--hosts LIST``, ``--hosts-file FILE``
for ``explain`` (with where the machine differs from the plan's topology), ``compare`` and
``place``; and every bad machine file refused with exit status 2 and a message naming it,
never a traceback.  (Huge ones, refused before work proportional to them, are cases of
``tests/refusals.py``.)"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshView, Topology
from mesh._cli import main

ROOT = Path(__file__).resolve().parents[1]
MACHINE = str(ROOT / "examples" / "machine.json")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def data(*argv: str) -> dict[str, Any]:
    code, out, err = run(*argv, "--format", "json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


# ---- naming the machine ------------------------------------------------------------------
def test_the_example_machine_is_a_full_rack_and_part_of_another() -> None:
    topo = Topology.from_dict(json.loads(Path(MACHINE).read_text()))
    assert (topo.world_size, topo.num_hosts, topo.num_domains) == (112, 28, 2)
    assert topo.sizes() == ((4,), (40, 72)) and topo.host_name(27) == "gb027"


def test_a_slurm_host_list_names_the_same_machine_as_its_saved_topology() -> None:
    saved = data("explain", "--dims", "dp=14,tp=8", "--topology", MACHINE)
    listed = data("explain", "--dims", "dp=14,tp=8", "--hosts", "gb[000-027]",
                  "--devices-per-host", "4", "--hosts-per-domain", "18")
    assert {k: v for k, v in saved.items() if k != "topology"} == \
        {k: v for k, v in listed.items() if k != "topology"}
    assert listed["num_domains"] == 2 and listed["views"][0]["dims"][1]["domains_per_group"] == 1


def test_a_hosts_file_lists_hosts_of_differing_sizes_in_their_racks(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# rack A, then rack B\nbig0 slots=8 domain=A\nbig1 slots=8 domain=B\n"
                     "small0 slots=4 domain=B   # two 4-GPU hosts\nsmall1 slots=4 domain=B\n\n")
    found = data("explain", "--dims", "dp=3,tp=8", "--hosts-file", str(hosts), "--rank", "17")
    assert (found["world"], found["devices_per_host"], found["num_hosts"]) == (24, None, 4)
    assert (found["hosts_per_domain"], found["num_domains"]) == (None, 2)
    assert found["rank"]["host_name"] == "small0"
    tp = found["views"][0]["dims"][1]
    assert (tp["hosts_per_group"], tp["domains_per_group"]) == (2, 1)
    code, _, err = run("explain", "--dims", "dp=3,tp=8", "--hosts-file", str(hosts),
                       "--expect-intra-domain", "tp")
    assert code == 0 and "as expected, every group of tp stays inside one domain" in err


def test_a_hosts_file_of_one_line_per_rank_needs_one_slot_each(tmp_path: Path) -> None:
    hosts = tmp_path / "ranks.txt"
    hosts.write_text("".join(f"n{r % 2}\n" for r in range(8)))  # ranks dealt round-robin
    found = data("explain", "--dims", "dp=2,tp=4", "--hosts-file", str(hosts),
                 "--devices-per-host", "1")
    assert found["num_hosts"] == 2 and found["views"][0]["dims"][1]["hosts_per_group"] == 2


# ---- where the machine differs from the plan ----------------------------------------------
def test_explain_says_where_the_machine_differs_from_the_plan(tmp_path: Path) -> None:
    """A plan written for hosts of 8 (its TOPOLOGY) on the example machine (hosts of 4, in
    racks of 18 hosts): tp = 8 leaves its host but stays in its NVLink domain."""
    plan = tmp_path / "plan.py"
    plan.write_text("from mesh import MeshView, Topology\n"
                    "VIEWS = {'m': MeshView.from_shape((14, 8), ('dp', 'tp'))}\n"
                    "TOPOLOGY = Topology(112, 8)\n")
    code, out, _ = run("explain", str(plan), "--topology", MACHINE)
    assert code == 0
    report = out.split("\n\nthe machine (", 1)[1]
    assert report.startswith(f"--topology {MACHINE}) against the declared topology, the "
                             "plan's TOPOLOGY: 112 ranks on 14 hosts of 8 devices\n")
    for line in ("hosts: 14 hosts of 8 devices declared, 28 hosts of 4 devices on the machine",
                 "the first rank whose host differs: rank 4 (declared on host 0, on the machine "
                 "on host 1, 'gb001'", "fast domains: none (each host its own) declared, 2 domains "
                 "of 18 hosts (40 to 72 ranks) on the machine",
                 "m.tp: hosts/group 1 → 2", "m.dp: hosts/group 14 → 14, domains/group 14 → 2"):
        assert line in report or line.replace("hosts/group 14 → 14, ", "") in report, line
    diff = data("explain", str(plan), "--topology", MACHINE)["topology"]
    assert diff["declared"]["devices_per_host"] == 8 and diff["declared_from"] == \
        "the plan's TOPOLOGY"
    assert {d["dim"]: d["machine"] for d in diff["dims"]} == {
        "dp": {"hosts_per_group": 14, "domains_per_group": 2},
        "tp": {"hosts_per_group": 2, "domains_per_group": 1}}


def test_explain_against_hosts_of_one_size_in_interleaved_racks(tmp_path: Path) -> None:
    """Regular hosts (4 devices each) whose racks alternate (a, c in rack x; b, d in rack
    y): explain reports them like any machine (it once failed an internal assertion)."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("a domain=x\nb domain=y\nc domain=x\nd domain=y\n")
    code, out, err = run("explain", "--dims", "dp=4,tp=4", "--hosts-file", str(hosts),
                         "--devices-per-host", "4")
    assert code == 0, err
    assert "16 ranks on 4 hosts of 4 devices" in out
    # declared (hosts of 8 assumed): rank 4 is on host 0 there, on host 1 ('b') here
    assert "the first rank whose host differs: rank 4" in out
    dims = {d["dim"]: d["machine"] for d in data(
        "explain", "--dims", "dp=4,tp=4", "--hosts-file", str(hosts),
        "--devices-per-host", "4")["topology"]["dims"]}
    assert dims["dp"] == {"hosts_per_group": 4, "domains_per_group": 2}


def test_the_same_machine_as_declared_has_no_differences(tmp_path: Path) -> None:
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps(Topology(32, 8).to_dict()))
    code, out, _ = run("explain", "--dims", "dp=4,tp=8", "--topology", str(saved))
    assert code == 0 and "the same hosts and domains, rank for rank" in out


def test_without_a_machine_flag_the_report_is_unchanged() -> None:
    """The machine report is added only with the new flags: without them, explain prints
    what it printed before (docs/plans.md's examples hold the rest)."""
    code, out, _ = run("explain", "--dims", "dp=4,tp=8")
    assert code == 0 and "the machine (" not in out
    assert "topology" not in data("explain", "--dims", "dp=4,tp=8")


def test_explain_svg_with_a_machine_draws_its_domains(tmp_path: Path) -> None:
    picture = tmp_path / "m.svg"
    code, _, _ = run("explain", "--dims", "dp=14,tp=8", "--topology", MACHINE,
                     "--svg", str(picture))
    assert code == 0 and 'class="domain-boundaries"' in picture.read_text()
    plain = tmp_path / "p.svg"
    run("explain", "--dims", "dp=14,tp=8", "--devices-per-host", "4", "--svg", str(plain))
    assert 'class="domain-boundaries"' not in plain.read_text()


def test_compare_takes_the_machine_for_every_plan() -> None:
    found = data("compare", "--dims", "dp=14,tp=8", "--dims", "tp=8,dp=14",
                 "--topology", MACHINE, "--traffic", "tp=1GiB")
    assert found["ranking"] == ["dp=14,tp=8", "tp=8,dp=14"]
    assert {p["num_domains"] for p in found["plans"]} == {2}


# ---- meshlayout place -----------------------------------------------------------------------
def test_place_prints_the_choice_and_writes_the_view(tmp_path: Path) -> None:
    out_file, picture = tmp_path / "view.json", tmp_path / "placed.svg"
    code, out, err = run("place", "--dims", "dp=14,tp=8", "--topology", MACHINE,
                         "--traffic", "tp=1GiB,dp=256MiB", "--out", str(out_file),
                         "--svg", str(picture))
    assert code == 0, err
    assert out.startswith("placing (dp=14, tp=8) on 112 ranks on 28 hosts of 4 devices, fast "
                          "domains of 18 hosts (2 domains)")
    view = MeshView.from_dict(json.loads(out_file.read_text()))
    topo = Topology.from_dict(json.loads(Path(MACHINE).read_text()))
    assert topo.is_intra_domain(view, "tp") and view.shape == (14, 8)
    assert 'class="domain-boundaries"' in picture.read_text()
    found = data("place", "--dims", "dp=14,tp=8", "--topology", MACHINE, "--traffic", "tp=1GiB")
    assert MeshView.from_dict(found["chosen"]["view"]) == view


@pytest.mark.parametrize(("argv", "named"), [
    (["place", "--dims", "dp=4,tp=8"], "needs the machine"),
    (["place", "--dims", "dp=4,tp=8", "--topology", MACHINE], "hold 32 ranks, but the topology "
                                                              "has 112"),
    (["place", "--dims", "dp=14,tp=8", "--devices-per-host", "8", "--traffic", "pp=1"],
     "['pp']"),
    (["place", "--dims", "dp=14,tp=8", "--topology", MACHINE, "--out", "/no/such/dir/v.json"],
     "cannot write --out"),
])
def test_place_refuses_bad_input_with_exit_2(argv: list[str], named: str) -> None:
    code, _, err = run(*argv)
    assert code == 2 and named in err and "Traceback" not in err, err


# ---- bad machines -------------------------------------------------------------------------
def _saved(**change: object) -> str:
    base = {"version": 1, "world": 8, "devices_per_host": None,
            "ranks": [[0, 4, 0], [1, 4, 0]], "hosts_per_domain": 1, "domains": None,
            "hosts": ["a", "b"]}
    return json.dumps({**base, **change})


BAD_FILES = {
    "not JSON": ("{", "is not JSON"),
    "bytes": ("\udcff" * 3, "is not JSON"),
    "a list": ("[1, 2]", "exactly the keys"),
    "nested without end": ("[" * 100_000, "is not JSON"),
    "deep lists as the runs": (_saved().replace('"ranks": [[0, 4, 0], [1, 4, 0]]',
                                                '"ranks": ' + "[" * 900 + "]" * 900),
                               "'ranks'[0] must be [host, count, first_device]"),
    "a world of 5,000 digits": (_saved().replace('"world": 8', '"world": ' + "9" * 5000),
                                "is not JSON"),
    "an unknown key": (json.dumps({**json.loads(_saved()), "gpus": 8}), "exactly the keys"),
    "version 2": (_saved(version=2), "version 2"),
    "two ranks on one device": (_saved(ranks=[[0, 4, 0], [0, 4, 3]], hosts=["a"]),
                                "two ranks claim one device: rank 3 and rank 4"),
    "a host without ranks": (_saved(ranks=[[0, 8, 0]]), "host 1 (b) has no ranks"),
    "more ranks than the world": (_saved(ranks=[[0, 4, 0], [1, 40, 0]]),
                                  "44 ranks, more than the world declares"),
    "a huge host list": (_saved(hosts="n[0-99999999999]"), "more than 4,194,304 hosts"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_topology_file_exits_2_naming_it(tmp_path: Path, case: str) -> None:
    text, named = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    for argv in (["explain", "--dims", "dp=2,tp=4"], ["compare", "--dims", "dp=2,tp=4"],
                 ["place", "--dims", "dp=2,tp=4"]):
        code, _, err = run(*argv, "--topology", str(path))
        assert code == 2 and named in err and "Traceback" not in err, (argv, err)


BAD_MACHINES = [
    (["--hosts", "node[1-", "--devices-per-host", "4"], "leaves a bracket open"),
    (["--hosts", "node[3-1]", "--devices-per-host", "4"], "A <= B"),
    (["--hosts", "node[1-4]"], "give --devices-per-host"),
    (["--topology", MACHINE, "--devices-per-host", "4"], "--topology FILE gives whole"),
    (["--topology", MACHINE, "--world", "64", "--dims", "dp=8,tp=8"],
     "--world 64 differs from the machine's 112"),
    (["--topology", MACHINE, "--hosts", "a"], "not allowed with argument"),
    (["--topology", "/no/such.json"], "cannot read the topology file"),
    (["--hosts-file", "/no/such.txt"], "cannot read the hosts file"),
]


@pytest.mark.parametrize(("flags", "named"), BAD_MACHINES)
def test_bad_machine_flags_exit_2_naming_them(flags: list[str], named: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            dims = [] if "--dims" in flags else ["--dims", "dp=14,tp=8"]
            code = main(["explain", *dims, *flags])
        except SystemExit as e:  # argparse's own refusals
            code = e.code
    assert code == 2 and named in err.getvalue(), err.getvalue()


BAD_HOSTS_FILES = {
    "no host": ("# nothing\n\n", "names no host"),
    "a bad option": ("a slots=4\nb gpus=4\n", "line 2: 'gpus=4' is not slots=N"),
    "zero slots": ("a slots=0\n", "is not slots=N"),
    "domains on some lines": ("a slots=4 domain=r\nb slots=4\n", "on some lines only"),
    "a host in two racks": ("a slots=2 domain=r\nb slots=2 domain=s\na slots=2 domain=s\n",
                            "host 'a' is in domain 'r' and 's'"),
    "no slots and no default": ("a\n", "has no slots=N"),
    "a bad name": ("a[1] slots=2\n", "is not a host name"),
}


@pytest.mark.parametrize("case", list(BAD_HOSTS_FILES))
def test_a_bad_hosts_file_exits_2_naming_the_line(tmp_path: Path, case: str) -> None:
    text, named = BAD_HOSTS_FILES[case]
    path = tmp_path / "hosts.txt"
    path.write_text(text)
    code, _, err = run("explain", "--dims", "w=8", "--hosts-file", str(path))
    assert code == 2 and named in err and "Traceback" not in err, err

"""``mesh.explain`` and the ``meshlayout explain`` command, checked against brute force."""

from __future__ import annotations

import ast
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from torch_free import run_without

from layout import Layout
from mesh import (
    MAX_PLAN_DIMS,
    CommMemory,
    InvalidSizeError,
    MeshTypeError,
    MeshView,
    Topology,
    TopologyError,
    UnknownDimError,
    explain,
)
from mesh._cli import main

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "examples" / "torchtitan_plan.py"
torchtitan_views = runpy.run_path(str(PLAN))["torchtitan_views"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m mesh explain ...`` in a fresh process (what the console script runs)."""
    return subprocess.run([sys.executable, "-m", "mesh", "explain", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


# ---- the brute-force oracle -----------------------------------------------------------------
def explicit_views(world: int, pp: int, dp_replicate: int, dp_shard: int, cp: int, tp: int,
                   ep: int, etp: int) -> dict[str, tuple[np.ndarray, tuple[str, ...]]]:
    """torchtitan's dense, sparse and loss meshes as explicit rank tensors (NumPy reshapes of
    the world, the way torch's DeviceMesh holds them), with their dim names."""
    fsdp, ranks = dp_shard * cp, np.arange(world)
    efsdp = fsdp * tp // (etp * ep)
    loading = ranks.reshape(pp, dp_replicate * dp_shard, cp, tp)
    loss = loading.transpose(0, 3, 1, 2).reshape(pp * tp, -1)  # instances x (batch, cp)
    return {"dense": (ranks.reshape(pp, dp_replicate, fsdp, tp),
                      ("pp", "dp_replicate", "fsdp", "tp")),
            "sparse": (ranks.reshape(pp, dp_replicate, efsdp, ep, etp),
                       ("pp", "dp_replicate", "efsdp", "ep", "etp")),
            "loss": (loss, ("", "loss"))}  # axis 0 enumerates the loss mesh's instances


def groups_of(tensor: np.ndarray, k: int) -> np.ndarray:
    """Every group along axis ``k``, one per row, rows sorted by first member."""
    rows = np.moveaxis(tensor, k, -1).reshape(-1, tensor.shape[k])
    return rows[np.argsort(rows[:, 0], kind="stable")]


def most_hosts(rows: np.ndarray, per_host: int) -> int:
    hosts = np.sort(rows // per_host, axis=1)
    return int(((hosts[:, 1:] != hosts[:, :-1]).sum(axis=1) + 1).max())


def parse_layout(text: str) -> Layout:
    """``"(4,2):(8,1)"`` or ``"16:8"`` -> a Layout (an independent reader of str(Layout))."""
    shape, stride = text.split(":")
    return Layout(ast.literal_eval(shape), ast.literal_eval(stride))


def test_every_json_field_agrees_with_brute_force_at_2_to_the_17() -> None:
    """A torchtitan plan at 2**17 ranks on hosts of 8: sizes, layouts, group counts, host
    spans, intra-host flags, families (equal ids <=> equal sets of ordered groups),
    communicators per rank and the memory estimate, from explicit rank tensors."""
    n, per_host = 1 << 17, 8
    degrees = dict(pp=4, dp_replicate=8, dp_shard=128, cp=2, tp=16, ep=32, etp=1)
    data = explain(torchtitan_views(n, **degrees), Topology(n, per_host),
                   memory=CommMemory(channels=4, buffsize=1 << 20, fixed=5)).to_dict()
    assert (data["world"], data["devices_per_host"], data["num_hosts"]) == (n, 8, n // 8)
    assert data["devices_per_host_assumed"] is False and data["hosts_per_domain"] == 1
    truth = explicit_views(n, **degrees)
    assert [v["name"] for v in data["views"]] == list(truth)
    seen: dict[bytes, int] = {}  # a family's groups (as bytes) -> its JSON id
    communicators: set[int] = set()
    for v in data["views"]:
        tensor, names = truth[v["name"]]
        axes = [k for k, name in enumerate(names) if name]
        assert [d["name"] for d in v["dims"]] == [names[k] for k in axes]
        for d, k in zip(v["dims"], axes):
            rows = groups_of(tensor, k)
            assert d["size"] == tensor.shape[k] and d["num_groups"] == len(rows)
            first = rows[rows[:, 0] == 0][0] if (rows == 0).any() else None
            assert first is not None and first[0] == 0
            mode = parse_layout(d["layout"])
            assert [mode(i) for i in range(mode.size)] == first.tolist()
            assert d["hosts_per_group"] == most_hosts(rows, per_host)
            assert d["intra_host"] is (d["hosts_per_group"] == 1)
            assert d["domains_per_group"] == d["hosts_per_group"]
            key = rows.tobytes() + bytes(str(rows.shape), "ascii")
            assert seen.setdefault(key, d["family"]) == d["family"], "equal groups, two ids"
            if d["size"] > 1:
                communicators.add(d["family"])
    assert len(set(seen.values())) == len(seen), "one id for different groups"
    for v in data["views"]:  # shared_with lists exactly the other dims of the family
        for d in v["dims"]:
            same = {f"{w['name']}.{e['name']}" for w in data["views"] for e in w["dims"]
                    if e["family"] == d["family"]}
            assert set(d["shared_with"]) == same - {f"{v['name']}.{d['name']}"}
    assert data["communicators_per_rank"] == len(communicators)  # every rank is in every one
    per = 4 * 2 * (1 << 20) + 5
    assert data["memory"]["bytes_per_communicator"] == per
    assert data["memory"]["bytes_per_rank"] == per * len(communicators)
    assert {f["id"] for f in data["families"]} == set(seen.values())


def test_the_families_of_torchtitans_plan_at_2048_ranks() -> None:
    """Hand-derived: pp and dp_replicate are shared by dense and sparse, etp (= tp) shares
    tp's groups; fsdp, efsdp, ep and loss are their own: 7 communicators."""
    data = explain(runpy.run_path(str(PLAN))["VIEWS"], Topology(2048, 8)).to_dict()
    shared = {f"{v['name']}.{d['name']}": d["shared_with"] for v in data["views"]
              for d in v["dims"]}
    assert shared["dense.pp"] == ["sparse.pp"]
    assert shared["sparse.dp_replicate"] == ["dense.dp_replicate"]
    assert shared["sparse.etp"] == ["dense.tp"]
    assert shared["dense.fsdp"] == shared["sparse.ep"] == shared["loss.loss"] == []
    assert data["communicators_per_rank"] == 7


def test_rank_section_matches_brute_force() -> None:
    n = 1024
    views = torchtitan_views(n, pp=2, dp_replicate=2, dp_shard=16, cp=2, tp=8, ep=8, etp=1)
    truth = explicit_views(n, pp=2, dp_replicate=2, dp_shard=16, cp=2, tp=8, ep=8, etp=1)
    for rank in (0, 5, 777, 1023):
        rd = explain(views, Topology(n, 8), rank=rank).to_dict()["rank"]
        assert (rd["rank"], rd["host"]) == (rank, rank // 8)
        for v in rd["views"]:
            tensor, names = truth[v["name"]]
            where = [int(i) for i in np.argwhere(tensor == rank)[0]]
            axes = [k for k, name in enumerate(names) if name]
            assert v["coordinate"] == [where[k] for k in axes]
            for g, k in zip(v["groups"], axes):
                index = list(where)
                index[k] = slice(None)
                members = tensor[tuple(index)].tolist()
                assert g["ranks"] == members and g["local_rank"] == where[k]
                assert g["hosts"] == list(dict.fromkeys(r // 8 for r in members))


def test_communicators_per_rank_counts_only_the_universes_a_rank_is_in() -> None:
    """Two 4-rank meshes on disjoint explicit universes: each rank is in 2 families, not 4."""
    views = {"left": MeshView.from_ranks([[0, 1], [2, 3]], ("dp", "tp")),
             "right": MeshView.from_ranks([[4, 5], [6, 7]], ("dp", "tp"))}
    data = explain(views, Topology(8, 4)).to_dict()
    assert data["communicators_per_rank"] == 2 and len(data["families"]) == 4
    assert explain(views, Topology(8, 4), rank=6).to_dict()["communicators_per_rank"] == 2


def test_without_a_topology_hosts_of_8_are_assumed_and_reported() -> None:
    found = explain({"m": MeshView.from_shape((4, 8), ("dp", "tp"))})
    assert found.to_dict()["devices_per_host_assumed"] is True
    assert "(assumed: set --devices-per-host)" in str(found)


def test_crossing_names_each_listed_dim_that_leaves_a_host() -> None:
    found = explain({"m": MeshView.from_shape((4, 8), ("dp", "tp"))}, Topology(32, 8))
    assert found.crossing(["tp"]) == []
    assert found.crossing(["tp", "dp"]) == ["dp (view m): its groups span up to 4 hosts"]
    with pytest.raises(UnknownDimError, match="'ep'"):
        found.crossing(["ep"])


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: explain({}), MeshTypeError, "non-empty mapping"),
    (lambda: explain([MeshView.from_shape(8)]), MeshTypeError, "mapping"),
    (lambda: explain({"m": "mesh"}), MeshTypeError, "'m' must be a mesh.MeshView"),
    (lambda: explain({"m": MeshView.from_shape(6)}), TopologyError, "6 ranks"),
    (lambda: explain({"m": MeshView.from_shape(8)}, "8x1"), MeshTypeError, "Topology"),
    (lambda: explain({"m": MeshView.from_shape(16)}, Topology(8, 8)), TopologyError, "rank 15"),
    (lambda: explain({"m": MeshView.from_shape(8)}, Topology(8, 8), world=16), TopologyError,
     "world=16"),
    (lambda: explain({"m": MeshView.from_shape(8)}, rank=8), TopologyError, "rank 8"),
    (lambda: CommMemory(channels=0), InvalidSizeError, "channels"),
    (lambda: CommMemory(fixed=-1), InvalidSizeError, "fixed"),
    (lambda: CommMemory(buffsize=1.5), MeshTypeError, "1.5"),
])
def test_bad_input_to_explain_raises_typed_errors(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


# ---- the command ------------------------------------------------------------------------------
def test_the_command_explains_a_mesh_from_flags() -> None:
    out = run_cli("--world", "1024", "--devices-per-host", "8", "--dims", "pp=4,dp=8,cp=4,tp=8",
                  "--rank", "5", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    dims = {d["name"]: d for d in data["views"][0]["dims"]}
    assert [dims[d]["hosts_per_group"] for d in ("pp", "dp", "cp", "tp")] == [4, 8, 4, 1]
    assert [dims[d]["layout"] for d in ("pp", "dp", "cp", "tp")] == ["4:256", "8:32", "4:8",
                                                                      "8:1"]
    assert data["communicators_per_rank"] == 4 and data["rank"]["host"] == 0
    assert data["rank"]["views"][0]["coordinate"] == [0, 0, 0, 5]


def test_the_command_reads_a_plan_file_and_flags_override_its_topology(tmp_path) -> None:
    out = run_cli(str(PLAN), "--devices-per-host", "16", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["world"], data["devices_per_host"], data["num_hosts"]) == (2048, 16, 128)
    assert [v["name"] for v in data["views"]] == ["dense", "sparse", "loss"]


def test_expect_intra_host_fails_naming_each_crossing_dim() -> None:
    ok = run_cli(str(PLAN), "--expect-intra-host", "tp,etp")
    assert ok.returncode == 0, ok.stderr
    bad = run_cli(str(PLAN), "--expect-intra-host", "tp,ep,fsdp")
    assert bad.returncode == 1
    assert "ep (view sparse): its groups span up to 4 hosts" in bad.stderr
    assert "fsdp (view dense): its groups span up to 32 hosts" in bad.stderr
    assert "tp (" not in bad.stderr


@pytest.mark.parametrize(("args", "match"), [
    ((), "nothing to explain"),
    (("--dims", "pp=4,dp"), "NAME=SIZE"),
    (("--dims", "pp=0"), "NAME=SIZE"),
    (("--dims", "pp=4,tp=2", "--world", "16"), "multiplies to 8"),
    (("--dims", "tp=12", "--devices-per-host", "8"), "not a whole number of hosts"),
    (("--dims", "tp=8", "--hosts-per-domain", "2"), "needs --devices-per-host"),
    (("--dims", "tp=8", "--rank", "8"), "rank 8"),
    (("--dims", "tp=8", "--expect-intra-host", "ep"), "'ep'"),
    (("--dims", "tp=8", "--color-by", "tp"), "--svg"),
    (("--dims", "tp=8", "--channels", "0"), "--channels: must be a positive int, got '0'"),
    (("--dims", "tp=8", "--buffsize-mib", "nan"), "--buffsize-mib"),
    (("--dims", "tp=8", "--buffsize-mib", "inf"), "--buffsize-mib"),
    (("--dims", "tp=8", "--fixed-mib", "1e300"), "--fixed-mib"),
    (("--dims", "tp=8", "--devices-per-host", "0"), "--devices-per-host: must be a positive"),
    (("--dims", "tp=8", "--devices-per-host", "8", "--hosts-per-domain", "0"),
     "--hosts-per-domain: must be a positive"),
    (("--dims", "tp=8", "--rank", "-1"), "--rank: must be a rank"),
    (("--dims", "pp=8", "--devices-per-host", "16"), "--devices-per-host to the processes"),
    (("--dims", "tp=8", "--view", "mesh"), "--svg"),
    (("--dims", "tp=8", "--expect-intra-domain", "zz"), "'zz'"),
    (("--dims", "tp=8", "--svg", "/no/such/dir/x.svg"), "cannot write --svg"),
    (("--dims", "tp=8", "--svg", "/tmp/x.svg", "--color-by", "zz"), "'zz'"),
    (("--dims", "a=256,b=128", "--svg", "/tmp/x.svg"), "at most 16,384 ranks"),
    (("/no/such/plan.py",), "cannot read the plan file"),
])
def test_bad_command_input_exits_2_with_a_message(args, match, capsys) -> None:
    assert exit_code(["explain", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "", "a refused command printed a report"
    assert err.startswith(("meshlayout explain: error:", "usage:")) and match in err, err


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s status, also where argparse exits (bad flag values)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.mark.parametrize(("body", "match"), [
    ("X = 1\n", "must define VIEWS"),
    ("VIEWS = {}\n", "must define VIEWS"),
    ("VIEWS = {'m': 3}\n", "maps 'm' to a int"),
    ("from mesh import MeshView\nVIEWS = {'m': MeshView.from_shape(8)}\nTOPOLOGY = 8\n",
     "TOPOLOGY"),
    ("raise ValueError('boom')\n", "raised ValueError: boom"),
    ("raise SystemExit(3)\n", "exited (SystemExit: 3)"),
    ("import sys\nassert sys.argv[1:] == [], sys.argv\nVIEWS = 1\n", "must define VIEWS"),
    ("from mesh import MeshView\nVIEWS = {'a.b': MeshView.from_shape(8)}\n", "'.'"),
])
def test_a_bad_plan_file_exits_2_naming_the_problem(tmp_path, body, match, capsys) -> None:
    plan = tmp_path / "plan.py"
    plan.write_text(body)
    assert exit_code(["explain", str(plan), "--rank", "1"]) == 2
    assert match in capsys.readouterr().err


def test_the_command_never_imports_torch_at_2_to_the_20_ranks() -> None:
    """A 2**20-rank torchtitan plan, explained in a fresh process without importing torch or
    NumPy.  (How fast: ``bench/explain.py``'s target, the whole command <= 1.5 s.)"""
    code = (
        "import runpy, sys\n"
        "from mesh import Topology, explain\n"
        f"views = runpy.run_path({str(PLAN)!r})['torchtitan_views']"
        "(1 << 20, pp=8, dp_replicate=16, dp_shard=512, cp=2, tp=8, ep=64, etp=1)\n"
        "text = str(explain(views, Topology(1 << 20, 8), rank=777777))\n"
        "print(text.count('777777'))\n")
    assert int(run_without(code, ("torch", "numpy"))) >= 1  # the explanation is of rank 777777


def test_the_console_script_is_declared() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.scripts]\nmeshlayout = "mesh._cli:main"' in text


def test_the_command_writes_an_svg_of_the_chosen_view(tmp_path) -> None:
    import xml.etree.ElementTree as ET

    picture = tmp_path / "dense.svg"
    out = run_cli(str(PLAN), "--svg", str(picture), "--view", "sparse", "--color-by", "ep",
                  "--rank", "5")
    assert out.returncode == 0, out.stderr
    assert f"wrote {picture} (view sparse)" in out.stderr
    root = ET.parse(picture).getroot()
    cells = root.findall(".//{http://www.w3.org/2000/svg}g[@class='cell']")
    assert len(cells) == 2048
    bad = run_cli(str(PLAN), "--svg", str(picture), "--view", "moe")
    assert bad.returncode == 2 and "'moe' is not a view" in bad.stderr


def test_the_headline_is_the_most_any_rank_is_in_and_the_rank_gets_its_own() -> None:
    """A stage view over ranks 0..7 beside the whole (pp, dp, tp) = (2, 2, 4) mesh: ranks
    0..7 are in 3 + 2 families, ranks 8..15 in 3; the headline is 5 with or without --rank."""
    whole = MeshView.from_shape((2, 2, 4), ("pp", "dp", "tp"))
    views = {"stage0": MeshView.from_ranks([[0, 1, 2, 3], [4, 5, 6, 7]], ("dp", "tp")),
             "whole": whole}
    for rank, mine in ((None, None), (3, 5), (9, 3)):
        data = explain(views, Topology(16, 4), rank=rank).to_dict()
        assert data["communicators_per_rank"] == 5
        if rank is not None:
            assert data["rank"]["communicators"]["count"] == mine
            assert len(data["rank"]["communicators"]["families"]) == mine


def test_dims_of_views_with_the_same_dim_names_are_told_apart() -> None:
    views = {"a": MeshView.from_shape((2, 4), ("x", "y")),
             "b": MeshView.from_shape((2, 4), ("x", "y"))}
    dims = explain(views, Topology(8, 4)).to_dict()["views"][0]["dims"]
    assert [d["shared_with"] for d in dims] == [["b.x"], ["b.y"]]


def test_expectations_take_view_dot_dim_and_fast_domains() -> None:
    """pp=2, dp=8, ep=9, tp=8 on hosts of 4 in NVL domains of 18 hosts (72 ranks): tp groups
    of 8 span 2 hosts but stay in one domain; ep (stride 8, 9 members) spans 72 ranks
    from an aligned start: one domain too; dp does not."""
    args = ["--devices-per-host", "4", "--hosts-per-domain", "18", "--dims",
            "pp=2,dp=8,ep=9,tp=8"]
    assert exit_code(["explain", *args, "--expect-intra-domain", "tp,ep"]) == 0
    assert exit_code(["explain", *args, "--expect-intra-domain", "mesh.dp"]) == 1
    assert exit_code(["explain", *args, "--expect-intra-host", "tp"]) == 1
    found = explain({"m": MeshView.from_shape((2, 8, 9, 8), ("pp", "dp", "ep", "tp"))},
                    Topology(1152, 4, hosts_per_domain=18))
    assert found.crossing(["m.tp", "ep"], level="domain") == []
    assert found.crossing(["dp"], level="domain") == [
        "dp (view m): its groups span up to 8 domains"]


def test_a_plans_explicit_hosts_take_a_domain_size_from_the_command(tmp_path, capsys) -> None:
    plan = tmp_path / "plan.py"
    plan.write_text("from mesh import MeshView, Topology\n"
                    "VIEWS = {'m': MeshView.from_shape((2, 6), ('dp', 'tp'))}\n"
                    "TOPOLOGY = Topology.from_hosts(['a'] * 4 + ['b'] * 4 + ['c'] * 4)\n")
    assert exit_code(["explain", str(plan), "--hosts-per-domain", "2", "--world", "12",
                      "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["hosts_per_domain"], data["num_domains"]) == (2, 2)
    dims = {d["name"]: d for d in data["views"][0]["dims"]}
    assert dims["tp"]["hosts_per_group"] == 2 and dims["dp"]["domains_per_group"] == 2
    assert exit_code(["explain", str(plan), "--world", "24"]) == 2


def test_a_large_explicit_plan_is_explained() -> None:
    """2**20 ranks as an explicit, shuffled rank tensor in (pp, dp, tp): every family is
    listed once (memoized); the membership count is per distinct universe.  (Its seconds,
    against a 20 s target: ``bench/time_bounds.py``.)"""
    perm = np.random.default_rng(0).permutation(1 << 20).reshape(8, 16384, 8)
    view = MeshView.from_ranks(perm, ("pp", "dp", "tp"))
    data = explain({"m": view}, Topology(1 << 20, 8), rank=5).to_dict()
    assert data["communicators_per_rank"] == 3


def test_a_plan_holds_at_most_max_plan_dims_dims() -> None:
    """A plan of :data:`mesh.MAX_PLAN_DIMS` (256) dims is explained; one dim more is refused
    before any work, naming the limit, whether it comes as one more view or one more dim."""
    assert MAX_PLAN_DIMS == 256
    line, square = MeshView.from_shape(8, ("w",)), MeshView.from_shape((2, 4), ("dp", "tp"))
    full = {f"v{i}": line for i in range(MAX_PLAN_DIMS)}
    data = explain(full).to_dict()
    assert len(data["views"]) == 256 and len(data["views"][0]["dims"][0]["shared_with"]) == 255
    with pytest.raises(InvalidSizeError, match=r"more than 256 entries.*MAX_PLAN_DIMS = 256"):
        explain({**full, "one_more": line})
    squares = {f"v{i}": square for i in range(MAX_PLAN_DIMS // 2)}
    with pytest.raises(InvalidSizeError, match="257 dims in all views, more than the 256"):
        explain({**squares, "one_more": line})


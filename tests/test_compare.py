"""Comparing plans (``mesh.compare``, ``meshlayout compare``), checked against brute force.

The oracle works on explicit rank tensors (NumPy reshapes and transposes of the world, the
way torch's DeviceMesh holds them): a dim's groups are the tensor's rows along that axis,
a group's hosts are ``rank // devices_per_host``, a family is the set of ordered groups, a
rank's communicators are the distinct families of size > 1 it is in, and the time of a
dim is the α-β formula written out here with the documented default links.  Nothing in the
oracle calls the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from torch_free import run_without

from mesh import (
    DuplicateNameError,
    InvalidSizeError,
    Links,
    MeshTypeError,
    MeshView,
    Topology,
    UnknownDimError,
    compare,
)
from mesh._cli import main
from mesh._plan._compare import compare_placed

ROOT = Path(__file__).resolve().parents[1]
WORLD, PER_HOST = 512, 8
MIB = 1 << 20
# The documented defaults of mesh.Links: Gb/s and µs inside a host, then between hosts.
INTRA, INTER = (Fraction(3600), Fraction(2)), (Fraction(400), Fraction(10))
TRAFFIC = {"tp": 1 << 30, "dp": 256 * MIB, "ep": 512 * MIB}


def tensors() -> dict[str, dict[str, tuple[np.ndarray, tuple[str, ...]]]]:
    """Two 512-rank plans on hosts of 8, as rank tensors: ``inside`` keeps tp (and the
    experts' etp, the same groups) in a host; ``across`` puts tp at stride 16, across 8
    hosts.  Both keep pp at stride 128 (the same groups); each has two dp dims of
    different groups (the dense one and the experts')."""
    world = np.arange(WORLD)
    return {
        "inside": {"dense": (world.reshape(4, 16, 8), ("pp", "dp", "tp")),
                   "moe": (world.reshape(4, 2, 8, 8), ("pp", "dp", "ep", "etp"))},
        "across": {"dense": (world.reshape(4, 8, 16), ("pp", "tp", "dp")),
                   "moe": (world.reshape(4, 8, 2, 8), ("pp", "etp", "dp", "ep"))},
    }


def plans() -> dict[str, dict[str, MeshView]]:
    return {p: {v: MeshView.from_ranks(t, names) for v, (t, names) in views.items()}
            for p, views in tensors().items()}


def rows_of(tensor: np.ndarray, k: int) -> list[tuple[int, ...]]:
    return [tuple(int(r) for r in row)
            for row in np.moveaxis(tensor, k, -1).reshape(-1, tensor.shape[k])]


def oracle(views: dict[str, tuple[np.ndarray, tuple[str, ...]]]) -> dict[str, object]:
    """Per dim name: size, most hosts, intra-host, time; per plan: communicators, memory,
    total time."""
    dims: dict[str, list[tuple[int, int, frozenset[tuple[int, ...]]]]] = {}
    for tensor, names in views.values():
        for k, name in enumerate(names):
            groups = rows_of(tensor, k)
            hosts = max(len({r // PER_HOST for r in g}) for g in groups)
            dims.setdefault(name, []).append((tensor.shape[k], hosts, frozenset(groups)))
    families = {fam for entries in dims.values() for _, _, fam in entries
                if len(next(iter(fam))) > 1}
    per_rank = max(sum(any(r in g for g in fam) for fam in families) for r in range(WORLD))
    out: dict[str, object] = {"communicators": per_rank, "memory": per_rank * 128 * MIB}
    total = Fraction(0)
    for name, entries in dims.items():
        seconds = Fraction(0)
        for size, hosts, _ in {fam: e for e in entries for fam in [e[2]]}.values():
            if name in TRAFFIC:
                seconds += alpha_beta(TRAFFIC[name], size, hosts == 1)
        total += seconds
        out[name] = {"size": max(s for s, _, _ in entries),
                     "hosts": max(h for _, h, _ in entries),
                     "intra": all(h == 1 for _, h, _ in entries), "seconds": seconds}
    out["total"] = total
    return out


def alpha_beta(nbytes: int, g: int, inside: bool) -> Fraction:
    gbps, latency_us = INTRA if inside else INTER
    return (Fraction(2 * (g - 1), g) * 8 * nbytes / (gbps * 10**9)
            + 2 * (g - 1) * latency_us / 10**6)


def test_two_512_rank_plans_are_compared_as_brute_force_says() -> None:
    """Every row's values, the better mark, per-plan budgets and the ranking."""
    found = compare(plans(), Topology(WORLD, PER_HOST), traffic=TRAFFIC).to_dict()
    expect = {p: oracle(views) for p, views in tensors().items()}
    names = found["names"]
    assert names == ["inside", "across"]
    metric = {"size": "size", "hosts_per_group": "hosts", "intra_host": "intra",
              "seconds": "seconds"}
    for row in found["rows"]:
        if row["dim"] is None:
            continue
        want = [expect[p][row["dim"]][metric[row["metric"]]] for p in names]  # type: ignore[index]
        assert row["values"] == pytest.approx(want, rel=1e-12), row
    plan_rows = {r["metric"]: r for r in found["rows"] if r["dim"] is None}
    assert plan_rows["communicators_per_rank"]["values"] == [expect[p]["communicators"]
                                                             for p in names]
    assert plan_rows["bytes_per_rank"]["values"] == [expect[p]["memory"] for p in names]
    totals = [expect[p]["total"] for p in names]
    assert plan_rows["seconds"]["values"] == pytest.approx(totals, rel=1e-12)
    assert found["ranking"] == sorted(names, key=lambda p: expect[p]["total"])  # type: ignore
    assert found["ranking"] == ["inside", "across"]  # tp's 1 GiB stays on NVLink


def test_each_plans_budget_is_its_own_not_the_sum() -> None:
    """Explaining both plans' views together (the old way) counts every communicator of
    both; each plan's column holds only its own."""
    found = compare(plans(), Topology(WORLD, PER_HOST)).to_dict()
    own = [oracle(views)["communicators"] for views in tensors().values()]
    row = next(r for r in found["rows"] if r["metric"] == "communicators_per_rank")
    assert row["values"] == own == [5, 5]
    union = {f"{p}_{v}": t for p, views in tensors().items() for v, t in views.items()}
    assert oracle(union)["communicators"] > max(own)
    assert [p["communicators_per_rank"] for p in found["plans"]] == own


def test_the_better_value_is_marked_and_equal_values_are_not() -> None:
    rows = {(r["dim"], r["metric"]): r for r in compare(
        plans(), Topology(WORLD, PER_HOST), traffic=TRAFFIC).to_dict()["rows"]}
    assert rows["tp", "hosts_per_group"]["best"] == ["inside"]
    assert rows["tp", "intra_host"]["best"] == ["inside"]
    assert rows["tp", "size"]["best"] == []  # a size is not better or worse
    assert rows[None, "communicators_per_rank"]["best"] == []  # 5 and 5
    assert rows[None, "seconds"]["best"] == ["inside"]


def test_dims_with_the_same_groups_in_several_plans_are_reported_shared() -> None:
    """Both plans keep pp at stride 128 (the same groups): shared; tp differs."""
    rows = {(r["dim"], r["metric"]): r for r in compare(
        plans(), Topology(WORLD, PER_HOST)).to_dict()["rows"]}
    assert rows["pp", "size"]["shared"] == [["inside", "across"]]
    assert rows["tp", "size"]["shared"] == []
    text = str(compare(plans(), Topology(WORLD, PER_HOST)))
    assert any(line.startswith("  pp ") and line.endswith("same groups")
               for line in text.splitlines())


def test_a_dim_one_plan_lacks_is_a_dash_and_is_not_marked() -> None:
    found = compare({"a": MeshView.from_shape((64, 8), ("dp", "tp")),
                     "b": MeshView.from_shape((64, 8), ("dp", "cp"))}, Topology(WORLD, 8))
    tp = next(r for r in found.to_dict()["rows"] if r["dim"] == "tp"
              and r["metric"] == "hosts_per_group")
    assert tp["values"] == [1, None] and tp["best"] == []
    assert found.ranking is None  # no traffic, no ranking


def test_fast_domains_add_rows_and_a_group_inside_one_runs_at_the_intra_host_rate() -> None:
    """tp of 16 over hosts of 8 in domains of 2 hosts: it leaves its host, stays in its
    domain, and is timed with the intra-host links."""
    found = compare({"m": MeshView.from_shape((32, 16), ("dp", "tp"))},
                    Topology(WORLD, 8, hosts_per_domain=2), traffic={"tp": 1 << 30})
    rows = {(r["dim"], r["metric"]): r["values"][0] for r in found.to_dict()["rows"]}
    assert rows["tp", "intra_host"] is False and rows["tp", "intra_domain"] is True
    assert rows["tp", "seconds"] == pytest.approx(float(alpha_beta(1 << 30, 16, True)))


def test_the_formula_and_the_links_are_printed() -> None:
    text = str(compare(plans(), Topology(WORLD, PER_HOST), traffic=TRAFFIC,
                       links=Links(900, 100, 1, 5)))
    assert "2 * (g - 1) / g * bytes / bandwidth + 2 * (g - 1) * latency" in text
    assert "900 Gb/s, 1 µs inside one host (or fast domain), else 100 Gb/s, 5 µs" in text
    assert "traffic per step per rank: tp=1 GiB, dp=256 MiB, ep=512 MiB" in text
    assert "ranking by estimated communication time per step: inside (" in text


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: compare({}), MeshTypeError, "non-empty mapping"),
    (lambda: compare({"a": 3}), MeshTypeError, "plan 'a'"),
    (lambda: compare({"a": MeshView.from_shape(8)}, traffic={"tp": 1}), UnknownDimError,
     "'tp'"),
    (lambda: compare({"a": MeshView.from_shape(8, ("dp",))}, traffic={"dp": -1}),
     InvalidSizeError, "-1"),
    (lambda: compare({"a": MeshView.from_shape(8)}, links=3), MeshTypeError, "links"),
    (lambda: compare({"a": MeshView.from_shape(8)}, topology=8), MeshTypeError, "topology"),
    (lambda: compare_placed([("a", {"m": MeshView.from_shape(8)}, None)] * 2),
     DuplicateNameError, "'a'"),
    (lambda: Links(0), InvalidSizeError, "intra_host_gbps"),
    (lambda: Links(inter_host_latency_us=float("nan")), InvalidSizeError, "nan"),
    (lambda: Links("fast"), MeshTypeError, "'fast'"),
])
def test_bad_input_raises_a_typed_error_naming_it(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


# ---- the command ----------------------------------------------------------------------------
def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "compare", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"})


def test_the_command_compares_plan_files_each_with_its_own_topology(tmp_path: Path) -> None:
    for name, views in tensors().items():
        (tmp_path / f"{name}.py").write_text(
            "import numpy as np\nfrom mesh import MeshView, Topology\n"
            f"VIEWS = {{v: MeshView.from_ranks(np.array(t), n) for v, (t, n) in "
            f"{ {v: (t.tolist(), n) for v, (t, n) in views.items()} !r}.items()}}\n"
            f"TOPOLOGY = Topology({WORLD}, {PER_HOST})\n")
    out = run(str(tmp_path / "inside.py"), str(tmp_path / "across.py"), "--format", "json",
              "--traffic", "tp=1GiB,dp=256MiB,ep=512MiB")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data == compare(plans(), Topology(WORLD, PER_HOST), traffic=TRAFFIC).to_dict()


def test_the_command_compares_meshes_from_flags() -> None:
    out = run("--world", "512", "--dims", "dp=64,tp=8", "--dims", "tp=8,dp=64", "--traffic",
              "tp=1GiB", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["names"] == ["dp=64,tp=8", "tp=8,dp=64"]
    assert data["ranking"] == ["dp=64,tp=8", "tp=8,dp=64"]


@pytest.mark.parametrize(("args", "match"), [
    ([], "nothing to compare"),
    (["--dims", "dp=8", "--traffic", "dp=1XB"], "optional unit"),
    (["--dims", "dp=8", "--traffic", "tp=1"], "no plan has"),
    (["--dims", "dp=8", "--inter-host-gbps", "0"], "Gb/s > 0"),
    (["--dims", "dp=8", "--intra-host-latency-us", "-1"], "µs >= 0"),
    (["--dims", "dp=8", "--world", "16"], "not --world 16"),
    (["--dims", "dp=8,tp=8", "--traffic", "tp=1", "--traffic", "tp=2"], "tp more than once"),
])
def test_bad_command_input_exits_2_with_a_message(args, match, capsys) -> None:
    try:
        status = main(["compare", *args])
    except SystemExit as e:  # argparse: a bad flag value
        status = int(e.code or 0)
    assert status == 2
    assert match in capsys.readouterr().err


def test_two_plans_of_one_file_name_get_distinct_columns() -> None:
    plan = str(ROOT / "examples" / "torchtitan_plan.py")
    out = run(plan, plan, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["names"] == ["torchtitan_plan", "torchtitan_plan#2"]


def test_the_command_never_imports_torch_at_2_to_the_20_ranks() -> None:
    """Two 2**20-rank torchtitan plans compared in a fresh process without importing torch
    or NumPy.  (How fast: ``bench/compare.py``, the whole command <= 1 s.)"""
    code = (
        "import runpy, sys\n"
        "from mesh import MeshView, Topology, compare\n"
        f"views = runpy.run_path({str(ROOT / 'examples' / 'torchtitan_plan.py')!r})"
        "['torchtitan_views']\n"
        "a = views(1 << 20, pp=8, dp_replicate=16, dp_shard=512, cp=2, tp=8, ep=64, etp=1)\n"
        "b = views(1 << 20, pp=8, dp_replicate=16, dp_shard=256, cp=2, tp=16, ep=64, etp=1)\n"
        "text = str(compare({'a': a, 'b': b}, Topology(1 << 20, 8), rank=777777,\n"
        "                   traffic={'tp': 2**30, 'fsdp': 2**28}))\n"
        "print(text.count('777777'))\n")
    assert int(run_without(code, ("torch", "numpy"))) >= 2  # both plans show rank 777777


def test_a_passing_expectation_prints_one_confirming_line(capsys) -> None:
    assert main(["explain", "--dims", "dp=64,tp=8", "--expect-intra-host", "tp"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["meshlayout explain: as expected, every group of tp stays inside one host"]


def test_traffic_given_again_adds_other_dims(capsys) -> None:
    assert main(["compare", "--world", "512", "--devices-per-host", "8", "--dims", "dp=64,tp=8",
                 "--traffic", "tp=1GiB", "--traffic", "dp=256MiB"]) == 0
    assert "traffic per step per rank: tp=1 GiB, dp=256 MiB" in capsys.readouterr().out


def test_an_expectation_naming_a_dim_twice_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["explain", "--dims", "dp=64,tp=8", "--expect-intra-host", "tp,tp"])
    assert e.value.code == 2 and "each once" in capsys.readouterr().err


def test_a_traffic_key_too_large_to_print_is_a_typed_refusal() -> None:
    """Found by the fuzz: an int key past Python's 4,300-digit repr limit raised ValueError
    while its message was being written."""
    from mesh import MeshError, MeshView, Topology, compare

    view = MeshView.from_shape((2, 4), ("dp", "tp"))
    with pytest.raises(MeshError, match="traffic dim name must be a non-empty string"):
        compare({"a": view}, Topology(8, 4), traffic={10 ** 5000: 1})

"""``meshlayout reshard SRC DST``: the example trainer and server plans, priced.

Expected values are worked out here from the model's shapes: the server holds every
weight twice (dp = 2 replicas of tp = 4 shards) and every norm 8 times (replicated on
every rank), on ranks none of which trains, so that is what moves, across hosts (the
trainer on host 0, the server on host 1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mesh._cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRAINER, SERVER = str(EXAMPLES / "trainer.py"), str(EXAMPLES / "server.py")
HIDDEN, FFN, VOCAB, LAYERS = 1024, 4096, 32000, 4
LAYER = 3 * HIDDEN * HIDDEN + HIDDEN * HIDDEN + 2 * FFN * HIDDEN + HIDDEN * FFN
SHARDED = 2 * VOCAB * HIDDEN + LAYERS * LAYER  # elements of the tp-sharded weights
NORMS = LAYERS * HIDDEN  # elements of the replicated norms


def _json(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    capsys.readouterr()  # what earlier calls printed
    assert main(["reshard", TRAINER, SERVER, "--format", "json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_element_moves_once_per_server_replica_across_hosts(
        capsys: pytest.CaptureFixture[str]) -> None:
    got = _json(capsys)
    assert len(got["tensors"]) == 2 + 5 * LAYERS
    total = got["total"]
    assert total["bytes"] == (2 * SHARDED + 8 * NORMS) * 2  # 2 bytes (bf16) each
    assert total["tiers"] == {"kept": 0, "host": 0, "domain": 0, "across": total["bytes"]}
    assert total["rounds"] == 2  # every server rank hears from two trainer ranks


def test_the_busiest_rank_carries_its_share(capsys: pytest.CaptureFixture[str]) -> None:
    """Each of the 8 server ranks receives a quarter of the weights and every norm."""
    got = _json(capsys)
    assert got["total"]["busiest"]["bytes"] == (SHARDED // 4 + NORMS) * 2


def test_one_ranks_transfers_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    got = _json(capsys, "--rank", "9")
    mine = got["rank"]["tensors"]["layers.0.wo"]
    assert mine["sends"] == [] and mine["kept"] == 0
    assert sum(n for _, n, _ in mine["receives"]) == HIDDEN * HIDDEN // 4 * 2
    assert main(["reshard", TRAINER, SERVER, "--rank", "9"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"layers\.0\.wo: receives 256\.0 KiB from rank \d", text), text


def test_a_machine_with_both_sides_on_one_host_moves_inside_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    got = _json(capsys, "--devices-per-host", "16")
    assert got["total"]["tiers"]["host"] == got["total"]["bytes"] > 0


def test_on_a_machine_of_fast_domains_every_byte_changes_host_inside_a_domain(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``examples/machine.json``: 4 devices a host, 18 hosts a domain; the trainer (ranks 0-7)
    and the server (8-15) share no host but one domain, so every byte is in ``domain``."""
    machine = str(EXAMPLES / "machine.json")
    got = _json(capsys, "--topology", machine)
    total = got["total"]
    assert total["tiers"] == {"kept": 0, "host": 0, "domain": total["bytes"], "across": 0}
    assert all(t["tiers"]["domain"] == t["bytes"] > 0 for t in got["tensors"])
    assert main(["reshard", TRAINER, SERVER, "--topology", machine]) == 0
    head, embed = (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines()[:2])
    assert head[4:9] == ["moved", "kept", "host", "domain", "across"]
    assert embed[0] == "embed" and embed[4:9] == ["125.0 MiB", "0 B", "0 B", "125.0 MiB", "0 B"]


def test_the_text_and_the_json_name_the_same_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    tiers = list(_json(capsys)["total"]["tiers"])
    assert main(["reshard", TRAINER, SERVER]) == 0
    text = capsys.readouterr().out
    assert re.split(r"\s{2,}", text.splitlines()[0])[5:9] == tiers
    assert tiers == ["kept", "host", "domain", "across"]
    assert "total: 506.1 MiB moved; kept 0 B, host 0 B, domain 0 B, across 506.1 MiB" in text


def test_the_svg_has_one_cell_per_pair_of_ranks(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "moves.svg"
    assert main(["reshard", TRAINER, SERVER, "--svg", str(out)]) == 0
    pairs = _json(capsys)
    picture = out.read_text()
    assert picture.startswith("<svg") and picture.rstrip().endswith("</svg>")
    assert picture.count("<rect") == 16  # 8 server ranks, 2 trainer ranks each
    assert pairs["total"]["rounds"] == 2


def test_plans_naming_other_tensors_are_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.py"
    other.write_text("from mesh import MeshView, Replicate, Sharding\n"
                     "TENSORS = {'x': Sharding(MeshView.from_shape(2, ('a',)), [Replicate()], "
                     "(4,))}\n")
    assert main(["reshard", TRAINER, str(other)]) == 2
    assert "the two plans must name the same tensors" in capsys.readouterr().err


@pytest.mark.parametrize("body, words", [
    ("VIEWS = {}\n", "must define TENSORS"),
    ("TENSORS = {'embed': 3}\n", "every entry must be a name (str) -> mesh.Sharding"),
    ("TENSORS = {'embed': 1}\nTOPOLOGY = 'x'\n", "TOPOLOGY"),
])
def test_bad_plan_files_are_refused_naming_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, words: str) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(body)
    assert main(["reshard", TRAINER, str(bad)]) == 2
    assert words in capsys.readouterr().err


def test_shapes_that_differ_are_refused(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.py"
    other.write_text((EXAMPLES / "server.py").read_text().replace("VOCAB, LAYERS = 1024",
                                                                   "VOCAB, LAYERS = 2048"))
    assert main(["reshard", TRAINER, str(other)]) == 2
    assert "one tensor shape on both sides" in capsys.readouterr().err


def _huge_pair(tmp_path: Path) -> tuple[str, str]:
    """Two plan files of one weight over 2**22 ranks: more destination ranks than a plan's
    totals list."""
    paths = []
    for name, placements in (("src", "(Replicate(), Shard(0))"),
                             ("dst", "(Shard(0), Replicate())")):
        path = tmp_path / f"{name}.py"
        path.write_text("from mesh import MeshView, Replicate, Shard, Sharding\n"
                        "MESH = MeshView.from_shape((2**19, 8), ('dp', 'tp'))\n"
                        f"TENSORS = {{'w': Sharding(MESH, {placements}, (64,))}}\n")
        paths.append(str(path))
    return paths[0], paths[1]


def test_a_bound_the_command_cannot_raise_is_named_without_a_python_hint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 44, item 7: the refusal said "limit=1,048,576 ... the default is 16,777,216"
    to a user who cannot pass limit=; it names the bound and that no flag raises it."""
    assert main(["reshard", *_huge_pair(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "at most 1,048,576, and this destination has 4,194,304" in err, err
    assert "no meshlayout flag or environment variable raises it" in err
    assert "limit=" not in err and "16,777,216" not in err and "Reshard." not in err

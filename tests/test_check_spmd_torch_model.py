"""check_spmd follows the torch it models (``torch_version=``, ``torch_config=``): whether torch
splits the world for a group its members create (by version, requested backend, lazy_init
and torchcomms), and the communicators pipelining makes (2.14's per-direction pair, 2.15's
per-edge children).  The version is a parameter, so every torch's behaviour is checked
whichever torch is installed; where a real torch runs, the test follows its version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backend import GroupOptions, check_spmd, init_device_mesh
from backend._spmd._torch_model import TorchModel, edge_split_rounds

VERSIONS = ("2.13.0", "2.14.1", "2.15.0")


class _Lazy:
    """Backend options that set ``lazy_init`` (as an NCCL options object would)."""

    lazy_init = True


def _copy_of_tp(options: GroupOptions) -> Any:
    """A tagged copy of tp, created among its members only, on an NCCL (cuda) world."""
    def program(backend: Any) -> None:
        mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"), backend=backend)
        copy = mesh["tp"]._flatten("tp_copy", options)
        backend.all_reduce((8,), group=copy.get_group())
    return program


@pytest.mark.parametrize(("options", "split_in"), [
    (GroupOptions(tag="copy"), {"2.13.0", "2.14.1", "2.15.0"}),
    (GroupOptions(tag="copy", backend="gloo"), set()),
    (GroupOptions(tag="copy", backend="cpu:gloo,cuda:nccl"), {"2.13.0", "2.14.1", "2.15.0"}),
    (GroupOptions(tag="copy", pg_options=_Lazy()), {"2.13.0", "2.14.1"}),
], ids=["default", "gloo", "mixed", "lazy_init"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_members_only_group_is_a_hidden_split_where_that_torch_splits(
        options: GroupOptions, split_in: set[str], version: str) -> None:
    """Torch splits the device-bound world for a group that asks for the parent's NCCL
    (every version), never for one that asks for Gloo, and 2.15 never with lazy_init
    options; a group made fresh meets among its members, so the job runs."""
    report = check_spmd(8, _copy_of_tp(options), backend="nccl", torch_version=version)
    assert ("hidden_split" in report.kinds()) == (version in split_in)
    assert report.ok == (version not in split_in)


@pytest.mark.parametrize("classes", ["auto", lambda r: r // 4])
def test_ranks_derived_from_their_class_keep_the_backend_asked_for(classes: Any) -> None:
    """Checking one rank per class derives the others' creations with the backend and
    options their group asks for: a Gloo copy stays no hidden split on every rank."""
    program = _copy_of_tp(GroupOptions(tag="copy", backend="gloo"))
    assert check_spmd(8, program, backend="nccl", classes=classes).ok
    hidden = check_spmd(8, _copy_of_tp(GroupOptions(tag="copy")), backend="nccl",
                        classes=classes)
    assert hidden.kinds() == {"hidden_split"}


@pytest.mark.parametrize("version", VERSIONS)
def test_under_torchcomms_a_members_only_group_is_made_by_its_members(version: str) -> None:
    """torchcomms (``config.use_torchcomms``) makes subgroups by a members-only rendezvous
    from 2.14 on; 2.13 still splits for them."""
    report = check_spmd(8, _copy_of_tp(GroupOptions(tag="copy")), backend="nccl",
                        torch_version=version, torch_config={"use_torchcomms": True})
    assert ("hidden_split" in report.kinds()) == (version == "2.13.0")


def test_2_15_splits_only_for_the_parents_backend_name() -> None:
    """2.15 compares names: ``nccl-legacy`` or ``nccl2`` asked on a ``nccl`` world is made
    fresh, though 2.15's ``nccl`` is nccl2."""
    model = TorchModel.of("2.15.0")
    assert [model.hidden_split(b) for b in (None, "nccl", "NCCL", "nccl2", "nccl-legacy")] \
        == [True, True, True, False, False]


def test_the_hidden_split_words_offer_lazy_init_on_2_15_only() -> None:
    program = _copy_of_tp(GroupOptions(tag="copy"))
    on_15 = str(check_spmd(8, program, backend="nccl", torch_version="2.15.0"))
    on_13 = str(check_spmd(8, program, backend="nccl", torch_version="2.13.0"))
    assert "lazy_init" in on_15 and "lazy_init" not in on_13


def test_bad_versions_and_flags_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"not modelled: check_spmd models torch 2\.13 to 2\.15"):
        TorchModel.of("2.12.0")
    with pytest.raises(ValueError, match="'pipeline_per_direction_p2p'"):
        TorchModel.of("2.14.1", {"pipeline_per_edge_p2p": True})  # the 2.15 name
    with pytest.raises(ValueError, match="'pipeline_per_edge_p2p'"):
        TorchModel.of("2.15.0", {"pipeline_per_direction_p2p": True})  # the 2.14 name
    with pytest.raises(ValueError, match="to bools"):
        TorchModel.of("2.15.0", {"use_torchcomms": 1})  # type: ignore[dict-item]
    assert TorchModel.of("2.16.0").version == (2, 15)  # a newer torch: as the newest


# ---- pipelining's own communicators --------------------------------------------------------

PP2, PP4, LOOPED_PP4 = (0, 1), (0, 1, 2, 3), (0, 1, 2, 3, 0, 1, 2, 3)


@pytest.mark.parametrize(("stages", "directed"), [(PP2, 2), (PP4, 6), (LOOPED_PP4, 8)])
def test_2_15_makes_one_communicator_per_directed_edge(stages: tuple[int, ...],
                                                       directed: int) -> None:
    """One 2-rank child per directed physical edge: PP2 2, PP4 6, looped PP4 8 (its stages
    revisit ranks: the edge 3 -> 0 closes the loop); each round's pairs are disjoint."""
    on = TorchModel.of("2.15.0", {"pipeline_per_edge_p2p": True})
    rounds = on.pipeline_splits(stages, 4)
    edges = [e for r in rounds for e in r]
    assert len(edges) == len(set(edges)) == directed
    assert all(len({r for e in rnd for r in e}) == 2 * len(rnd) for rnd in rounds)
    assert TorchModel.of("2.15.0").pipeline_splits(stages, 4) == ()  # flag off: none
    assert TorchModel.of("2.15.0", {"use_torchcomms": True}).pipeline_splits(stages, 4) == \
        rounds  # on with torchcomms


def test_2_14_makes_two_communicators_of_the_whole_group() -> None:
    on = TorchModel.of("2.14.1", {"pipeline_per_direction_p2p": True})
    assert on.pipeline_splits(LOOPED_PP4, 4) == (((0, 1, 2, 3),), ((0, 1, 2, 3),))
    assert TorchModel.of("2.14.1").pipeline_splits(LOOPED_PP4, 4) == ()
    assert TorchModel.of("2.13.0").pipeline_splits(LOOPED_PP4, 4) == ()


def test_the_rounds_are_torchs_own() -> None:
    """On a torch that has per-edge p2p (2.15), its ``_directed_edge_split_rounds`` gives the
    same rounds; on an older torch there is nothing to compare (skipped)."""
    p2p = pytest.importorskip("torch.distributed.pipelining._p2p")
    theirs = getattr(p2p, "_directed_edge_split_rounds", None)
    if theirs is None:
        pytest.skip("this torch has no per-edge p2p (torch < 2.15)")
    for stages in (PP2, PP4, LOOPED_PP4, (0, 1, 1, 2, 0), (3, 2, 1, 0, 0, 1, 2, 3)):
        assert edge_split_rounds(stages) == theirs(stages)


def _pipeline(stages: tuple[int, ...], skip: int | None = None) -> Any:
    """An 8-rank (dp, pp) job on NCCL, pp as many as the stages' ranks, whose ranks (but
    ``skip``) set a pipeline schedule up."""
    size = max(stages) + 1

    def program(backend: Any) -> None:
        mesh = init_device_mesh("cuda", (8 // size, size), mesh_dim_names=("dp", "pp"),
                                backend=backend)
        pp = mesh.get_group("pp")
        if backend.rank != skip:
            backend.pipeline_schedule(stages, group=pp)
            backend.pipeline_schedule(stages, group=pp)  # torch caches: made once
        backend.all_reduce((8,), group=pp)
    return program


def _held(stages: tuple[int, ...], version: str, config: dict[str, bool]) -> int:
    """The most communicators a rank holds, read from the budget finding at budget 1."""
    report = check_spmd(8, _pipeline(stages), backend="nccl", communicators=1,
                        torch_version=version, torch_config=config)
    [over] = [f for f in report.findings if f.kind == "budget"]
    assert report.kinds() == {"budget"}, report  # the splits meet: only the budget is over
    return int(over.text.split("hold up to ")[1].split()[0])


@pytest.mark.parametrize(("stages", "per_rank"), [(PP2, 2), (PP4, 4), (LOOPED_PP4, 4)])
def test_the_budget_counts_the_per_edge_communicators(stages: tuple[int, ...],
                                                      per_rank: int) -> None:
    """A rank holds its incident directed edges besides the world and its pp group (PP2
    one peer, two directions; the middle of PP4 two peers; looped PP4 every rank so), and
    2.14's two whole-group communicators; none with the flag off or on 2.13."""
    off = _held(stages, "2.15.0", {})
    assert off == 2  # the world and the pp group
    assert _held(stages, "2.15.0", {"pipeline_per_edge_p2p": True}) == off + per_rank
    assert _held(stages, "2.14.1", {"pipeline_per_direction_p2p": True}) == off + 2
    assert _held(stages, "2.13.0", {}) == off


def test_a_rank_that_skips_the_schedule_leaves_its_pp_group_waiting() -> None:
    report = check_spmd(8, _pipeline(LOOPED_PP4, skip=5), backend="nccl",
                        torch_version="2.15.0", torch_config={"pipeline_per_edge_p2p": True})
    assert "hidden_split" in report.kinds()
    text = str(report)
    assert "rank 5 never make(s) the split_group" in text and "(4, 5, 6, 7)" in text
    # the other pp group is untouched
    assert check_spmd(8, _pipeline(LOOPED_PP4, skip=5), backend="nccl",
                      torch_version="2.15.0").ok


def test_stages_off_the_group_are_refused() -> None:
    def program(backend: Any) -> None:
        mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "pp"), backend=backend)
        backend.pipeline_schedule((0, 4), group=mesh.get_group("pp"))  # a pp group of 4

    report = check_spmd(8, program, backend="nccl", torch_version="2.15.0",
                        torch_config={"pipeline_per_edge_p2p": True})
    assert report.errors and "stages must be a non-empty list" in report.errors[0][2]


def _split_of_half(backend: Any) -> None:
    """Ranks 0 to 3 split their own group in two; ranks 4 to 7 split nothing."""
    import torch.distributed as dist

    low, high = dist.new_group([0, 1, 2, 3]), dist.new_group([4, 5, 6, 7])
    if backend.rank < 4:
        pair = dist.split_group(parent_pg=low, split_ranks=[[0, 1], [2, 3]])
        dist.all_reduce(__import__("torch").ones(2), group=pair)
    del high


@pytest.mark.filterwarnings("ignore")
def test_torchs_split_of_a_subgroup_meets_its_parent_only() -> None:
    """A ``dist.split_group`` of a group is entered by that group's ranks (not the world):
    ranks 4 to 7 owe it nothing, and ranks 0 to 3 hold 3 communicators each (the world,
    their group, their pair: the pair created and the pair called on are one).  Torch
    2.15 splits on any backend without a bound device; before 2.15 torch's fake world has
    none, and split_group refuses (the test follows the installed torch)."""
    torch = pytest.importorskip("torch")
    report = check_spmd(8, _split_of_half, backend="nccl", torch=True, communicators=3)
    if TorchModel.of(torch.__version__).version < (2, 15):
        assert report.errors and "not safe to split" in report.errors[0][2]
        return
    assert report.ok, report


@pytest.mark.filterwarnings("ignore")
def test_a_torch_program_describes_its_schedule_too() -> None:
    """With ``torch=True`` the recorder takes ``pipeline_schedule`` as well (torch's own
    schedule makes no split on its fake process group), on a pp group torch made."""
    pytest.importorskip("torch")

    def program(backend: Any) -> None:
        import torch.distributed as dist

        low, high = dist.new_group([0, 1, 2, 3]), dist.new_group([4, 5, 6, 7])
        backend.pipeline_schedule(LOOPED_PP4, group=low if backend.rank < 4 else high)

    edge = {"pipeline_per_edge_p2p": True}
    assert check_spmd(8, program, torch=True, communicators=6, torch_version="2.15.0",
                      torch_config=edge).ok
    over = check_spmd(8, program, torch=True, communicators=5, torch_version="2.15.0",
                      torch_config=edge)
    assert over.kinds() == {"budget"} and "hold up to 6 communicators" in str(over)


@pytest.mark.timeout(240)
def test_the_model_is_what_torch_makes_on_gloo(tmp_path: Path) -> None:
    """On torch 2.15 (skipped before: no per-edge p2p), torch's own per-edge setup on 4 Gloo
    processes (``split_group`` works on Gloo from 2.15) makes, for a looped PP4, the
    ``split_group`` calls the model says, in order, and each rank gets its 4 directed edges
    (8 in all), each group ordered source then destination."""
    p2p = pytest.importorskip("torch.distributed.pipelining._p2p")
    if not hasattr(p2p, "_build_p2p_edge_groups"):
        pytest.skip("this torch has no per-edge p2p (torch < 2.15)")
    import torch
    from gloo_launch import launch

    _, runs, logs = launch(Path(__file__).resolve().parent / "pp_edges_gloo_worker.py", 4,
                           ",".join(map(str, LOOPED_PP4)), tmp_path, bound_s=180)
    assert sorted(runs) == [0, 1, 2, 3], logs
    model = TorchModel.of(torch.__version__, {"pipeline_per_edge_p2p": True})
    rounds = [[list(e) for e in r] for r in model.pipeline_splits(LOOPED_PP4, 4)]
    for rank, run in runs.items():
        assert run["splits"] == rounds
        mine = sorted(list(e) for r in rounds for e in r if rank in e)
        assert run["edges"] == run["members"] == mine and len(mine) == 4
    assert len({tuple(e) for run in runs.values() for e in run["edges"]}) == 8

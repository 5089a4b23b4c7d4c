"""Surviving failed ranks, by example: ``mesh.blast``, ``drop``, ``substitute`` and
``survive`` on the issue's examples and a torchtitan-style plan, with expected values
written out by hand; typed refusals name the bad value and the valid choices.  (The laws
over random views: ``property_tests/test_mesh_recover_laws.py``.)"""

from __future__ import annotations

import json
import pickle

import pytest
from work_bound import bounded

from mesh import (
    Blast,
    DimBlast,
    InvalidRanksError,
    MeshTypeError,
    MeshView,
    RankNotInMeshError,
    Survival,
    SurvivalError,
    TooManyRanksError,
    UnknownDimError,
    UnknownViewError,
    ViewBlast,
    blast,
    concatenate,
    drop,
    substitute,
    survive,
)

DP_TP = MeshView.from_shape((4, 8), ("dp", "tp"))
TITAN = MeshView.from_shape((2, 2, 2, 2), ("dp_replicate", "dp_shard", "cp", "tp"))


def titan(world: MeshView) -> dict[str, MeshView]:
    """torchtitan's meshes: the world, the flattened dp, dp_cp and dp_shard_cp, and the dense
    mesh (dp_replicate, dp_shard_cp, tp) concatenated from slices."""
    shard_cp = world["dp_shard", "cp"].flatten(name="dp_shard_cp")
    return {"world": world,
            "dp": world["dp_replicate", "dp_shard"].flatten(name="dp"),
            "dp_cp": world["dp_replicate", "dp_shard", "cp"].flatten(name="dp_cp"),
            "dense": concatenate([world["dp_replicate"], shard_cp, world["tp"]])}


# ---- blast --------------------------------------------------------------------------------

def test_blast_reports_the_broken_groups_and_stranded_ranks_per_dim() -> None:
    hit = blast({"world": DP_TP}, [13])
    tp, dp = hit["world"]["tp"], hit["world"]["dp"]
    assert (tp.broken_groups, tp.intact_groups, tp.stranded_ranks) == (1, 3, 7)
    assert tp.first_broken_groups == ((8, 9, 10, 11, 12, 13, 14, 15),)
    assert tp.first_stranded_ranks == (8, 9, 10, 11, 12, 14, 15)
    assert (dp.broken_groups, dp.stranded_ranks) == (1, 3)
    assert dp.first_broken_groups == ((5, 13, 21, 29),)
    assert hit["world"].broken_instances == 1 and hit["world"].broken_instance_leaders == (0,)


def test_blast_to_dict_is_json_with_one_entry_per_view_and_dim() -> None:
    data = blast({"world": DP_TP, "tp": DP_TP["tp"]}, [13, 14]).to_dict()
    assert json.loads(json.dumps(data)) == data and data["failed"] == [13, 14]
    assert [(e["view"], e["dim"]) for e in data["blast"]] == [("world", "dp"), ("world", "tp"),
                                                             ("tp", "tp")]
    assert data["blast"][2] == {"view": "tp", "dim": "tp", "group_size": 8, "groups": 4,
                                "broken_groups": 1, "intact_groups": 3, "stranded_ranks": 6,
                                "first_broken_groups": [[8, 9, 10, 11, 12, 13, 14, 15]],
                                "first_stranded_ranks": [8, 9, 10, 11, 12, 15]}
    assert data["views"][1] == {"view": "tp", "instances": 4, "broken_instances": 1,
                                "first_broken_instances": [8]}


def test_is_broken_asks_about_one_rank() -> None:
    hit = blast(DP_TP, [13])
    assert [hit.is_broken("view", "tp", r) for r in (7, 8, 16)] == [False, True, False]
    assert hit.is_broken("view", "dp", 29) and not hit.is_broken("view", "dp", 28)


def test_the_limit_bounds_what_is_listed_not_what_is_counted() -> None:
    tp = blast(DP_TP, [1, 9, 17], limit=10)["view"]["tp"]
    assert tp.first_broken_groups == ((0, 1, 2, 3, 4, 5, 6, 7),)  # a second would pass 10
    assert tp.first_stranded_ranks == (0, 2, 3, 4, 5, 6, 7, 8, 10, 11)
    assert (tp.broken_groups, tp.stranded_ranks) == (3, 21)


def test_a_rank_outside_one_view_leaves_it_alone() -> None:
    small = MeshView.from_ranks([0, 1], ("tp",))
    hit = blast({"world": DP_TP, "small": small}, [13])
    assert hit["small"]["tp"].broken_groups == 0 and hit["world"]["tp"].broken_groups == 1


def test_blast_over_2_40_ranks_does_not_list_the_universe() -> None:
    huge = MeshView.from_shape((2**20, 2**10, 2**10), ("dp", "cp", "tp"))
    with bounded(events=200_000, peak_bytes=1 << 20):
        hit = blast({"huge": huge}, [0, 2**39, 2**40 - 1])
    dp = hit["huge"]["dp"]
    assert (dp.broken_groups, dp.stranded_ranks) == (2, 2 * 2**20 - 3)  # 0 and 2**39 share one
    assert dp.first_broken_groups == () and dp.first_stranded_ranks[:2] == (2**20, 2**21)
    assert hit["huge"]["tp"].broken_leaders == (0, 2**39, 2**40 - 2**10)


# ---- drop and substitute ------------------------------------------------------------------

def test_drop_removes_the_failed_dp_slice_and_keeps_tp_groups() -> None:
    survivors = drop(DP_TP, [13], "dp")
    assert survivors.shape == (3, 8) and survivors.ranks.size == 24
    assert survivors.groups("tp") == ((0, 1, 2, 3, 4, 5, 6, 7), tuple(range(16, 24)),
                                      tuple(range(24, 32)))
    assert survivors.group(5, "dp") == (5, 21, 29)


def test_drop_of_a_transposed_world_keeps_its_order() -> None:
    survivors = drop(DP_TP["tp", "dp"], [13], "dp")
    assert survivors.names == ("tp", "dp") and survivors.group(0, "dp") == (0, 16, 24)


def test_drop_of_the_last_slice_gives_an_identity_universe() -> None:
    assert drop(DP_TP, [30], "dp") == MeshView.from_shape((3, 8), ("dp", "tp"))


def test_substitute_replaces_the_lowest_failed_rank_by_the_first_spare() -> None:
    new = substitute(DP_TP, [13, 2], [40, 41, 42])
    assert new.group(40, "tp") == (0, 1, 40, 3, 4, 5, 6, 7)
    assert new.group(41, "dp") == (5, 41, 21, 29) and new.shape == (4, 8)


# ---- survive: a whole plan ----------------------------------------------------------------

def test_a_torchtitan_plan_survives_a_dropped_dp_replicate_slice() -> None:
    after = survive(titan, TITAN, [5], drop="dp_replicate")
    assert after.world.shape == (1, 2, 2, 2) and after.dropped == "dp_replicate"
    assert after.views["dp_cp"].group(9, "dp_cp") == (9, 11, 13, 15)
    assert after.views["dense"].shape == (1, 4, 2)
    for view, dim in [("world", "tp"), ("world", "cp"), ("world", "dp_shard"),
                      ("dense", "dp_shard_cp"), ("dense", "tp")]:
        assert after.is_intact(view, dim, 9), (view, dim)
    for view, dim in [("world", "dp_replicate"), ("dp", "dp"), ("dp_cp", "dp_cp")]:
        assert not after.is_intact(view, dim, 9), (view, dim)
    assert after.intact_groups("dense", "tp") == ((8, 9), (10, 11), (12, 13), (14, 15))
    assert after.new_groups("dp", "dp") == ((8, 12), (9, 13), (10, 14), (11, 15))


def test_a_torchtitan_plan_survives_with_a_spare() -> None:
    after = survive(titan, TITAN, [5], spares=[16, 17])
    assert after.spares == (16,) and after.world.shape == TITAN.shape
    assert after.views["dense"].group(16, "tp") == (4, 16)
    assert not after.is_intact("dense", "tp", 4) and after.is_intact("dense", "tp", 6)
    assert after.is_intact("dp", "dp", 0) and not after.is_intact("dp", "dp", 1)
    assert {e["view"]: e["new_groups"] for e in after.to_dict()["groups"]
            if e["dim"] == "tp"} == {"world": 1, "dense": 1}


def test_survival_carries_the_blast_of_the_old_plan() -> None:
    after = survive(titan, TITAN, [5], drop="dp_replicate")
    assert after.blast.is_broken("dp", "dp", 1) and not after.blast.is_broken("dp", "dp", 2)
    assert pickle.loads(pickle.dumps(after)) == after and hash(after) == hash(after)


def test_survival_data_is_json() -> None:
    data = survive(titan, TITAN, [5, 6], drop="dp_replicate").to_dict()
    assert json.loads(json.dumps(data)) == data
    assert MeshView.from_dict(data["world"]).ranks.size == 8


# ---- refusals: typed, naming the value and the choices ------------------------------------

def test_drop_when_every_slice_is_broken_names_the_dims_that_would_do() -> None:
    with pytest.raises(SurvivalError, match=r"each of its 4 slices .* survivors: \['tp'\]"):
        drop(DP_TP, [0, 9, 18, 27], "dp")


def test_drop_of_a_view_with_several_instances_is_refused() -> None:
    with pytest.raises(SurvivalError, match="4 instances"):
        drop(DP_TP["tp"], [13], "tp")


def test_a_failed_rank_outside_the_view_is_named() -> None:
    with pytest.raises(RankNotInMeshError, match="failed rank 32 "):
        drop(DP_TP, [32], "dp")
    with pytest.raises(RankNotInMeshError, match="failed rank 99 "):
        blast({"a": DP_TP}, [99])


def test_failed_ranks_must_be_an_ordered_sequence() -> None:
    with pytest.raises(MeshTypeError, match="failed ranks must be an ordered sequence"):
        blast(DP_TP, {13})


def test_bad_spares_are_refused_by_name() -> None:
    with pytest.raises(SurvivalError, match="2 failed ranks need 2 spares, got 1"):
        substitute(DP_TP, [1, 2], [40])
    with pytest.raises(SurvivalError, match="spare rank 3 is already in the view"):
        substitute(DP_TP, [1], [3])
    with pytest.raises(SurvivalError, match="spare rank 40 is listed twice"):
        substitute(DP_TP, [1], [40, 40])
    with pytest.raises(InvalidRanksError, match="spare rank -1"):
        substitute(DP_TP, [1], [-1])


def test_survive_takes_exactly_one_way() -> None:
    with pytest.raises(SurvivalError, match="exactly one way"):
        survive(titan, TITAN, [5])
    with pytest.raises(SurvivalError, match="exactly one way"):
        survive(titan, TITAN, [5], drop="tp", spares=[16])
    with pytest.raises(UnknownDimError, match="'pp'"):
        survive(titan, TITAN, [5], drop="pp")


def test_a_plan_that_cannot_be_rederived_says_so() -> None:
    def fixed(world: MeshView) -> dict[str, MeshView]:
        return {"moe": world.flatten().unflatten(0, (4, 4), ("ep", "etp"))}

    with pytest.raises(SurvivalError, match="cannot be derived from the surviving world"):
        survive(fixed, TITAN, [5], drop="dp_replicate")


def test_a_plan_over_another_universe_or_with_other_names_is_refused() -> None:
    with pytest.raises(SurvivalError, match="not over the world"):
        survive(lambda w: {"x": DP_TP}, TITAN, [5], spares=[16])
    with pytest.raises(SurvivalError, match="has dims"):
        survive(lambda w: {"x": w if w.ranks.is_identity else w.rename({"tp": "t"})},
                TITAN, [5], spares=[16])
    with pytest.raises(MeshTypeError, match="plan must be a function"):
        survive("titan", TITAN, [5], spares=[16])  # type: ignore[arg-type]


def test_the_result_values_are_made_by_their_functions_only() -> None:
    with pytest.raises(MeshTypeError, match=r"made by mesh\.blast"):
        Blast()
    with pytest.raises(MeshTypeError, match=r"made by mesh\.survive"):
        Survival()


def test_drop_lists_at_most_its_limit() -> None:
    with pytest.raises(TooManyRanksError, match="drop's surviving universe"):
        drop(MeshView.from_shape((2**30, 2**30), ("dp", "tp")), [0], "dp")


def test_a_blast_is_read_by_view_then_by_dim() -> None:
    world = MeshView.from_shape((4, 8), ("dp", "tp"))
    hit = blast({"world": world}, [13])
    view, tp = hit["world"], hit["world"]["tp"]
    assert isinstance(view, ViewBlast) and isinstance(tp, DimBlast)
    assert (view.name, view.broken_instances, tp.dim, tp.broken_groups) == ("world", 1, "tp", 1)


class _Unprintable(Exception):
    """An exception whose message cannot be read (its ``__str__`` raises)."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_a_plan_raising_an_unprintable_exception_is_a_survival_error() -> None:
    """Before: ``str()`` of the plan's exception raised again, untyped, out of ``survive``."""
    def plan(world: MeshView) -> dict[str, MeshView]:
        if not world.ranks.is_identity:
            raise _Unprintable()
        return {"w": world}

    with pytest.raises(SurvivalError, match=r"raised _Unprintable: <its message could not be"):
        survive(plan, DP_TP, [13], drop="dp")


@pytest.mark.parametrize("key", ["np.array([])", "np.array(['world'])", "1.5", "None"])
def test_a_blast_named_by_no_str_is_an_unknown_view(key: str) -> None:
    """Before: ``Blast[np.array([])]`` compared the array with each name and raised NumPy's
    ``ValueError``."""
    import numpy as np

    hit = blast({"world": DP_TP}, [13])
    with pytest.raises(UnknownViewError, match="no view"):
        hit[eval(key, {"np": np})]


def test_an_unknown_view_is_an_unknown_view_error_naming_the_views() -> None:
    """Blast and Survival name the views they hold; the error is a ``KeyError`` and, as
    before it had its own class, an ``UnknownDimError``."""
    hit = blast({"world": DP_TP}, [13])
    after = survive(titan, TITAN, [5], drop="dp_replicate")
    calls = [lambda: hit["dense"], lambda: hit.is_broken("dense", "tp", 0),
             lambda: after.is_intact("moe", "tp", 0), lambda: after.group_counts("moe", "tp"),
             lambda: after.intact_groups("moe", "tp"), lambda: after.new_groups("moe", "tp")]
    for call in calls:
        with pytest.raises(UnknownViewError, match=r"no view 'moe'|no view 'dense'") as e:
            call()
        assert isinstance(e.value, KeyError) and isinstance(e.value, UnknownDimError)
        assert "'world'" in str(e.value)


def test_an_unknown_dim_of_a_known_view_is_no_unknown_view() -> None:
    with pytest.raises(UnknownDimError, match="'pp'") as e:
        blast({"world": DP_TP}, [13])["world"]["pp"]
    assert not isinstance(e.value, UnknownViewError)


@pytest.mark.parametrize("dim", ["a", "b", "c"])
def test_a_large_drop_cuts_the_same_slices_as_a_rank_tensor_does(dim: str) -> None:
    """Above 4,096 ranks the slices are cut by one NumPy gather: the same survivors, in the
    same order, as deleting the failed ranks' slices from the rank tensor."""
    import numpy as np

    world = MeshView.from_shape((16, 32, 8), ("a", "b", "c"))
    failed = [5, 1000, 4095]
    t = np.arange(world.size()).reshape(world.shape)
    k = "abc".index(dim)
    hit = sorted({int(np.argwhere(t == r)[0][k]) for r in failed})
    expected = np.delete(t, hit, axis=k)
    got = drop(world, failed, dim)
    assert got.shape == expected.shape
    instance = got.instance(int(expected.flat[0]), limit=1 << 14)
    assert np.array(instance).tolist() == expected.tolist()

"""The rank-list text every report shares (``mesh._core.ranks_text``): each style's words at
the lengths where the styles differ, written out as the eight routines it replaced wrote them
(the plan reports, the hang reader's groups, its ``who`` and its refusals, check_spmd's
groups and reports, a backend's group requests, and reshard's plan agreement), so a change
to any report's text shows here first; the name a mesh's groups carry in torch
(``group_desc``); a call in words (``call_text``), the ordinals and verbs of their sentences
(``nth``, ``verb``) and the sentence of a call some members never issue (``never_issued``),
as check_spmd and the hang reader wrote them; the kinds of check_spmd's and the hang
reader's findings; and the rank stuck behind others that both reports list
(``StuckRank``)."""

from __future__ import annotations

from typing import Any

import pytest

from mesh._core import (
    GROUP_DESC_PREFIX,
    FindingKind,
    InvalidRanksError,
    RankStyle,
    StuckRank,
    call_text,
    finding_kind,
    group_desc,
    never_issued,
    nth,
    ranks_text,
    verb,
)

TABLE = [
    (RankStyle.EXPLAIN, 0, "()"),
    (RankStyle.EXPLAIN, 1, "(0)"),
    (RankStyle.EXPLAIN, 2, "(0, 1)"),
    (RankStyle.EXPLAIN, 8, "(0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.EXPLAIN, 9, "(0, 1, 2, 3, 4, 5, …, 8)"),
    (RankStyle.EXPLAIN, 16, "(0, 1, 2, 3, 4, 5, …, 15)"),
    (RankStyle.EXPLAIN, 17, "(0, 1, 2, 3, 4, 5, …, 16)"),
    (RankStyle.EXPLAIN, 20, "(0, 1, 2, 3, 4, 5, …, 19)"),
    (RankStyle.GROUP, 0, "()"),
    (RankStyle.GROUP, 1, "(0,)"),
    (RankStyle.GROUP, 2, "(0, 1)"),
    (RankStyle.GROUP, 8, "(0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.GROUP, 9, "(0, 1, 2, 3, 4, 5, 6, …, 8; 9 ranks)"),
    (RankStyle.GROUP, 16, "(0, 1, 2, 3, 4, 5, 6, …, 15; 16 ranks)"),
    (RankStyle.GROUP, 17, "(0, 1, 2, 3, 4, 5, 6, …, 16; 17 ranks)"),
    (RankStyle.GROUP, 20, "(0, 1, 2, 3, 4, 5, 6, …, 19; 20 ranks)"),
    (RankStyle.WHO, 0, "ranks ()"),
    (RankStyle.WHO, 1, "rank 0"),
    (RankStyle.WHO, 2, "ranks (0, 1)"),
    (RankStyle.WHO, 8, "ranks (0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.WHO, 9, "ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 9 ranks)"),
    (RankStyle.WHO, 16, "ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 16 ranks)"),
    (RankStyle.WHO, 17, "ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 17 ranks)"),
    (RankStyle.WHO, 20, "ranks (0, 1, 2, 3, 4, 5, 6, 7, …; 20 ranks)"),
    (RankStyle.HANG, 0, "()"),
    (RankStyle.HANG, 1, "(0)"),
    (RankStyle.HANG, 2, "(0, 1)"),
    (RankStyle.HANG, 8, "(0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.HANG, 9, "(0, 1, 2, 3, 4, 5, 6, 7, …)"),
    (RankStyle.HANG, 16, "(0, 1, 2, 3, 4, 5, 6, 7, …)"),
    (RankStyle.HANG, 17, "(0, 1, 2, 3, 4, 5, 6, 7, …)"),
    (RankStyle.HANG, 20, "(0, 1, 2, 3, 4, 5, 6, 7, …)"),
    (RankStyle.SPMD_GROUP, 0, "()"),
    (RankStyle.SPMD_GROUP, 1, "(0,)"),
    (RankStyle.SPMD_GROUP, 2, "(0, 1)"),
    (RankStyle.SPMD_GROUP, 8, "(0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.SPMD_GROUP, 9, "(0, 1, 2, 3, 4, 5, ..., 8; 9 ranks)"),
    (RankStyle.SPMD_GROUP, 16, "(0, 1, 2, 3, 4, 5, ..., 15; 16 ranks)"),
    (RankStyle.SPMD_GROUP, 17, "(0, 1, 2, 3, 4, 5, ..., 16; 17 ranks)"),
    (RankStyle.SPMD_GROUP, 20, "(0, 1, 2, 3, 4, 5, ..., 19; 20 ranks)"),
    (RankStyle.SPMD, 0, "()"),
    (RankStyle.SPMD, 1, "0"),
    (RankStyle.SPMD, 2, "(0, 1)"),
    (RankStyle.SPMD, 8, "(0, 1, 2, 3, 4, 5, 6, 7)"),
    (RankStyle.SPMD, 9, "(0, 1, 2, 3, 4, 5, 6, 7, ...)"),
    (RankStyle.SPMD, 16, "(0, 1, 2, 3, 4, 5, 6, 7, ...)"),
    (RankStyle.SPMD, 17, "(0, 1, 2, 3, 4, 5, 6, 7, ...)"),
    (RankStyle.SPMD, 20, "(0, 1, 2, 3, 4, 5, 6, 7, ...)"),
    (RankStyle.AGREE, 0, "[]"),
    (RankStyle.AGREE, 1, "[0]"),
    (RankStyle.AGREE, 2, "[0, 1]"),
    (RankStyle.AGREE, 8, "[0, 1, 2, 3, 4, 5, 6, 7]"),
    (RankStyle.AGREE, 9, "[0, 1, 2, 3, 4, 5, 6, 7, 8]"),
    (RankStyle.AGREE, 16, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"),
    (RankStyle.AGREE, 17, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... 1 more]"),
    (RankStyle.AGREE, 20, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ... 4 more]"),
]


@pytest.mark.parametrize(("style", "n", "text"), TABLE)
def test_a_rank_list_is_written_as_its_style_wrote_it(style: RankStyle, n: int,
                                                     text: str) -> None:
    assert ranks_text(list(range(n)), style) == text


@pytest.mark.parametrize("style", list(RankStyle))
def test_a_tuple_a_list_and_a_range_read_the_same(style: RankStyle) -> None:
    for n in (0, 1, 2, 8, 9, 16, 17, 20):
        assert ranks_text(tuple(range(n)), style) == ranks_text(range(n), style) == \
            ranks_text(list(range(n)), style)


def test_the_table_covers_every_style() -> None:
    assert {style for style, _, _ in TABLE} == set(RankStyle)


def test_a_mesh_group_is_named_as_torch_names_a_device_mesh_group() -> None:
    assert group_desc("tp") == "mesh_tp"
    assert group_desc("dp_cp").startswith(GROUP_DESC_PREFIX)


def test_the_finding_kinds_are_the_words_reports_and_json_wrote() -> None:
    assert [k.value for k in FindingKind] == [
        "desync", "unmatched", "splits", "cache_hit", "hidden_split", "lifecycle",
        "uneven_hosts", "nvls", "budget", "foreign", "threads", "timeout", "memory"]
    assert all(k.words and k.words[0].islower() for k in FindingKind)


def test_a_finding_keeps_the_word_of_its_kind_as_a_plain_str() -> None:
    assert type(finding_kind(FindingKind.UNMATCHED)) is str
    assert finding_kind(FindingKind.UNMATCHED) == finding_kind("unmatched") == "unmatched"


@pytest.mark.parametrize(("shapes", "written"), [
    ((), "()"), (((),), "()"), (((4,),), "(4,)"), (((4, 8),), "(4, 8)"),
    (((4,), (2, 3)), "(4,), (2, 3)")])
def test_a_call_is_written_op_shapes_dtype_then_its_details(
        shapes: tuple[tuple[int, ...], ...], written: str) -> None:
    assert call_text("all_reduce", shapes, "float32") == f"all_reduce {written} float32"
    assert call_text("send", shapes, "int64", "to 3") == f"send {written} int64 to 3"


def test_a_call_is_counted_with_an_english_ordinal() -> None:
    assert [nth(n) for n in (1, 2, 3, 4, 10, 11, 12, 13, 20, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "10th", "11th", "12th", "13th", "20th", "21st", "22nd",
        "23rd", "101st", "111th", "112th"]


def test_a_verb_agrees_with_one_rank_or_many() -> None:
    assert verb((3,), "issues", "issue") == "issues"
    assert verb((1, 5), "issues", "issue") == verb((), "issues", "issue") == "issue"


def test_a_stuck_rank_unpacks_as_the_tuple_each_report_held_before() -> None:
    spmd = StuckRank(2, ("dp", (0, 2)), (0,))
    hang = StuckRank(2, object(), (0,))
    with pytest.deprecated_call():
        assert tuple(spmd) == (2, "dp", (0, 2), (0,))
    with pytest.deprecated_call():
        assert tuple(hang) == (2, hang.group, (0,))


@pytest.mark.parametrize(("rank", "waits_for"), [(-1, ()), (True, ()), ("2", ()), (2, [0]),
                                                 (2, (0, -1)), (2, (0.0,)), (1 << 63, ())])
def test_a_stuck_rank_refuses_what_is_not_a_rank(rank: Any, waits_for: Any) -> None:
    with pytest.raises(InvalidRanksError, match="a StuckRank's"):
        StuckRank(rank, "g", waits_for)


def test_an_unmatched_call_agrees_with_how_many_never_issue_it_and_how_many_wait() -> None:
    assert never_issued("G", (1, 3), "ranks (1, 3)", 1, "C", (0,), "rank 0", "W") == (
        "G: ranks (1, 3) never issue its 1st call (C), which rank 0 issues: it waits (W)")
    assert never_issued("G", (1,), "rank 1", 12, "C", (0, 2), "ranks (0, 2)", "W") == (
        "G: rank 1 never issues its 12th call (C), which ranks (0, 2) issue: they wait (W)")

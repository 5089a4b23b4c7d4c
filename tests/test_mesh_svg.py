"""SVG pictures of views, checked by parsing the SVG and against NumPy.

Expected ranks come from ``numpy.arange(n).reshape(shape)`` (identity views) or the
explicit rank array, indexed by hand; expected host boundaries from comparing that
array's hosts along its last two axes.  One test renders the SVG with a real
renderer (``rsvg-convert``, else headless Chromium) and skips without one.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mesh import (
    InvalidSizeError,
    MeshError,
    MeshTypeError,
    MeshView,
    RankNotInMeshError,
    Topology,
    UnknownDimError,
)
from mesh._draw import MAX_SVG_CELLS, PALETTE, svg

NS = "{http://www.w3.org/2000/svg}"
TITAN = ("pp", "dp", "cp", "tp")


def _root(picture: str) -> ET.Element:
    return ET.fromstring(picture)


def _by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if e.get("class") == cls]


def _cells(picture: str) -> list[dict[str, Any]]:
    """Each cell of a picture, in document order: rank (its text), fill and corner."""
    out = []
    for g in _by_class(_root(picture), "cell"):
        rect, text = g.find(f"{NS}rect"), g.find(f"{NS}text")
        assert rect is not None and text is not None and text.text is not None
        out.append({"rank": int(text.text), "fill": rect.get("fill"),
                    "x": float(rect.get("x", "nan")), "y": float(rect.get("y", "nan")),
                    "size": float(rect.get("width", "nan"))})
    return out


def _ranks(picture: str) -> list[int]:
    return [c["rank"] for c in _cells(picture)]


def _texts(root: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for e in _by_class(root, cls) for t in e.iter(f"{NS}text")]


def _neighbours(ranks: np.ndarray) -> list[tuple[int, int]]:
    """Pairs of ranks next to each other in a panel: along the last axis, or the second to
    last (1-D arrays: along the only axis)."""
    grid = ranks.reshape((-1, 1, ranks.shape[-1])) if ranks.ndim == 1 else \
        ranks.reshape((-1, *ranks.shape[-2:]))
    across = zip(grid[:, :, :-1].ravel(), grid[:, :, 1:].ravel())
    down = zip(grid[:, :-1, :].ravel(), grid[:, 1:, :].ravel())
    return [(int(a), int(b)) for a, b in itertools.chain(across, down)]


def _boundaries(picture: str, kind: str = "host-boundaries") -> set[frozenset[int]]:
    """The pairs of cells each host (or domain) line separates, read from its position."""
    cells = _cells(picture)
    at = {(c["x"], c["y"]): c["rank"] for c in cells}
    s = cells[0]["size"]
    found = []
    for g in _by_class(_root(picture), kind):
        for line in g.iter(f"{NS}line"):
            x1, y1, x2, y2 = (float(line.get(k, "nan")) for k in ("x1", "y1", "x2", "y2"))
            if x1 == x2:  # vertical: left and right of it
                assert y2 - y1 == s
                found.append(frozenset((at[(x1 - s, y1)], at[(x1, y1)])))
            else:
                assert (y1 == y2) and x2 - x1 == s
                found.append(frozenset((at[(x1, y1 - s)], at[(x1, y1)])))
    assert len(found) == len(set(found)), "a boundary is drawn twice"
    return set(found)


# ---- the document -------------------------------------------------------------------------
def test_output_is_a_well_formed_svg_1_1_document_with_its_size_set() -> None:
    picture = svg(MeshView.from_shape((2, 2, 4, 8), TITAN), host=lambda r: r // 8,
                  color_by="cp", rank=5)
    root = _root(picture)
    assert picture.startswith("<svg") and root.tag == f"{NS}svg"
    assert root.get("version") == "1.1"
    w, h = int(root.get("width", "0")), int(root.get("height", "0"))
    assert w > 0 and h > 0 and root.get("viewBox") == f"0 0 {w} {h}"
    assert "http" not in picture.replace("http://www.w3.org/2000/svg", "")  # self-contained


_DRAW_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
from mesh import MeshView, svg
titan = MeshView.from_shape((2, 2, 4, 8), ("pp", "dp", "cp", "tp"))
shuffled = np.random.default_rng(7).permutation(64).reshape(4, 16).tolist()
pictures = [
    svg(titan, host=lambda r: r // 8, color_by="cp", rank=5),
    svg(titan["tp", "pp"], host=lambda r: (r * 7) % 5, color_by="pp", rank=33, title="t & p"),
    svg(titan.flatten(("dp", "cp")), color_by=1),
    svg(MeshView.from_ranks(shuffled, ("a<b", 'c&"d')), host=lambda r: r % 3, color_by=0),
    svg(MeshView.from_shape((3, 5, 7), None), rank=100),
]
sys.stdout.buffer.write("\\n".join(pictures).encode("utf-8"))
"""


def test_the_same_input_gives_the_same_bytes_in_any_process_and_hash_seed() -> None:
    """Five drawings (colours, hosts, titles, transposed, flattened and explicit views) made
    in fresh interpreters under three ``PYTHONHASHSEED`` values are byte-identical: nothing
    in a picture depends on set or dict order of hashed strings, or on the process."""
    outputs = {}
    for seed in ("0", "12345", "4294967295"):
        out = subprocess.run([sys.executable, "-c", _DRAW_IN_A_FRESH_PROCESS],
                             capture_output=True, timeout=120, check=False,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.returncode == 0, out.stderr.decode()
        outputs[seed] = out.stdout
    assert outputs["0"].count(b"<svg") == 5
    assert outputs["12345"] == outputs["0"] and outputs["4294967295"] == outputs["0"]


def test_text_is_escaped_and_characters_xml_cannot_hold_are_replaced() -> None:
    view = MeshView.from_shape((2, 3), ("a<b", 'c&"d\x01'))
    root = _root(svg(view, title="<x> & y", color_by=0))
    assert _texts(root, "title") == ["<x> & y"]
    assert _texts(root, "axis") == ['c&"d\ufffd', "0", "1", "2", "a<b=0", "a<b=1"]
    assert "a&lt;b=0" in svg(view) and "c&amp;" in svg(view)


# ---- one cell per rank of the instance ----------------------------------------------------
@pytest.mark.parametrize("shape", [(8,), (3, 5), (2, 4, 8), (2, 2, 4, 8), (2, 2, 2, 2, 4)])
def test_cells_are_the_ranks_of_an_identity_view_in_row_major_order(
        shape: tuple[int, ...]) -> None:
    view = MeshView.from_shape(shape)
    assert _ranks(svg(view)) == np.arange(view.size()).tolist()


def test_cells_of_a_selection_are_the_instance_of_the_rank() -> None:
    whole = np.arange(64).reshape(2, 4, 8)  # (dp, cp, tp); rank 13 is at (0, 1, 5)
    view = MeshView.from_shape((2, 4, 8), ("dp", "cp", "tp"))["dp", "tp"]
    assert _ranks(svg(view, rank=13)) == whole[:, 1, :].ravel().tolist()


def test_without_a_rank_the_picture_is_instance_0() -> None:
    view = MeshView.from_shape((2, 4, 8), ("dp", "cp", "tp"))["cp"]
    assert view.instance(view.ranks(0)) == (0, 8, 16, 24)
    assert _ranks(svg(view)) == [0, 8, 16, 24]


def test_cells_of_an_explicit_universe_are_its_ranks() -> None:
    ranks = np.random.default_rng(7).permutation(np.arange(100, 124)).reshape(2, 3, 4)
    view = MeshView.from_ranks(ranks, ("a", "b", "c"))
    assert _ranks(svg(view)) == ranks.ravel().tolist()
    r = int(ranks[1, 2, 3])
    assert _ranks(svg(view["a", "c"], rank=r)) == ranks[:, 2, :].ravel().tolist()


def test_rank_numbers_shrink_to_fit_and_cells_grow_for_long_ranks() -> None:
    small = _root(svg(MeshView.from_shape((2, 2))))
    big = _root(svg(MeshView.from_ranks([[10**9, 10**9 + 1], [7, 8]])))
    font = [int(e.get("font-size", "0")) for e in _by_class(small, "cell")[0].iter(f"{NS}text")]
    font_big = [int(e.get("font-size", "0")) for e in _by_class(big, "cell")[0].iter(f"{NS}text")]
    assert font[0] > font_big[0] >= 10
    assert _cells(svg(MeshView.from_ranks([[10**9, 10**9 + 1]])))[0]["size"] > 10 * 0.6 * 10


# ---- colours ------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", TITAN)
def test_cells_of_one_group_share_a_fill_and_adjacent_groups_differ(dim: str) -> None:
    shape = (2, 2, 4, 8)
    view = MeshView.from_shape(shape, TITAN)
    k = TITAN.index(dim)
    ranks = np.arange(128).reshape(shape)
    group = {int(r): tuple(np.delete(np.argwhere(ranks == r)[0], k)) for r in ranks.ravel()}
    fill = {c["rank"]: c["fill"] for c in _cells(svg(view, color_by=dim))}
    by_group: dict[tuple[int, ...], set[str]] = {}
    for r, g in group.items():
        by_group.setdefault(g, set()).add(fill[r])
    assert all(len(f) == 1 for f in by_group.values()) and len(by_group) == 128 // shape[k]
    for a, b in _neighbours(ranks):
        assert (fill[a] == fill[b]) == (group[a] == group[b]), (a, b)


def test_adjacent_groups_differ_even_when_a_row_is_a_multiple_of_the_palette() -> None:
    """Down a panel, dim 0's groups are ``cols`` apart in order: 12 would repeat a colour."""
    ranks = np.arange(2 * 3 * len(PALETTE)).reshape(2, 3, len(PALETTE))
    fill = {c["rank"]: c["fill"] for c in _cells(svg(MeshView.from_shape(ranks.shape),
                                                     color_by=0))}
    for a, b in _neighbours(ranks):
        assert fill[a] != fill[b], (a, b)


def test_without_color_by_cells_are_coloured_by_host_or_plain() -> None:
    view = MeshView.from_shape((4, 8), ("dp", "tp"))
    by_host = {c["rank"]: c["fill"] for c in _cells(svg(view, host=lambda r: r // 16))}
    assert len({by_host[r] for r in range(16)}) == 1 and by_host[0] != by_host[16]
    assert len({c["fill"] for c in _cells(svg(view))}) == 1


# ---- host boundaries ----------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "per_host", "count"), [
    ((2, 4, 8), 8, 48),  # each row one host: 3 lines of 8 edges in each of 2 panels
    ((2, 4, 8), 4, 56),  # and each row split in two: one more edge in each of 8 rows
    ((4, 2, 2, 4), 8, 0),  # each panel one host: no lines inside panels
    ((2, 2, 4, 8), 8, 96),
    ((16,), 4, 3),
    ((8, 1), 2, 3),  # one column: cells ``a`` and ``a + 1`` are one above the other
])
def test_host_lines_lie_exactly_between_cells_on_different_hosts(
        shape: tuple[int, ...], per_host: int, count: int) -> None:
    ranks = np.arange(int(np.prod(shape))).reshape(shape)
    expected = {frozenset((a, b)) for a, b in _neighbours(ranks) if a // per_host != b // per_host}
    picture = svg(MeshView.from_shape(shape), host=lambda r: r // per_host)
    assert _boundaries(picture) == expected and len(expected) == count


def test_no_host_no_lines() -> None:
    assert _by_class(_root(svg(MeshView.from_shape((2, 4)))), "host-boundaries") == []


def test_host_lines_follow_an_explicit_universe() -> None:
    ranks = np.random.default_rng(3).permutation(32).reshape(4, 8)
    expected = {frozenset((a, b)) for a, b in _neighbours(ranks) if a // 8 != b // 8}
    assert _boundaries(svg(MeshView.from_ranks(ranks), host=lambda r: r // 8)) == expected


# ---- fast domains ---------------------------------------------------------------------------
def test_with_domains_cells_take_their_domains_colour_in_a_shade_per_host() -> None:
    """Hosts of 4 in racks of 3 hosts and 1 (a partial rack): a colour per domain, adjacent
    domains apart; within a domain, a shade per host, neighbouring hosts apart; blue lines
    exactly between cells of different domains, the black host lines as before."""
    topo = Topology.from_hosts([r // 4 for r in range(32)],
                               domains=[0] * 12 + [1] * 4 + [2] * 12 + [3] * 4)
    ranks = np.arange(32).reshape(4, 8)
    picture = svg(MeshView.from_shape((4, 8), ("dp", "tp")), host=topo, domain=topo)
    fill = {c["rank"]: c["fill"] for c in _cells(picture)}
    for a, b in _neighbours(ranks):
        if topo.host(a) == topo.host(b):
            assert fill[a] == fill[b]
        else:
            assert fill[a] != fill[b], (a, b)
    assert fill[0] == PALETTE[0] and len({fill[r] for r in range(12)}) == 2  # 2 shades do
    assert _boundaries(picture, "domain-boundaries") == {
        frozenset((a, b)) for a, b in _neighbours(ranks) if topo.domain(a) != topo.domain(b)}
    assert _boundaries(picture) == {
        frozenset((a, b)) for a, b in _neighbours(ranks) if a // 4 != b // 4}
    legend = " ".join(_texts(_root(picture), "legend"))
    assert "colours: fast domains (4 domains" in legend and "thick blue lines" in legend


def test_with_color_by_domains_draw_only_their_lines() -> None:
    topo = Topology(16, 4, hosts_per_domain=2)
    view = MeshView.from_shape((4, 4), ("dp", "tp"))
    by_group = svg(view, color_by="tp", host=topo, domain=topo)
    assert [c["fill"] for c in _cells(by_group)] == \
        [c["fill"] for c in _cells(svg(view, color_by="tp", host=topo))]
    assert len(_boundaries(by_group, "domain-boundaries")) == 4


# ---- panels and labels --------------------------------------------------------------------
def test_4d_panels_are_labelled_with_their_outer_coordinates() -> None:
    ranks = np.arange(64).reshape(2, 2, 4, 4)
    picture = svg(MeshView.from_shape(ranks.shape, TITAN))
    root = _root(picture)
    assert _texts(root, "panel-label") == ["pp=0 dp=0", "pp=0 dp=1", "pp=1 dp=0", "pp=1 dp=1"]
    panels = _by_class(root, "panel")
    for panel, block in zip(panels, ranks.reshape(4, 16)):
        texts = [int(g.find(f"{NS}text").text or "") for g in panel  # type: ignore[union-attr]
                 if g.get("class") == "cell"]
        assert texts == block.tolist()


def test_5d_panels_are_labelled_with_their_outer_coordinates() -> None:
    names = ("pp", "dp_rep", "dp_shard", "cp", "tp")
    root = _root(svg(MeshView.from_shape((2, 2, 2, 2, 4), names)))
    assert _texts(root, "panel-label") == [
        f"pp={a} dp_rep={b} dp_shard={c}" for a, b, c in itertools.product(range(2), repeat=3)]


def test_a_panel_on_one_host_names_it() -> None:
    root = _root(svg(MeshView.from_shape((4, 2, 2, 4)), host=lambda r: r // 16))
    assert _texts(root, "panel-label")[:3] == ["dim0=0 dim1=0 (host 0)",
                                               "dim0=0 dim1=1 (host 0)",
                                               "dim0=1 dim1=0 (host 1)"]


def test_axes_are_labelled_with_dim_names_and_indices() -> None:
    axis = _texts(_root(svg(MeshView.from_shape((4, 8), ("dp", "tp")))), "axis")
    assert axis == [f"tp={j}" for j in range(8)] + [f"dp={i}" for i in range(4)]
    long = _texts(_root(svg(MeshView.from_shape((2, 16), ("dp", "tensor_parallel")))), "axis")
    assert long == ["tensor_parallel", *map(str, range(16)), "dp=0", "dp=1"]


def test_the_outlined_rank_is_its_cell_and_the_title_and_legend_name_it() -> None:
    picture = svg(MeshView.from_shape((2, 2, 4, 8), TITAN), color_by="cp", rank=45)
    root = _root(picture)
    (mark,) = _by_class(root, "highlight")
    (cell,) = [c for c in _cells(picture) if c["rank"] == 45]
    assert abs(float(mark.get("x", "nan")) - cell["x"]) < cell["size"] / 4
    assert abs(float(mark.get("y", "nan")) - cell["y"]) < cell["size"] / 4
    assert _texts(root, "title") == ["MeshView(pp=2, dp=2, cp=4, tp=8), the instance of rank 45"]
    legend = _texts(root, "legend")
    assert "red outline: rank 45 (pp=0 dp=1 cp=1 tp=5)" in legend
    assert "colours: cp groups (32 groups of 4 ranks in 12 colours: colours repeat, adjacent " \
           "groups never share one)" in legend


def test_without_a_rank_nothing_is_outlined() -> None:
    root = _root(svg(MeshView.from_shape((2, 4))))
    assert _by_class(root, "highlight") == []
    assert _texts(root, "title") == ["MeshView(dim0=2, dim1=4), instance 0"]


# ---- refusals -----------------------------------------------------------------------------
VIEW = MeshView.from_shape((2, 4), ("dp", "tp"))


@pytest.mark.parametrize(("call", "error", "builtin", "names"), [
    (lambda: svg([[0, 1]]), MeshTypeError, TypeError, "[[0, 1]]"),  # type: ignore[arg-type]
    (lambda: svg(VIEW, host=8), MeshTypeError, TypeError, "8"),  # type: ignore[arg-type]
    (lambda: svg(VIEW, host=lambda r: "node"), MeshTypeError, TypeError, "'node'"),  # type: ignore[arg-type, return-value]
    (lambda: svg(VIEW, title=3), MeshTypeError, TypeError, "3"),  # type: ignore[arg-type]
    (lambda: svg(VIEW, rank=1.0), MeshTypeError, TypeError, "1.0"),  # type: ignore[arg-type]
    (lambda: svg(VIEW, color_by="cp"), UnknownDimError, KeyError, "'cp'"),
    (lambda: svg(VIEW, color_by=2), UnknownDimError, IndexError, "2"),
    (lambda: svg(VIEW, rank=8), RankNotInMeshError, ValueError, "rank 8"),
    (lambda: svg(VIEW, max_cells=4), InvalidSizeError, ValueError, "max_cells=4"),
    (lambda: svg(VIEW, max_cells=0), InvalidSizeError, ValueError, "0"),
    (lambda: svg(VIEW, max_cells="8"), MeshTypeError, TypeError, "'8'"),  # type: ignore[arg-type]
])
def test_bad_input_raises_a_typed_error_naming_it(call: Callable[[], object],
                                                  error: type[MeshError], builtin: type,
                                                  names: str) -> None:
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, builtin) and names in str(info.value)


def test_more_cells_than_the_limit_are_refused_naming_size_and_limit() -> None:
    view = MeshView.from_shape((2, MAX_SVG_CELLS // 2 + 1))
    with pytest.raises(InvalidSizeError, match=r"16,384 cells.* 16,386 ranks.*max_cells"):
        svg(view)
    assert len(_ranks(svg(MeshView.from_shape((2, 4)), max_cells=8))) == 8


# ---- a real renderer ----------------------------------------------------------------------
def _render_png(svg_path: Path, png: Path, width: int, height: int) -> bool:
    """Render with rsvg-convert or headless Chromium; False when neither is installed."""
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", str(svg_path), "-o", str(png)], check=True, timeout=30)
        return True
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--screenshot={png}", f"--window-size={width},{height}",
                        svg_path.as_uri()], check=True, timeout=60, capture_output=True)
        return True
    return False


def test_a_real_renderer_draws_the_picture_at_its_size(tmp_path: Path) -> None:
    picture = svg(MeshView.from_shape((2, 2, 4, 8), TITAN), host=lambda r: r // 8,
                  color_by="cp", rank=5)
    root = _root(picture)
    width, height = int(root.get("width", "0")), int(root.get("height", "0"))
    src, png = tmp_path / "mesh.svg", tmp_path / "mesh.png"
    src.write_text(picture, encoding="utf-8")
    if not _render_png(src, png, width, height):
        pytest.skip("no SVG renderer: install librsvg2-bin (rsvg-convert) or chromium")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (width, height)
    assert len(data) > 20_000  # 128 labelled cells in 12 colours; a blank page is ~1 kB


# ---- a rank's groups, hosts from a topology, colours beyond the palette ---------------------
def _outlined(picture: str) -> dict[int, tuple[str, str, str]]:
    """Rank -> (dim, stroke, dash) of every member outline, found by the cell it sits on."""
    cells = _cells(picture)
    out = {}
    for e in _by_class(_root(picture), "member"):
        x, y = float(e.get("x", "nan")), float(e.get("y", "nan"))
        (cell,) = [c for c in cells if c["x"] <= x < c["x"] + c["size"] / 4
                   and c["y"] <= y < c["y"] + c["size"] / 4]
        out[cell["rank"]] = (e.get("data-dim", ""), e.get("stroke", ""),
                             e.get("stroke-dasharray", ""))
    return out


@pytest.mark.parametrize("rank", [0, 45, 127])
def test_the_members_of_the_ranks_group_along_every_dim_are_outlined_in_its_style(
        rank: int) -> None:
    """Brute force: the members of ``rank``'s group along axis k of the NumPy rank tensor
    (its index varies, the others stay) are exactly the cells outlined for dim k."""
    shape = (2, 2, 4, 8)
    ranks = np.arange(128).reshape(shape)
    here = tuple(int(i) for i in np.argwhere(ranks == rank)[0])
    expected = {}
    for k, name in enumerate(TITAN):
        for i in range(shape[k]):
            crd = list(here)
            crd[k] = i
            if i != here[k]:
                expected[int(ranks[tuple(crd)])] = name
    outlined = _outlined(svg(MeshView.from_shape(shape, TITAN), rank=rank))
    assert {r: d for r, (d, _, _) in outlined.items()} == expected
    styles = {d: (stroke, dash) for d, stroke, dash in outlined.values()}
    assert len(set(styles.values())) == len(TITAN)  # one style per dim, all distinct
    assert "#d62728" not in {stroke for stroke, _ in styles.values()}  # red is the rank's


def test_the_legend_names_each_dims_outline_with_a_swatch() -> None:
    root = _root(svg(MeshView.from_shape((2, 4), ("dp", "tp")), rank=5))
    assert _texts(root, "legend")[-3:] == [
        "red outline: rank 5 (dp=1 tp=1)",
        "blue outline: the other member of rank 5's dp group (1 of its 2 ranks)",
        "green outline: the other members of rank 5's tp group (3 of its 4 ranks)"]
    assert [e.get("stroke") for e in _by_class(root, "swatch")] == ["#d62728", "#1f77b4",
                                                                    "#2ca02c"]


def test_outline_styles_stay_distinct_past_the_eighth_dim() -> None:
    names = tuple(f"d{k}" for k in range(10))
    outlined = _outlined(svg(MeshView.from_shape((2,) * 10, names), rank=0))
    assert len({(stroke, dash) for _, stroke, dash in outlined.values()}) == 10


def test_a_topology_is_taken_as_host() -> None:
    from mesh import Topology

    view = MeshView.from_shape((8, 64), ("tp", "dp"))
    topo = Topology(512, 8)
    assert svg(view, host=topo, rank=77) == svg(view, host=topo.host, rank=77)


def test_scattered_hosts_never_share_a_colour_with_a_neighbour_and_the_legend_says_so() -> None:
    """100 hosts of random ranks on a 32 x 32 grid: a host touches dozens of others, and
    the greedy colouring needs more than the 12 palette colours; neighbours on different
    hosts still differ."""
    ranks = np.arange(1024).reshape(32, 32)
    labels = np.random.default_rng(7).integers(0, 100, size=1024)
    picture = svg(MeshView.from_shape((32, 32)), host=lambda r: int(labels[r]))
    fill = {c["rank"]: c["fill"] for c in _cells(picture)}
    for a, b in _neighbours(ranks):
        assert (fill[a] == fill[b]) <= (labels[a] == labels[b]), (a, b)
    colours = len({fill[r] for r in range(1024)})
    assert colours > len(PALETTE)
    (line,) = [t for t in _texts(_root(picture), "legend") if t.startswith("colours")]
    assert line == (f"colours: hosts ({len(set(labels.tolist()))} hosts in {colours} colours: "
                    "colours repeat, adjacent hosts never share one)")
    assert line.endswith(
        "colours: colours repeat, adjacent hosts never share one)")


def test_colours_that_do_not_repeat_are_one_per_group() -> None:
    root = _root(svg(MeshView.from_shape((4, 8), ("dp", "tp")), color_by="tp"))
    assert "colours: tp groups (4 groups of 8 ranks, one colour each)" in _texts(root, "legend")

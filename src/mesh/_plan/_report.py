"""The text reports of the plan wing: an explanation's (:func:`report`, ``str(explain(...))``:
tables per view, then cost), a comparison's (:func:`compare_report`), a failure's
(:func:`failure_report`, ``meshlayout explain --fail``) and a placement's
(:func:`place_report`, ``meshlayout place``), and where a machine differs from the plan's
topology (:func:`topology_report`, ``meshlayout explain --topology``).

Each reads only the plain data the command prints with ``--format json``
(:meth:`~mesh.Explanation.to_dict`, :meth:`~mesh.Comparison.to_dict`, the ``failure``,
``blast`` and ``ways`` fields of ``--fail``), so the text and the JSON cannot disagree.
"""

from __future__ import annotations

from typing import Any

from .._core import RankStyle, ranks_text

__all__ = ["MIB", "compare_report", "failure_report", "place_report", "report",
           "topology_report"]

MIB = 1 << 20
"""Bytes in a MiB: the unit of the memory estimate's flags and of the reports."""


def _mib(b: int) -> str:
    return f"{b / (1 << 30):.1f} GiB" if b >= 1 << 30 else f"{b / MIB:g} MiB"


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def report(data: dict[str, Any]) -> str:
    """The text report of the explanation ``data``."""
    lines = [_machine_line(data)]
    for v in data["views"]:
        lines += ["", *_view_lines(v, data["hosts_per_domain"] != 1)]
    lines += ["", *_cost_lines(data)]
    if "rank" in data:
        lines += ["", *_rank_text(data["rank"])]
    return "\n".join(lines)


def _machine_line(data: dict[str, Any]) -> str:
    """``1,024 ranks on 128 hosts of 8 devices``, and the fast domains."""
    hosts = _n(data["num_hosts"], "host")
    if data["devices_per_host"]:
        hosts += f" of {_n(data['devices_per_host'], 'device')}"
    if data["devices_per_host_assumed"]:
        hosts += " (assumed: set --devices-per-host)"
    if data["hosts_per_domain"] is None:
        hosts += f", fast domains as listed ({_n(data['num_domains'], 'domain')})"
    elif data["hosts_per_domain"] > 1:
        hosts += (f", fast domains of {_n(data['hosts_per_domain'], 'host')} "
                  f"({_n(data['num_domains'], 'domain')})")
    return f"{_n(data['world'], 'rank')} on {hosts}"


def _view_lines(v: dict[str, Any], dom: bool) -> list[str]:
    """A view's line and the table of its dims (``dom``: with a domains/group column)."""
    shape = ", ".join(f"{d['name']}={d['size']}" for d in v["dims"])
    head = ["dim", "size", "layout", "groups", "hosts/group", "intra-host"]
    head += ["domains/group"] if dom else []
    head += ["family", "shares communicators with"]
    rows = [head]
    for d in v["dims"]:
        row = [d["name"], f"{d['size']:,}", d["layout"], f"{d['num_groups']:,}",
               f"{d['hosts_per_group']:,}", "yes" if d["intra_host"] else "no"]
        row += [f"{d['domains_per_group']:,}"] if dom else []
        shared = ", ".join(d["shared_with"]) or "-"
        row += [f"F{d['family']}", shared if d["size"] > 1 else "- (size 1: no communicator)"]
        rows.append(row)
    return [f"view {v['name']}: ({shape}) over {v['universe']}, layout {v['layout']}",
            *_table(rows, right={1, 3, 4} | ({6} if dom else set()))]


def _cost_lines(data: dict[str, Any]) -> list[str]:
    """Communicators per rank and their memory."""
    fams = [f for f in data["families"] if f["group_size"] > 1]
    mem = data["memory"]
    return [f"communicators per rank: {data['communicators_per_rank']} (the most any rank "
            f"is in; families of size > 1: "
            f"{', '.join('F' + str(f['id']) for f in fams) or 'none'})",
            f"communicator memory per rank, a rough first-order estimate: "
            f"{_mib(mem['bytes_per_rank'])} = {data['communicators_per_rank']} × "
            f"({mem['channels']} channels × 2 × {_mib(mem['buffsize'])} + "
            f"{_mib(mem['fixed'])})",
            f"  formula: {mem['formula']}; set with --channels, --buffsize-mib, "
            "--fixed-mib"]


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                             for c, (cell, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _rank_text(rd: dict[str, Any]) -> list[str]:
    label = "" if rd["host_name"] == f"host{rd['host']}" else f", {rd['host_name']}"
    comms = rd["communicators"]
    fams = ", ".join(f"F{i}" for i in comms["families"]) or "none"
    lines = [f"rank {rd['rank']} (host {rd['host']}{label}; in {comms['count']} "
             f"communicator{'' if comms['count'] == 1 else 's'}: {fams}):"]
    for v in rd["views"]:
        if v["coordinate"] is None:
            lines.append(f"  {v['name']}: not in this view's universe")
            continue
        coord = ", ".join(f"{g['dim']}={g['local_rank']}" for g in v["groups"])
        lines.append(f"  {v['name']}: coordinate ({coord})")
        for g in v["groups"]:
            if g["ranks"] is None:
                lines.append(f"    {g['dim']} group: {g['size']:,} ranks (not listed)")
                continue
            hs = g["hosts"]
            where = f"host {hs[0]}" if len(hs) == 1 else \
                f"{len(hs):,} hosts {ranks_text(hs, RankStyle.EXPLAIN)}"
            lines.append(f"    {g['dim']} group {ranks_text(g['ranks'], RankStyle.EXPLAIN)} "
                         f"on {where}")
    return lines


def compare_report(data: dict[str, Any]) -> str:
    """The text table of the comparison ``data`` (:meth:`~mesh.Comparison.to_dict`)."""
    names, plans = data["names"], data["plans"]
    machines = [_machine_line(p) for p in plans]
    lines = [f"comparing {_n(len(names), 'plan')} on {machines[0]}"] if len(set(machines)) == 1 \
        else ["comparing plans on different machines:",
              *(f"  {n}: {m}" for n, m in zip(names, machines))]
    lines += ["", *_table([["dim", "", *names, ""], *_compare_rows(data["rows"], names)],
                          right=set(range(2, 2 + len(names))))]
    lines += ["", *_compare_notes(data)]
    for name, plan in zip(names, plans):
        if "rank" in plan:
            lines += ["", f"plan {name}:", *_rank_text(plan["rank"])]
    return "\n".join(lines)


def _compare_rows(rows: list[dict[str, Any]], names: list[str]) -> list[list[str]]:
    """A table row per data row: the dim (on its first row), the label, the values (the
    better ones marked ``*``) and a note on shared groups."""
    out, last = [], None
    for row in rows:
        dim = row["dim"] if row["dim"] is not None else "plan"
        cells = [_value(row["metric"], v) + (" *" if n in row["best"] else "  ")
                 for n, v in zip(names, row["values"])]
        note = "; ".join(("same groups" if len(s) == len(names) else
                          "same groups in " + ", ".join(s)) for s in row["shared"])
        out.append([dim if dim != last else "", row["label"], *cells, note])
        last = dim
    return out


def _value(metric: str, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if metric == "seconds":
        return _seconds(v)
    if metric == "bytes_per_rank":
        return _mib(v)
    return f"{v:,}"


def _seconds(s: float) -> str:
    """``4.2 ms``: three significant digits in s, ms or µs."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if s >= scale:
            return f"{s / scale:#.3g}".rstrip(".") + f" {unit}"
    return f"{s * 1e6:#.3g}".rstrip(".") + " µs"


def _compare_notes(data: dict[str, Any]) -> list[str]:
    """What the marks mean, the ranking, and the two estimates' formulas and parameters."""
    mem, traffic = data["plans"][0]["memory"], data["traffic"]
    lines = ["* the better value of its row (fewer hosts, less time and memory, intra-host "
             "yes);", "  each plan's numbers are its own (never summed over the plans)"]
    if data["ranking"] is None:
        lines.append("ranking: give --traffic DIM=BYTES,... (bytes per step per rank) to rank "
                     "the plans by estimated communication time")
    else:
        total = {n: v for n, v in zip(data["names"], data["rows"][-1]["values"])}
        lines.append("ranking by estimated communication time per step: " + ", ".join(
            f"{n} ({_seconds(total[n])})" for n in data["ranking"]))
    lines += [f"memory per rank, a rough first-order estimate: {mem['formula']}",
              f"  with {mem['channels']} channels × 2 × {_mib(mem['buffsize'])} + "
              f"{_mib(mem['fixed'])} (set with --channels, --buffsize-mib, --fixed-mib)"]
    if traffic is not None:
        lines += _estimate_lines(traffic)
    return lines


def _estimate_lines(traffic: dict[str, Any]) -> list[str]:
    """The time estimate's formula, parameters and traffic (compare's and place's)."""
    shown = ", ".join(f"{d}={_bytes(b)}" for d, b in traffic["bytes"].items()) or \
        "none given (only latency counts)"
    return [f"time per step, a first-order α-β estimate of a {traffic['collective']} "
            "per dim over its slowest group:",
            f"  {traffic['formula']}   (g: the group size)",
            f"  bandwidth, latency: {traffic['intra_host_gbps']:g} Gb/s, "
            f"{traffic['intra_host_latency_us']:g} µs inside one host (or fast domain), "
            f"else {traffic['inter_host_gbps']:g} Gb/s, "
            f"{traffic['inter_host_latency_us']:g} µs",
            "  (set with --intra-host-gbps, --inter-host-gbps, --intra-host-latency-us, "
            "--inter-host-latency-us)",
            f"  traffic per step per rank: {shown}"]


def place_report(data: dict[str, Any]) -> str:
    """The text of ``meshlayout place``: the chosen order, each dim's level, hosts and
    domains per group and estimated time; the runner-up and the order as given."""
    shape = ", ".join(f"{n}={s:,}" for n, s in zip(data["names"], data["shape"]))
    chosen, runner, given = data["chosen"], data["runner_up"], data["as_given"]
    dom = data["hosts_per_domain"] != 1
    head = ["dim", "size", "level", "layout", "hosts/group", *(["domains/group"] if dom else []),
            "est. time/step"]
    rows = [head] + [[d["name"], f"{d['size']:,}", d["level"], d["layout"],
                      _count(d["hosts_per_group"]),
                      *([_count(d["domains_per_group"])] if dom else []),
                      _seconds(d["seconds"])] for d in chosen["dims"]]
    lines = [f"placing ({shape}) on {_machine_line(data)}", "",
             f"chosen: layout {chosen['layout']} over {chosen['universe']} "
             f"(of {data['choices']:,} admissible choices of levels)",
             *_table(rows, right={1, 4, 5, 6} if dom else {1, 4, 5}),
             f"  est. comm. time/step: {_seconds(chosen['seconds'])}"]
    if runner is None:
        lines.append("runner-up: none (every admissible order has this estimate)")
    else:
        lines.append(f"runner-up: layout {runner['layout']}: {_seconds(runner['seconds'])} "
                     f"({_more(runner['seconds'], chosen['seconds'])}); "
                     f"{_moves(chosen, runner)}")
    lines.append(f"as given (row-major in the order of the dims): layout {given['layout']}: "
                 f"{_seconds(given['seconds'])} ({_more(given['seconds'], chosen['seconds'])})")
    return "\n".join([*lines, *_estimate_lines(data["traffic"])])


def _count(v: int | None) -> str:
    return "?" if v is None else f"{v:,}"


def _more(seconds: float, best: float) -> str:
    if f"{seconds:.9g}" == f"{best:.9g}":
        return "the same estimate"
    return f"+{(seconds - best) / best:.0%}" if best > 0 else "slower"


def _moves(chosen: dict[str, Any], other: dict[str, Any]) -> str:
    """``levels: tp domain (chosen: host)``: the dims whose level differs."""
    moved = [f"{b['name']} {b['level']} (chosen: {a['level']})"
             for a, b in zip(chosen["dims"], other["dims"]) if a["level"] != b["level"]]
    return "levels: " + ", ".join(moved) if moved else "the same levels"


def _bytes(b: int) -> str:
    """``1 GiB``, ``512 MiB``, ``3000 B``: the largest binary unit that divides ``b``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale:,} {unit}"
    return f"{b:,} B"


def topology_report(diff: dict[str, Any]) -> str:
    """Where the machine (``--topology``, ``--hosts``, ``--hosts-file``) differs from the
    topology the plan declares: the ``topology`` field of ``explain --format json``."""
    head = f"the machine ({diff['source']}) against the declared topology"
    if diff["declared"] is None:
        return f"{head}: {diff['declared_from']}, so nothing to compare"
    declared = {**diff["declared"], "devices_per_host_assumed": False}  # said in declared_from
    lines = [f"{head}, {diff['declared_from']}: {_machine_line(declared)}"]
    lines += [f"  {line}" for line in diff["differences"]]
    if diff["dims"]:
        lines.append("  dims placed differently on the machine (declared → machine):")
        for d in diff["dims"]:
            was, now = d["declared"], d["machine"]
            moved = [f"{label} {was[k]:,} → {now[k]:,}" for k, label in (
                ("hosts_per_group", "hosts/group"), ("domains_per_group", "domains/group"))
                if was[k] != now[k]]
            lines.append(f"    {d['view']}.{d['dim']}: {', '.join(moved)}")
    if not diff["differences"] and not diff["dims"]:
        lines.append("  the same hosts and domains, rank for rank: every dim is placed as "
                     "declared")
    elif not diff["dims"]:
        lines.append("  every dim's groups span as many hosts and domains as declared")
    return "\n".join(lines)


def failure_report(data: dict[str, Any]) -> str:
    """The text of ``meshlayout explain --fail``: the failed ranks, the blast radius per view
    and dim, the ways to continue, and (with ``--rank``) that rank's groups under each."""
    fail = data["failure"]
    lines = [_failed_line(fail), "", *_blast_lines(data["blast"], fail["views"])]
    lines += ["", *_ways_lines(data["ways"])]
    if fail["rank"] is not None:
        lines += ["", *_rank_fail_lines(fail["rank"], data["ways"] or [])]
    return "\n".join(lines)


def _failed_line(fail: dict[str, Any]) -> str:
    """``failed: 8 ranks (8, 9, …, 15) on host 1 (--fail-host 1)``."""
    ranks = ranks_text(fail["ranks"], RankStyle.EXPLAIN)
    if fail["count"] > len(fail["ranks"]):  # only the first are listed
        ranks = ranks[:-1] + ", …)"
    on = fail["hosts"]
    where = f"host {on[0]}" if len(on) == 1 else \
        f"{_n(fail['num_hosts'], 'host')} {ranks_text(on, RankStyle.EXPLAIN)}"
    named = ",".join(map(str, fail["fail_hosts"]))
    return f"failed: {_n(fail['count'], 'rank')} {ranks} on {where}" + (
        f" (--fail-host {named})" if named else "")


def _blast_lines(entries: list[dict[str, Any]], views: list[dict[str, Any]]) -> list[str]:
    """The blast radius: a row per view and dim, then the broken instances per view."""
    rows = [["dim", "size", "groups", "broken", "intact", "stranded ranks",
             "first broken group"]]
    for e in entries:
        first = ranks_text(e["first_broken_groups"][0], RankStyle.EXPLAIN) \
            if e["first_broken_groups"] else \
            "-" if not e["broken_groups"] else f"({e['group_size']:,} ranks, not listed)"
        rows.append([f"{e['view']}.{e['dim']}", f"{e['group_size']:,}", f"{e['groups']:,}",
                     f"{e['broken_groups']:,}", f"{e['intact_groups']:,}",
                     f"{e['stranded_ranks']:,}", first])
    broken = "; ".join(f"{v['view']} {v['broken_instances']:,} of {v['instances']:,}"
                       for v in views)
    return ["blast radius (broken: groups that lost a member; stranded: their healthy "
            "members):", *_table(rows, right={1, 2, 3, 4, 5}), f"  broken instances: {broken}"]


def _ways_lines(ways: list[dict[str, Any]] | None) -> list[str]:
    """Each way to continue: the surviving world and its groups, intact or new."""
    if ways is None:
        return ["ways to continue: the plan must be a function of its world to be re-derived "
                "from the survivors: define WORLD (a MeshView) and PLAN (WORLD -> VIEWS) in "
                "the plan file, or use --dims"]
    lines = ["ways to continue (the plan re-derived from the survivors; intact: exactly an "
             "old group, its communicator kept; new: rebuilt):"]
    for w in ways:
        lines.append(f"  {_way_name(w)}: " + (f"impossible: {w['error']}" if w["error"] else
                     f"({_shape(w)}) over {_n(w['survivors'], 'rank')} ({w['lost']:,} fewer)"))
        if not w["error"]:
            rows = [["dim", "size", "intact", "new", ""]] + [
                [f"{g['view']}.{g['dim']}", f"{g['size']:,}", f"{g['intact_groups']:,}",
                 f"{g['new_groups']:,}", "" if g["size"] > 1 else "(size 1: no communicator)"]
                for g in w["groups"]]
            lines += ["  " + line for line in _table(rows, right={1, 2, 3})]
    if not any(w["way"] == "substitute" for w in ways):
        lines.append("  substitute: give --spares RANKS (one spare per failed rank, outside "
                     "the world)")
    return lines


def _way_name(w: dict[str, Any]) -> str:
    if w["way"] == "drop":
        return f"drop {w['dim']}"
    return f"substitute {ranks_text(w['spares'], RankStyle.EXPLAIN)}"


def _shape(w: dict[str, Any]) -> str:
    return ", ".join(f"{n}={s:,}" for n, s in zip(w["names"], w["shape"]))


def _rank_fail_lines(rb: dict[str, Any], ways: list[dict[str, Any]]) -> list[str]:
    """A row per group of the rank: broken or not, then kept or rebuilt under each way."""
    fine = [w for w in ways if not w["error"]]
    rows = [["dim", "blast", *(_way_name(w) for w in fine)]]
    for g in rb["groups"]:
        cells = [_fate(w["rank"], g) for w in fine]
        rows.append([f"{g['view']}.{g['dim']}", "broken" if g["broken"] else "intact", *cells])
    state = "failed" if rb["failed"] else "healthy"
    return [f"rank {rb['rank']} ({state}): its groups, and their communicators under each "
            "way (kept, rebuilt; gone: the rank is not a survivor):", *_table(rows, set())]


def _fate(rw: dict[str, Any], g: dict[str, Any]) -> str:
    if not rw["survives"]:
        return "gone"
    mine = [x["intact"] for x in rw["groups"] if (x["view"], x["dim"]) == (g["view"], g["dim"])]
    return "-" if not mine else "kept" if mine[0] else "rebuilt"

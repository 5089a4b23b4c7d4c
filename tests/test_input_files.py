"""Files the command reads (plan files, ``--topology``, ``--hosts-file``): only regular files
are opened, and every host or domain index of a saved topology is bounded by the number of
runs that carry it before any work grows with it: the least index without ranks is looked
for among as many indices as there are runs (issue 34: a FIFO blocked forever; an index of
2**62 in a 200-byte topology file hung ``explain`` or exhausted memory)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mesh import Topology, TopologyError

ROOT = Path(__file__).resolve().parents[1]


def _explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mesh", "explain", *args], capture_output=True,
                          text=True, timeout=60, check=False, cwd=ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("flag", ["--topology", "--hosts-file", None])
def test_a_fifo_without_a_writer_is_refused_not_waited_on(tmp_path: Path, flag: str | None
                                                          ) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = ["--dims", "dp=4,tp=8", flag, str(fifo)] if flag else [str(fifo)]
    start = time.monotonic()
    out = _explain(*args)
    assert out.returncode == 2, out.stderr
    assert "is a FIFO (named pipe), not a regular file" in out.stderr
    assert str(fifo) in out.stderr
    assert time.monotonic() - start < 30  # what the test is about: it returned


def test_a_socket_and_a_directory_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        out = _explain("--dims", "dp=4,tp=8", "--topology", str(path))
    assert out.returncode == 2 and "is a socket, not a regular file" in out.stderr
    out = _explain("--dims", "dp=4,tp=8", "--hosts-file", str(tmp_path))
    assert out.returncode == 2 and "is a directory, not a regular file" in out.stderr


def _saved(ranks: list[list[int]] | None, domains: list[list[int]] | None) -> dict[str, object]:
    return {"version": 1, "world": 16, "devices_per_host": None if ranks else 8,
            "ranks": ranks, "hosts_per_domain": None if domains else 1, "domains": domains,
            "hosts": None}


@pytest.mark.parametrize(("ranks", "domains", "words"), [
    ([[2**62, 16, 0]], None,
     "host 0 (host0) has no ranks: every host of a topology runs at least one rank (a run of "
     "ranks is on host 4,611,686,018,427,387,904: a topology of 16 ranks has hosts 0 <= host "
     "< 16)"),
    ([[0, 8, 0], [2**62, 8, 0]], None, "host 1 (host1) has no ranks"),
    (None, [[2**62, 2]],
     "domain 0 has no hosts: every domain holds at least one (a run of hosts is in domain "
     "4,611,686,018,427,387,904: 2 hosts have domains 0 <= domain < 2)"),
    (None, [[0, 1], [2**62, 1]], "domain 1 has no hosts"),
])
def test_an_index_past_the_world_is_refused_at_once_naming_it_and_the_bound(
        ranks: list[list[int]] | None, domains: list[list[int]] | None, words: str,
        tmp_path: Path) -> None:
    """Issue 34, item 4: a 200-byte file with index 2**62 hung explain or ran out of memory;
    every index is bounded by the world before any work that grows with it."""
    data = _saved(ranks, domains)
    start = time.monotonic()
    with pytest.raises(TopologyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Topology.from_dict(data)
    assert time.monotonic() - start < 5.0  # refused, not listed (it was minutes, or never)
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(data))
    out = _explain("--dims", "dp=2,tp=8", "--topology", str(path))
    assert out.returncode == 2 and words in out.stderr, out.stderr


def test_indices_without_gaps_still_load() -> None:
    t = Topology.from_dict(_saved([[1, 8, 0], [0, 8, 0]], [[0, 1], [1, 1]]))
    assert [t.host(r) for r in (0, 8)] == [0, 1] and t.num_domains == 2

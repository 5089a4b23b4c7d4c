"""Hostile inputs that must be refused before any work proportional to them (issue 30).

Each case builds its input untimed (plan files go in the directory it is given) and returns
the call that must refuse it: the ``meshlayout`` command, run in this process as
``main(argv)`` (exit 2, a message naming the problem, no traceback), or a library call (its
typed error).  ``tests/test_refusals.py`` runs every case under a deterministic bound on work
(``work_bound.bounded``: Python trace events, and at most 100 MB held, the issue's bound on
the validation's own allocations); ``bench/time_bounds.py`` times the slowest against the
issue's 2 s (``hostile refuse``).

Before issue 30 each of these did the work first: ``--fail-host`` listed every rank of the
hosts (146 s for hosts of 2**22), ``--fail`` on a 2**24-rank world listed the survivors once
per way (10.8 s, 1.6 GB), a plan file was read whole (``/dev/zero``: 5.9 GB), a plan's views
were read whole and explained in time and memory quadratic in their number (4,000 views:
2.9 GB), ``survive`` followed a never-ending mapping for ever, and ``DeviceMesh.rebind``
listed the new universe before checking that it fits the backend (2**26 ranks: 2.6 GB;
2**40: ``MemoryError``).
"""

from __future__ import annotations

import contextlib
import io
import zlib
from collections.abc import Callable
from pathlib import Path

from backend import BackendConfigError, FakeBackend, init_device_mesh
from mesh import InvalidSizeError, MeshError, MeshView, blast, explain, survive
from mesh._cli import main

Call = Callable[[], None]
Case = Callable[[Path], Call]

NEVER_ENDING = '''
from collections.abc import Mapping
from mesh import MeshView

VIEW = MeshView.from_shape((4, 8), ("dp", "tp"))

class Forever(Mapping):
    """A mapping whose keys never end (each maps to one view, built once)."""
    def __getitem__(self, key):
        return VIEW
    def __len__(self):
        return 1
    def __iter__(self):
        i = 0
        while True:
            yield f"v{i}"
            i += 1
'''
MANY_VIEWS = ("from mesh import MeshView\nw = MeshView.from_shape((4, 8), ('dp', 'tp'))\n"
              "VIEWS = {f'v{i}': w for i in range(4000)}\n")
BIG_WORLD = str(1 << 24)


def cli(argv: list[str], named: str) -> Call:
    """``meshlayout ARGV`` must exit 2 with ``named`` in its message and no traceback."""
    def run() -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        text = err.getvalue()
        assert code == 2 and named in text and "Traceback" not in text, (code, text)
    return run


def raises(call: Call, error: type[Exception], named: str) -> Call:
    """``call()`` must raise ``error`` with ``named`` in its message."""
    def run() -> None:
        try:
            call()
        except error as e:
            assert named in str(e), str(e)
            return
        raise AssertionError(f"not refused: expected {error.__name__} naming {named!r}")
    return run


def _plan(directory: Path, source: str) -> str:
    """A plan file of ``source`` in ``directory``, named after its content (cases made in
    one folder keep their own files)."""
    path = directory / f"plan_{zlib.crc32(source.encode()):08x}.py"
    path.write_text(source)
    return str(path)


def _fail_host(_: Path) -> Call:
    hosts = str(1 << 30)
    return cli(["explain", "--world", str(1 << 32), "--devices-per-host", hosts,
                "--dims", f"dp=4,tp={hosts}", "--fail-host", "0,1"], "2,147,483,648 failed ranks")


def _fail_big_world(spares: bool) -> Case:
    def make(_: Path) -> Call:
        extra = ["--spares", BIG_WORLD] if spares else []
        return cli(["explain", "--world", BIG_WORLD, "--dims", f"dp={1 << 21},tp=8",
                    "--fail", "13", *extra], "16,777,216 ranks")
    return make


def _dev_zero(_: Path) -> Call:
    return cli(["explain", "/dev/zero"], "is a character device, not a regular file")


def _huge_file(directory: Path) -> Call:
    path = directory / "huge.py"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # a sparse GiB: no disk used
    return cli(["explain", str(path)], "1,073,741,824 bytes")


def _machine_from_dev_zero(flag: str) -> Case:
    """``explain --topology /dev/zero`` (or ``--hosts-file``): refused before it is opened."""
    def make(_: Path) -> Call:
        return cli(["explain", "--dims", "dp=4,tp=8", flag, "/dev/zero"],
                   "is a character device, not a regular file")
    return make


def _machine_from_huge_file(flag: str) -> Case:
    """``place --topology`` (or ``--hosts-file``) a sparse GiB: refused from its size."""
    def make(directory: Path) -> Call:
        path = directory / "machine"
        with open(path, "wb") as f:
            f.truncate(1 << 30)  # a sparse GiB: no disk used
        return cli(["place", "--dims", "dp=4,tp=8", flag, str(path)], "1,073,741,824 bytes")
    return make


def _hosts_beyond_count(_: Path) -> Call:
    return cli(["explain", "--dims", "dp=4,tp=8", "--hosts", "n[0-99999999999]",
                "--devices-per-host", "8"], "more than 4,194,304 hosts")


def _topology_huge_runs(directory: Path) -> Call:
    """2**62 ranks on two hosts of different devices: read from the runs (no listing), then
    a placement that would have to list the ranks refuses."""
    path = directory / "runs.json"
    path.write_text('{"version": 1, "world": 4611686018427387904, "devices_per_host": null, '
                    '"ranks": [[0, 2305843009213693952, 0], [1, 2305843009213693952, 7]], '
                    '"hosts_per_domain": 1, "domains": null, "hosts": null}')
    return cli(["place", "--dims", "dp=2,tp=2305843009213693952", "--topology", str(path)],
               "4,611,686,018,427,387,904 ranks")


def _topology_naming_too_many_hosts(directory: Path) -> Call:
    """16 ranks on 4 hosts whose 'hosts' list names 4,000,000: refused from its count, not
    expanded (it was: 650 MB to say the file is wrong)."""
    path = directory / "named.json"
    path.write_text('{"version": 1, "world": 16, "devices_per_host": 4, "ranks": null, '
                    '"hosts_per_domain": 1, "domains": null, "hosts": "n[1-4000000]"}')
    return cli(["explain", "--dims", "dp=4,tp=4", "--topology", str(path)],
               "more than the 4 hosts")


def _many_views(command: str) -> Case:
    def make(directory: Path) -> Call:
        return cli([command, _plan(directory, MANY_VIEWS)], "more than 256 entries")
    return make


def _never_ending_views(directory: Path) -> Call:
    return cli(["explain", _plan(directory, NEVER_ENDING + "VIEWS = Forever()\n")],
               "more than 256 entries")


def _never_ending_plan_on_fail(directory: Path) -> Call:
    source = NEVER_ENDING + (
        "WORLD = MeshView.from_shape((4, 8), ('dp', 'tp'))\n"
        "def PLAN(world):\n"
        "    return {'w': world} if world.ranks.is_identity else Forever()\n")
    return cli(["explain", _plan(directory, source), "--fail", "13"], "more than 256 entries")


def _survive_never_ending(directory: Path) -> Call:
    ns: dict[str, object] = {}
    exec(NEVER_ENDING, ns)
    forever = ns["Forever"]
    world = MeshView.from_shape((4, 8), ("dp", "tp"))
    return raises(lambda: survive(lambda w: forever(), world, [13], drop="dp"),  # type: ignore[operator]
                  MeshError, "more than 256 entries")


def _blast_never_ending(directory: Path) -> Call:
    ns: dict[str, object] = {}
    exec(NEVER_ENDING, ns)
    forever = ns["Forever"]()  # type: ignore[operator]
    return raises(lambda: blast(forever, [13]), InvalidSizeError, "more than 256 entries")


def _explain_many_dims(_: Path) -> Call:
    ones = MeshView.from_shape((1,) * 300, tuple(f"d{i}" for i in range(300)))
    return raises(lambda: explain({"ones": ones}, world=8), InvalidSizeError, "300 dims")


def _rebind_oversized(size: int) -> Case:
    def make(_: Path) -> Call:
        mesh = init_device_mesh("cpu", (4, 8), mesh_dim_names=("dp", "tp"),
                                backend=FakeBackend(32, rank=5))
        mesh.get_all_groups()
        view = MeshView.from_shape((size // 8, 8), ("dp", "tp"))
        return raises(lambda: mesh.rebind(view) and None, BackendConfigError, "does not fit")
    return make


CASES: dict[str, Case] = {
    "explain --fail-host, hosts of 2**30": _fail_host,
    "explain --fail, 2**24 ranks": _fail_big_world(spares=False),
    "explain --fail --spares, 2**24 ranks": _fail_big_world(spares=True),
    "explain /dev/zero": _dev_zero,
    "explain a 1 GiB plan file": _huge_file,
    "explain --topology /dev/zero": _machine_from_dev_zero("--topology"),
    "place --topology, a 1 GiB file": _machine_from_huge_file("--topology"),
    "explain --hosts-file /dev/zero": _machine_from_dev_zero("--hosts-file"),
    "place --hosts-file, a 1 GiB file": _machine_from_huge_file("--hosts-file"),
    "explain --hosts, 10**11 hosts": _hosts_beyond_count,
    "place --topology, 2**62 ranks in two runs": _topology_huge_runs,
    "explain --topology, 'hosts' naming 4,000,000 of 4 hosts": _topology_naming_too_many_hosts,
    "explain 4,000 views": _many_views("explain"),
    "compare 4,000 views": _many_views("compare"),
    "explain never-ending VIEWS": _never_ending_views,
    "explain --fail, PLAN never-ending": _never_ending_plan_on_fail,
    "survive, plan never-ending": _survive_never_ending,
    "blast, never-ending views": _blast_never_ending,
    "explain, 300 dims": _explain_many_dims,
    "rebind to 2**26 ranks on 32": _rebind_oversized(1 << 26),
    "rebind to 2**40 ranks on 32": _rebind_oversized(1 << 40),
}
"""Case name -> make the refusing call (inputs built untimed, files in the given folder)."""

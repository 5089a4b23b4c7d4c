"""Junk fuzz of the backend's public surface: the facade's methods, ``check_spmd`` and the
``meshlayout`` command.

THE LAW: a call with junk arguments returns a value or raises an error of the package
hierarchies (``backend.BackendError``, ``mesh.MeshError``); arguments that do not fit the
signature are Python's ``TypeError`` before any library code runs.  For the command, run in
a subprocess as a user would: every argv and plan file ends with exit status 0, 1 or 2 and
no Python traceback (130, saying "interrupted", for a plan that raises
``KeyboardInterrupt``), within the batch's time bound; plan files include huge ones (a 1 GiB
file, ``/dev/zero``), never-ending and 4,000-entry ``VIEWS``, and plans that exit or raise
unprintable exceptions at load time or on the survivors' world (issue 30).  Junk is drawn as
source strings (``test_mesh_fuzz``'s table), so a failure prints a call that can be pasted.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_mesh_fuzz import Junk, junk

from backend import (
    FINDING_KINDS,
    BackendError,
    FakeBackend,
    Finding,
    SpmdBackend,
    check_spmd,
    init_device_mesh,
)
from mesh import MeshError

_LAW = (BackendError, MeshError)
_METHODS = ("size", "get_group", "get_local_rank", "__getitem__", "flatten", "unflatten",
            "_flatten", "_unflatten", "get_all_groups", "get_coordinate", "materialize",
            "render", "_get_all_submeshes", "__eq__")


def _mesh(named: bool) -> Any:
    return init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp") if named else None,
                            backend=FakeBackend(8, 5))


@pytest.mark.parametrize("name", _METHODS)
@given(named=st.booleans(), srcs=st.lists(junk, max_size=3))
@example(named=True, srcs=["HostileList([0, 1])"])  # found by the fuzz in __getitem__
def test_every_facade_method_returns_or_raises_a_typed_error(name: str, named: bool,
                                                             srcs: list[str]) -> None:
    """THE LAW for ``DeviceMesh`` methods (on a FakeBackend mesh, with or without names)."""
    method = getattr(_mesh(named), name)
    args = [Junk(s).build() for s in srcs]
    try:
        inspect.signature(method).bind(*args)
    except TypeError:
        return  # Python's own binding, outside the law
    except ValueError:  # no signature (a slot wrapper): call it anyway
        pass
    try:
        method(*args)
    except _LAW:
        pass
    except TypeError as e:  # only a wrong number of arguments to a builtin slot
        assert "argument" in str(e), f"{name}({', '.join(srcs)}): {e!r}"


_TOPOLOGY_SRCS = ("None", "Topology(8, 2)", "Topology(8, 4, hosts_per_domain=2)",
                  "Topology.from_hosts([0, 0, 1, 1, 1, 2, 2, 2])", "Topology(4, 2)")
_EXPECTED = ("()", "('tp',)", "['dp', 'tp']", "('zz',)", "'tp'", "{'tp'}", "(1,)")


@given(topology=st.one_of(st.sampled_from(_TOPOLOGY_SRCS), junk),
       host=st.one_of(st.sampled_from(_EXPECTED), junk),
       domain=st.one_of(st.sampled_from(_EXPECTED), junk))
def test_bind_with_expectations_returns_or_raises_a_typed_error(topology: str, host: str,
                                                                 domain: str) -> None:
    """THE LAW for ``bind(..., topology=, expect_intra_host=, expect_intra_domain=)`` on a
    FakeBackend: a mesh, or an error of the hierarchies; never a group made by a refusal."""
    from backend import bind
    from mesh import MeshView
    backend = FakeBackend(8, 5)
    args = {"topology": Junk(topology).build(), "expect_intra_host": Junk(host).build(),
            "expect_intra_domain": Junk(domain).build()}
    try:
        bind(MeshView.from_shape((2, 4), ("dp", "tp")), backend, **args)
    except _LAW:
        assert not backend.created
    except TypeError as e:  # a junk value where Python itself cannot iterate
        raise AssertionError(f"bind({topology}, {host}, {domain}): {e!r}") from e


_PROGRAMS = {
    "a plan": "lambda b: init_device_mesh('cpu', (2, 2), mesh_dim_names=('dp', 'tp'), "
              "backend=b).materialize()",
    "raises": "lambda b: 1 / 0",
    "returns junk": "lambda b: object()",
    "no backend=": "lambda b: init_device_mesh('cpu', (2,), mesh_dim_names=('x',)).get_group()",
    "takes nothing": "lambda: None",
    "a class": "int",
    "not callable": "3",
}


@settings(max_examples=60)
@given(world=st.one_of(junk, st.integers(-3, 6).map(str)), program=st.sampled_from(
    sorted(_PROGRAMS)), backend=st.one_of(st.sampled_from(["'auto'", "'gloo'", "'nccl'"]), junk))
def test_check_spmd_returns_a_report_or_refuses_its_arguments(world: str, program: str,
                                                              backend: str) -> None:
    """THE LAW for ``check_spmd``: a report, or a ``BackendError`` for its arguments; a
    program's own failures are findings in the report, never raised."""
    ns = {"init_device_mesh": init_device_mesh}
    fn = eval(_PROGRAMS[program], ns)
    w, kind = Junk(world).build(), Junk(backend).build()
    try:
        report = check_spmd(w, fn, backend=kind)
    except BackendError:
        return
    assert isinstance(report.ok, bool) and isinstance(str(report), str)
    if program in ("raises", "takes nothing"):
        assert report.errors



_KEYWORDS = ("limit", "torch", "topology", "communicators", "nvls_slots",
             "nvls_per_communicator", "classes", "rank_timeout")


@settings(max_examples=80)
@given(keyword=st.sampled_from(_KEYWORDS), value=junk)
def test_check_spmd_refuses_junk_options_with_a_typed_error(keyword: str, value: str) -> None:
    """THE LAW for ``check_spmd``'s options (issue 27): a report, or a ``BackendError``."""
    plan = eval(_PROGRAMS["a plan"], {"init_device_mesh": init_device_mesh})
    try:
        report = check_spmd(4, plan, **{keyword: Junk(value).build()}, rank_timeout=2.0) \
            if keyword != "rank_timeout" else check_spmd(4, plan, rank_timeout=Junk(value).build())
    except _LAW:
        return
    assert isinstance(report.ok, bool) and isinstance(str(report), str)


@settings(max_examples=60)
@given(srcs=st.lists(st.one_of(junk, st.integers(-2, 9).map(str)), max_size=3))
def test_spmd_backend_is_made_or_refused_with_a_typed_error(srcs: list[str]) -> None:
    """THE LAW for ``SpmdBackend(world_size, rank, kind)`` (issue 27)."""
    _made_or_refused(SpmdBackend, [Junk(s).build() for s in srcs])


def _made_or_refused(fn: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> Any:
    """``fn(*args, **kwargs)``, or None where Python's binding or the law refuses it."""
    try:
        inspect.signature(fn).bind(*args, **(kwargs or {}))
    except TypeError:
        return None  # Python's own binding, outside the law
    try:
        return fn(*args, **(kwargs or {}))
    except _LAW:
        return None


_CALLS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
          "gather", "scatter", "send", "recv", "isend", "irecv", "barrier", "batch_isend_irecv",
          "destroy_process_group", "abort_process_group", "revoke_process_group",
          "wait_revoked", "shrink_group", "ref", "told")


@pytest.mark.parametrize("name", _CALLS)
@settings(max_examples=40)
@given(srcs=st.lists(st.one_of(junk, st.integers(-2, 9).map(str)), max_size=3),
       dtype=st.one_of(st.none(), junk))
def test_every_spmd_backend_call_records_or_raises_a_typed_error(name: str, srcs: list[str],
                                                                  dtype: str | None) -> None:
    """THE LAW for the calls a program makes on its ``SpmdBackend`` (issue 27): junk shapes,
    groups, peers, ops and dtypes are recorded or refused with a typed error."""
    backend = SpmdBackend(4, 1)
    method = getattr(backend, name)
    args = [Junk(s).build() for s in srcs]
    kwargs = {} if dtype is None or "dtype" not in inspect.signature(method).parameters \
        else {"dtype": Junk(dtype).build()}
    _made_or_refused(method, args, kwargs)


@settings(max_examples=60)
@given(srcs=st.lists(st.one_of(junk, st.sampled_from(["'desync'", "'text'", "(1, 2)"])),
                     max_size=4))
def test_a_finding_is_made_or_refused_with_a_typed_error(srcs: list[str]) -> None:
    """THE LAW for ``Finding(kind, text, pattern, ranks)`` (issue 27): made only of a kind of
    ``FINDING_KINDS``, strings and a tuple of ranks."""
    finding = _made_or_refused(Finding, [Junk(s).build() for s in srcs])
    if finding is not None:
        assert finding.kind in FINDING_KINDS and isinstance(finding.text, str)
        assert all(isinstance(r, int) for r in finding.ranks)


# ---- the command, in a subprocess --------------------------------------------------------------
_FLAGS = ("--world", "--devices-per-host", "--hosts-per-domain", "--dims", "--name", "--rank",
          "--format", "--expect-intra-host", "--expect-intra-domain", "--view", "--color-by",
          "--channels", "--buffsize-mib", "--fixed-mib", "--svg", "--fail", "--fail-host",
          "--spares", "--topology", "--hosts", "--hosts-file", "--traffic", "--out")
_MACHINE = str(Path(__file__).resolve().parents[1] / "examples" / "machine.json")
_VALUES = ("8", "0", "-1", "1" * 5000, "2.5", "nan", "dp=2,tp=4", "dp=2,,tp", "=", "x=0",
           "pp=4,dp=8,cp=4,tp=8", "json", "text", "tp", "dp,zz", "", " ", "\u00e9", "/dev/null",
           "/nonexistent/dir/x.svg", "--world", "13", "0-7", "3-1", "8-15,24", "1,,2", "0-99999",
           "99999999", "5-", _MACHINE, "node[001-128]", "n[1-", "n[0-99999999999]",
           "tp=1GiB", "dp=14,tp=8")
_PLANS = (
    "VIEWS = {}", "VIEWS = None", "VIEWS = {'a': 1}", "VIEWS = {1: MeshView.from_shape(8, ('w',))}",
    "VIEWS = {'a': MeshView.from_shape((2, 4), ('dp', 'tp'))}\nTOPOLOGY = 3",
    "raise SystemExit(3)", "1/0", "import sys; sys.exit()", "VIEWS = HostileMapping()",
    "VIEWS = {'a': MeshView.from_shape((2, 4), ('dp', 'tp'))}\nTOPOLOGY = Topology(8, 2)",
    "class V(dict):\n    def items(self): raise RuntimeError('x')\nVIEWS = V(a=1)",
    "WORLD = 3\ndef PLAN(w): return {}",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\ndef PLAN(w): raise RuntimeError('x')",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\nPLAN = lambda w: HostileMapping()",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\nPLAN = lambda w: {'a': w['tp']}",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "PLAN = lambda w: {'a': w} if w.ranks.is_identity else 1 / 0",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "PLAN = lambda w: {'a': w.unflatten('tp', (2, 2), ('x', 'y'))}",
    # issue 30: never-ending, oversized, exiting, unprintable
    "VIEWS = Forever()",
    "VIEWS = {f'v{i}': MeshView.from_shape(8, ('w',)) for i in range(4000)}",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "PLAN = lambda w: {'a': w} if w.ranks.is_identity else Forever()",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "def PLAN(w):\n    if not w.ranks.is_identity: raise SystemExit(0)\n    return {'a': w}",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "def PLAN(w):\n    if not w.ranks.is_identity: raise Odd()\n    return {'a': w}",
    "raise Odd()",
    "raise KeyboardInterrupt",
    "WORLD = MeshView.from_shape((2, 4), ('dp', 'tp'))\n"
    "def PLAN(w):\n    if not w.ranks.is_identity: raise KeyboardInterrupt\n    return {'a': w}",
)
_PRELUDE = """from mesh import MeshView, Topology
from collections.abc import Mapping
class HostileMapping(Mapping):
    def __getitem__(self, k): raise RuntimeError('no item')
    def __iter__(self): raise RuntimeError('no iter')
    def __len__(self): raise RuntimeError('no len')
class Forever(Mapping):
    def __getitem__(self, k): return VIEW
    def __iter__(self):
        i = 0
        while True:
            yield f'v{i}'
            i += 1
    def __len__(self): return 1
class Odd(Exception):
    def __str__(self): raise RuntimeError('no message')
VIEW = MeshView.from_shape((2, 4), ('dp', 'tp'))
"""
_DRIVER = """
import json, sys, io, contextlib
from mesh._cli import main
out = []
for argv in json.loads(sys.stdin.read()):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except SystemExit as e:
        code = e.code
    except BaseException as e:
        code = f"raised {type(e).__name__}: {e}"
    out.append([argv, code, "Traceback" in err.getvalue()])
print(json.dumps(out))
"""


def _run_batch(folder: Path, argvs: list[list[str]], plans: list[str]) -> None:
    """THE LAW for the command over ``argvs`` and ``plans`` (each run with several flags),
    in one process."""
    huge = folder / "huge.py"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk used
    runs = [["explain", *a] for a in argvs] + [["place", *a] for a in argvs[::4]]
    runs += [["explain", str(huge)], ["compare", str(huge)], ["explain", "/dev/zero"]]
    interrupting = set()
    for i, plan in enumerate(plans):
        path = folder / f"plan{i}.py"
        path.write_text(_PRELUDE + plan + "\n")
        if "KeyboardInterrupt" in plan:
            interrupting.add(str(path))
        runs.append(["explain", str(path)])
        runs.append(["explain", str(path), "--fail", str(i % 8), "--spares", "8,9", "--rank",
                     "1"])
        runs.append(["explain", str(path), "--fail-host", "0", "--format", "json"])
        runs.append(["compare", str(path), "--dims", "dp=2,tp=4"])
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(runs),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for argv, code, traceback in json.loads(done.stdout.strip().splitlines()[-1]):
        allowed = (0, 1, 2, 130) if set(argv) & interrupting else (0, 1, 2)
        assert code in allowed and not traceback, (argv, code)


def test_every_hostile_plan_file_ends_with_0_1_or_2(tmp_path: Path) -> None:
    """THE LAW for every plan file of the table (and the huge ones), once each."""
    _run_batch(tmp_path, [], list(_PLANS))


@settings(max_examples=5, deadline=None)
@given(argvs=st.lists(st.lists(st.sampled_from(_FLAGS + _VALUES), max_size=6), min_size=20,
                      max_size=20),
       plans=st.lists(st.sampled_from(_PLANS), min_size=4, max_size=4))
def test_the_command_ends_with_0_1_or_2_and_no_traceback(tmp_path_factory: pytest.TempPathFactory,
                                                         argvs: list[list[str]],
                                                         plans: list[str]) -> None:
    """THE LAW for ``meshlayout explain`` (argv junk and hostile plan files), in one process
    per batch."""
    _run_batch(Path(tmp_path_factory.mktemp("plans")), argvs, plans)

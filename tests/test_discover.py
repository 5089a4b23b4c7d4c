"""Discovery in one process: what a rank reads of its machine (hostname and boot id, local
rank, Slurm, NVML through a stand-in ``pynvml``), and the gather through a store among
threads pretending to be ranks: the topology, its cost per rank, a missing rank.  (Real
processes: ``tests/test_topology_gloo.py``; 131,072 ranks: ``bench/discover_scale.py``.)"""

from __future__ import annotations

import hashlib
import importlib.machinery
import sys
import threading
import types
from typing import Any

import pytest
from counting_store import CountingStore
from torch._C._distributed_c10d import HashStore

from backend import BackendConfigError, DiscoveryError, DiscoveryRecord, FakeBackend
from backend import discover_topology as discover
from backend._c10d._discover import gather, nvlink_domain
from backend._c10d._discovery_record import RunLine
from backend._c10d._gather import machine
from mesh import Topology


# ---- a rank's record ------------------------------------------------------------------------
def test_a_record_reads_the_hostname_boot_id_local_rank_and_slurm(monkeypatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "gb200-017")
    monkeypatch.setattr("backend._c10d._discover._boot_id", lambda: "1b2c-boot")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR", "b4.gb200-017")
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR_PATTERN", "block.node")
    r = DiscoveryRecord.read()
    assert (r.hostname, r.local_rank, r.slurm_topology_addr) == ("gb200-017", 3, "b4.gb200-017")
    assert r.host == hashlib.sha256(b"gb200-017\n1b2c-boot").hexdigest()[:16]
    assert r.domain == "slurm:b4"  # the Slurm block, without an NVLink domain


def test_slurm_local_id_stands_in_for_local_rank_and_a_switch_tree_is_no_domain(
        monkeypatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("SLURM_LOCALID", "5")
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR", "s0.s3.node9")
    monkeypatch.setenv("SLURM_TOPOLOGY_ADDR_PATTERN", "switch.switch.node")
    r = DiscoveryRecord.read()
    assert r.local_rank == 5 and r.domain is None


def test_the_same_hostname_after_a_reboot_is_another_host() -> None:
    assert DiscoveryRecord.of("n1", boot_id="a").host != DiscoveryRecord.of("n1", boot_id="b").host


@pytest.mark.parametrize(("make", "match"), [
    (lambda: DiscoveryRecord.of(""), "hostname"),
    (lambda: DiscoveryRecord.of("a\nb"), "newlines"),
    (lambda: DiscoveryRecord.of("a", local_rank=-1), "local_rank"),
    (lambda: DiscoveryRecord.of("a", local_rank=True), "local_rank"),
    (lambda: DiscoveryRecord.of("a", nvlink_domain=3), "nvlink_domain"),
])
def test_a_bad_record_is_refused(make, match) -> None:
    with pytest.raises(BackendConfigError, match=match):
        make()


# ---- NVML, through a stand-in pynvml ---------------------------------------------------------
class _Fabric:
    def __init__(self, uuid: bytes, clique: int, state: int = 3, status: int = 0) -> None:
        self.clusterUuid, self.cliqueId, self.state, self.status = (
            (ctypes_like(uuid)), clique, state, status)


def ctypes_like(raw: bytes) -> list[int]:
    return list(raw)  # NVML gives a ctypes array of unsigned bytes


def _pynvml(monkeypatch, *, fabric: Any = None, init_fails: bool = False) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    mod = types.ModuleType("pynvml")
    mod.__spec__ = importlib.machinery.ModuleSpec("pynvml", None)

    def init() -> None:
        if init_fails:
            raise RuntimeError("NVML Shared Library Not Found")

    def fabric_info(handle: Any) -> Any:
        seen["handle"] = handle
        if isinstance(fabric, Exception):
            raise fabric
        return fabric

    mod.nvmlInit = init  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: seen.setdefault("shutdown", True)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("index", i)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByUUID = lambda u: ("uuid", u)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetGpuFabricInfo = fabric_info  # type: ignore[attr-defined]
    mod.NVML_GPU_FABRIC_STATE_COMPLETED = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return seen


def test_the_nvlink_domain_is_the_fabrics_cluster_and_clique(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen = _pynvml(monkeypatch, fabric=_Fabric(bytes(range(16)), 7))
    assert nvlink_domain(2) == f"{bytes(range(16)).hex()}/7"
    assert seen["handle"] == ("index", 2) and seen["shutdown"]


def test_cuda_visible_devices_picks_the_gpu_nvml_asks(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    seen = _pynvml(monkeypatch, fabric=_Fabric(b"\x01" * 16, 0))
    nvlink_domain(1)
    assert seen["handle"] == ("uuid", "GPU-bbbb")


@pytest.mark.parametrize("case", ["not registered", "no fabric", "no driver", "zero uuid"])
def test_no_fabric_is_no_domain_and_no_error(monkeypatch, case: str) -> None:
    kw: dict[str, Any] = {
        "not registered": {"fabric": _Fabric(b"\x01" * 16, 0, state=1)},
        "no fabric": {"fabric": RuntimeError("NVML_ERROR_NOT_SUPPORTED")},
        "no driver": {"init_fails": True},
        "zero uuid": {"fabric": _Fabric(bytes(16), 0)},
    }[case]
    _pynvml(monkeypatch, **kw)
    assert nvlink_domain(0) is None


def test_without_pynvml_there_is_no_domain(monkeypatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert nvlink_domain(0) is None


# ---- the gather among threads ----------------------------------------------------------------
def _world(records: list[DiscoveryRecord], timeout: float = 20.0, absent: int | None = None
           ) -> tuple[dict[int, Any], dict[int, CountingStore]]:
    shared, found, stores = HashStore(), {}, {}

    def rank(r: int) -> None:
        store = stores[r] = CountingStore(shared)
        try:
            found[r] = gather(store, r, len(records), records[r], timeout, 0).run()
        except DiscoveryError as e:
            found[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(records))
               if r != absent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return found, stores


def test_a_world_of_64_on_16_hosts_in_racks_of_4_costs_each_rank_a_few_calls() -> None:
    records = [DiscoveryRecord.of(f"node{r // 4:02d}", local_rank=r % 4,
                                  nvlink_domain=f"{r // 16:032x}/0") for r in range(64)]
    found, stores = _world(records)
    expected = Topology.from_hosts([f"node{r // 4:02d}" for r in range(64)], hosts_per_domain=4)
    assert all(t == expected for t in found.values()) and len(found) == 64
    assert found[0].host_name(15) == "node15"
    calls = sorted(s.total() for s in stores.values())
    # 11 for most (rank 0, which reads no neighbour, 10); a run's first rank (1), the last to
    # arrive (2) and the last to check (1; any rank, as threads are scheduled) make up to 4 more
    assert calls[0] >= 10 and calls[len(calls) // 2] == 11 and calls[-1] <= 15
    # bytes read: the neighbour's digest, the topology's compact data and the verdict, the
    # same for every rank but the last to arrive, which also reads the 16 runs once
    reads = sorted(s.bytes_read for r, s in stores.items() if r)
    assert reads[0] == reads[-2] < 400 and reads[-1] < reads[0] + 16 * 120


def test_hosts_named_alike_on_two_machines_are_two_hosts() -> None:
    records = [DiscoveryRecord.of("worker", boot_id=f"boot{r // 2}", local_rank=r % 2)
               for r in range(4)]
    found, _ = _world(records)
    assert found[0] == Topology(4, 2)
    assert found[0].host_name(0).startswith("worker#") != found[0].host_name(1)


def test_a_missing_rank_is_named_by_every_other_within_the_timeout() -> None:
    """Issue 34, item 3: a rank that never arrives is named (it was only counted), and every
    other rank gets the same error."""
    records = [DiscoveryRecord.of(f"n{r // 2}", local_rank=r % 2) for r in range(4)]
    found, _ = _world(records, timeout=0.3, absent=3)
    assert sorted(found) == [0, 1, 2]
    assert len({str(e) for e in found.values()}) == 1
    for e in found.values():
        assert isinstance(e, DiscoveryError) and "rank 3 did not arrive within 0.3 s" in str(e)


def test_the_runs_make_the_machine() -> None:
    """Unknown local ranks go on from the host's last device; a host in two domains is an
    error."""
    topo = machine([RunLine(0, "h1", "a", None, None), RunLine(2, "h2", "b", None, None),
                    RunLine(3, "h1", "a", None, None)], 5)
    assert [topo.host(r) for r in range(5)] == [0, 0, 1, 0, 0]
    assert [topo.device(r) for r in range(5)] == [0, 1, 0, 2, 3]
    with pytest.raises(DiscoveryError, match="two fast domains"):
        machine([RunLine(0, "h1", "a", 0, "x"), RunLine(1, "h2", "b", 0, None),
                 RunLine(2, "h1", "a", 1, "y")], 3)


def test_a_fake_backend_has_no_store_to_gather_through() -> None:
    with pytest.raises(BackendConfigError, match="give bind a topology="):
        discover(FakeBackend(4, rank=1))


def test_a_bad_timeout_is_refused_even_once_the_machine_is_known() -> None:
    """The answer is kept for the backend, but a later call's bad timeout is still refused
    (it was returned the kept answer without looking at it)."""
    import torch.distributed as dist

    from backend import GlooBackend

    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        b = GlooBackend()
        assert discover(b).world_size == 1
        for bad in (-1, "soon", float("nan")):
            with pytest.raises(BackendConfigError, match="timeout must be a positive number"):
                discover(b, timeout=bad)
        assert discover(b, timeout=5).world_size == 1
    finally:
        dist.destroy_process_group()


def test_a_fake_world_has_no_store_to_gather_through() -> None:
    """A C10dBackend over torch's fake world (FakeStore, one process pretending to be rank 3
    of 8): its store answers nothing, so discovery (and bind with expectations) fails with a
    typed error saying so and offering topology=, not torch's 'pure virtual function'
    RuntimeError.  (TorchFakeBackend is refused up front: it does not meet in a store.)"""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from backend import C10dBackend, ExpectationError, bind
    from mesh import MeshView

    dist.init_process_group("fake", store=FakeStore(), rank=3, world_size=8)
    try:
        b = C10dBackend()
        with pytest.raises(DiscoveryError, match="topology="):
            discover(b, timeout=1)
        with pytest.raises(DiscoveryError, match="topology="):
            bind(MeshView.from_shape((2, 4), ("dp", "tp")), b, expect_intra_host=("tp",))
        with pytest.raises(ExpectationError):  # with the machine given, checked as usual
            bind(MeshView.from_shape((2, 4), ("dp", "tp")), b, topology=Topology(8, 2),
                 expect_intra_host=("tp",))
    finally:
        dist.destroy_process_group()


def test_a_call_that_fails_locally_still_uses_up_its_number(monkeypatch) -> None:
    """Issue 34, item 3: a call that failed before it reached the store left its round to the
    next call, which then filled it (mixing two calls).  The call's number is taken first."""
    import torch.distributed as dist

    from backend import GlooBackend
    from backend._c10d import _discover
    from backend._c10d._gather import namespace

    dist.init_process_group("gloo", store=HashStore(), rank=0, world_size=1)
    try:
        b, record = GlooBackend(), DiscoveryRecord.of("n0", local_rank=0)
        first = _discover._CALLS.upcoming

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the store went away")

        monkeypatch.setattr(_discover, "gather", broken)
        with pytest.raises(DiscoveryError, match="the store went away"):
            discover(b, record=record, timeout=5)
        monkeypatch.undo()
        assert discover(b, record=record, timeout=5) == Topology(1, 1)
        store = dist.distributed_c10d._get_default_store()
        assert store.check([f"{namespace(first + 1)}/verdict"])
        assert not store.check([f"{namespace(first)}/r/0"])
    finally:
        dist.destroy_process_group()

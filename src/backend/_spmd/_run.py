"""Running a program for one rank, bounded: a per-rank time limit and memory bound, threads
watched, async programs refused, and torch.distributed as the program found it.

The limit: in the main thread of a POSIX process, ``SIGALRM`` (a real-time timer, nested
inside any timer already set, such as pytest-timeout's, which is restored after) raises
:class:`RankTimeout` in the program, again every 0.1 s until it stops (a program that
catches it goes on being interrupted); elsewhere a watchdog thread raises it
asynchronously in the program's thread (``PyThreadState_SetAsyncExc``), which interrupts
Python code but not a call blocked in C.  ``RankTimeout`` derives from ``BaseException``
so that a program's ``except Exception`` does not swallow it.

The memory bound: a watcher thread reads the process's resident set (``/proc/self/statm``)
every few milliseconds and raises :class:`RankMemory` in the program, the same way, once it
has grown past the bound since the rank started (a check runs every rank in one process:
a rank that keeps a real tensor of gigabytes would soon take the machine).  A single
allocation is interrupted after it returns; one freed before the watcher looked is found
at the end from the process's peak (``getrusage``, where the run raised it).  Where the
resident set cannot be read (no ``/proc``) the bound is not enforced.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from layout import show, show_error

from .._core import BackendConfigError, NotAMemberError, overriding
from ._events import library_dirs
from ._recording import Recording
from ._report import TORCH_HINT

__all__ = ["AwaitableProgram", "RankMemory", "RankStopped", "RankTimeout", "refuse_async",
           "resident_bytes", "run_rank", "torch_kept"]

class RankStopped(BaseException):
    """Raised in a program that went past a per-rank bound (a ``BaseException``, so
    ``except Exception`` in the program does not stop it)."""


class RankTimeout(RankStopped):
    """Raised in a program that ran past its per-rank time limit."""


class RankMemory(RankStopped):
    """Raised in a program that grew the process past its per-rank memory bound."""


class AwaitableProgram(BackendConfigError):
    """The program is async: it was not run (a misuse, not a finding)."""


def refuse_async(program: object) -> None:
    """Refuse an ``async def`` program before any rank runs."""
    target = getattr(program, "func", program)  # functools.partial
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        raise AwaitableProgram(
            "check_spmd runs the program synchronously, but it is async "
            f"({show(program)}); pass a function that runs it, e.g. "
            "lambda backend: asyncio.run(program(backend))")


def run_rank(program: Callable[[Any], object], recorder: Recording, limit: float,
             around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
             memory: int | None = None) -> None:
    """Run ``program(recorder)`` with ``recorder`` as the process's backend, within
    ``limit`` seconds and ``memory`` bytes of growth (None: unbounded); what happened goes
    to ``recorder.trace``."""
    trace = recorder.trace
    before = set(threading.enumerate())
    bound = _MemoryBound(memory)
    try:
        with overriding(recorder, recorder.told), (around or contextlib.nullcontext)(), \
                _deadline(limit), bound:
            _refuse_awaitable(program(recorder))
    except AwaitableProgram:
        raise
    except RankTimeout:
        trace.timed_out = limit
    except RankMemory:
        pass  # the bound says how far it grew (below)
    except NotAMemberError as e:
        trace.error, trace.error_at = show_error(e), trace.requests
    except Exception as e:  # the program's own failure (its message may not print)
        _raised(recorder, e)
    finally:
        recorder.close()
    if bound.grown is not None and trace.timed_out is None:
        trace.ran_out = (bound.grown, bound.limit)
    _watch_threads(trace, before)


def _refuse_awaitable(result: object) -> None:
    """A program that returned an awaitable is async: refused (a misuse, not a finding)."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise AwaitableProgram(
            "check_spmd runs the program synchronously, but it returned an awaitable "
            f"({show(result)}); pass a function that runs it, e.g. "
            "lambda backend: asyncio.run(program(backend))")


def _raised(recorder: Recording, error: Exception) -> None:
    """Note the program's own error: where it raised, and the ``torch=True`` hint where it
    raised inside ``torch.distributed`` on the torch-free recorder."""
    hint = f"; {TORCH_HINT}" if not recorder.torch_groups and _in_torch(error) else ""
    recorder.trace.error = f"{show_error(error)} ({_where(error)}){hint}"
    recorder.trace.error_at = recorder.trace.requests


def _in_torch(error: BaseException) -> bool:
    """Whether ``error`` was raised inside ``torch.distributed`` (a program calling it on the
    torch-free recorder's groups, or before any torch world is up)."""
    part = os.sep + os.path.join("torch", "distributed") + os.sep
    return any(part in f.filename for f in traceback.extract_tb(error.__traceback__))


def resident_bytes() -> int | None:
    """The process's resident set in bytes (None where ``/proc/self/statm`` is absent)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MemoryBound:
    """A context: the program's thread gets :class:`RankMemory` once the resident set grew
    past ``limit`` bytes above its lowest since entry; ``grown`` then holds how far.  The
    watching is done by one thread for the process (:class:`_Watcher`), which a rank only
    registers with: a run costs a reset of the process's peak (``/proc/self/clear_refs``), two
    reads of it and a lock, no other file read while the watcher is sampling (its latest
    sample is the start), no thread.  The peak read at the end catches what the watcher
    missed (memory held for less than its 5 ms), measured from the resident set at entry: a
    peak reached before memory freed during the run is no growth."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit or 0
        watched = limit is not None
        self.fresh = watched and _reset_peak()  # the peak is this run's alone
        self.peak = _peak_bytes() if watched else 0
        # just reset, the peak is the resident set now; else the watcher's latest sample, which
        # may predate the free of the previous run's memory (it would hide this run's growth)
        # or memory allocated since, outside any run, while the allocation held the GIL and
        # the watcher could not look (it would count as this run's growth)
        self.start = (self.peak if self.fresh and self.peak else _WATCHER.latest()) \
            if watched else None
        self.entry = self.start  # the peak is judged against it, never against a later low:
        # the peak may come before memory the run frees (the collector freeing gigabytes an
        # earlier check left), and a peak before a low is no growth
        self.grown: int | None = None
        self.target = threading.get_ident()

    def seen(self, now: int) -> bool:
        """Note a sample of the resident set; whether the run is over its bound."""
        if self.start is not None:
            self.start = min(self.start, now)
            if now - self.start > self.limit:
                self.grown = now - self.start
        return self.grown is not None

    def __enter__(self) -> None:
        if self.start is not None:
            _WATCHER.watch(self)

    def __exit__(self, *exc: object) -> None:
        if self.start is None:
            return
        while True:  # unregister, then take a RankMemory it may have left pending here
            try:
                _WATCHER.watch(None)  # none is raised here after this
                _pending()  # a Python call: a pending one is delivered on entry
                break
            except RankMemory:
                continue
        peak = _peak_bytes()  # what the watcher missed: an allocation freed before it looked
        if self.grown is None and (self.fresh or peak > self.peak) and self.entry is not None \
                and peak - self.entry > self.limit:
            self.grown = peak - self.entry  # (without a reset, one below an earlier peak is unseen)


def _reset_peak() -> bool:
    """Reset the process's peak resident set to its resident set now, where Linux lets a
    process do so (``/proc/self/clear_refs``); whether it did.  With it, a run's peak is its
    own, even below an earlier run's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    """The process's peak resident set in bytes: ``VmHWM`` (which :func:`_reset_peak`
    resets), else ``getrusage`` (0 where there is neither)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource  # POSIX only
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_UNIT


_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes there, KiB on Linux


class _Watcher:
    """The process's memory watcher: while ranks register (:meth:`watch`), samples the
    resident set every 5 ms and interrupts the registered rank's thread (again every
    0.1 s) once it is over its bound; after a second with none registered it idles
    (blocked, no sampling) until the next.  Registering costs a lock, not a wake-up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bound: _MemoryBound | None = None
        self.sample: int | None = None  # the latest, while sampling
        self.idle = True
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def latest(self) -> int | None:
        """The resident set now: the latest sample while sampling, else read."""
        with self.lock:
            sample = None if self.idle else self.sample
        return sample if sample is not None else resident_bytes()

    def watch(self, bound: _MemoryBound | None) -> None:
        """Watch ``bound`` (None: none), waking the thread (started on first use) if idle."""
        with self.lock:
            self.bound = bound
            wake = bound is not None and self.idle
            if wake:
                self.idle, self.sample = False, None
        if wake:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="check_spmd-memory",
                                               daemon=True)
                self.thread.start()
            self.wake.set()

    def _run(self) -> None:
        seen = fired = time.monotonic()
        while True:
            if self.idle:
                self.wake.wait()
                self.wake.clear()
                seen = time.monotonic()
            time.sleep(0.005)
            rss, now = resident_bytes(), time.monotonic()  # read outside the lock
            with self.lock:
                bound, self.sample = self.bound, rss
                if bound is None:
                    self.idle = now - seen > 1.0
                    continue
                seen = now
                if rss is not None and bound.seen(rss) and now - fired >= 0.1:
                    fired = now
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(bound.target),
                                                               ctypes.py_object(RankMemory))


_WATCHER = _Watcher()


def _interrupt(target: int, error: type[BaseException], stop: threading.Event) -> None:
    """Raise ``error`` in thread ``target``, again every 0.1 s until ``stop`` is set."""
    while True:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target),
                                                   ctypes.py_object(error))
        if stop.wait(0.1):
            return


@contextlib.contextmanager
def torch_kept() -> Iterator[None]:
    """Undo, at the end, what a program rebound in the loaded ``torch.distributed`` modules:
    every function, class or module they held by name before is put back (names added are
    left)."""
    held = {name: (module, dict(vars(module))) for name, module in list(sys.modules.items())
            if module is not None and (name == "torch.distributed"
                                       or name.startswith("torch.distributed."))}
    try:
        yield
    finally:
        for module, before in held.values():
            now = vars(module)
            for name, value in before.items():
                if now.get(name, _GONE) is not value and (callable(value)
                                                          or inspect.ismodule(value)):
                    setattr(module, name, value)


_GONE = object()


def _where(error: BaseException) -> str:
    """``file:line`` of the last frame of the program's own in the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    dirs = library_dirs()
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(dirs)]
    where = (mine or frames)[-1] if frames else None
    return f"{where.filename}:{where.lineno}" if where is not None else "?"


def _watch_threads(trace: Any, before: set[threading.Thread]) -> None:
    """Threads the program left running: given a moment to end, then counted."""
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()
            and not t.name.startswith("check_spmd-")]  # not our watchers
    end = time.monotonic() + 0.2
    for t in left:
        t.join(max(0.0, end - time.monotonic()))
    trace.left_threads = sum(t.is_alive() for t in left)


@contextlib.contextmanager
def _deadline(limit: float) -> Iterator[None]:
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _alarm(limit):
            yield
    else:
        with _watchdog(limit):
            yield


@contextlib.contextmanager
def _alarm(limit: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise RankTimeout()

    old_handler = signal.signal(signal.SIGALRM, ring)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, limit, 0.1)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # the timer that was running (pytest-timeout's), less our time
            left = max(old_delay - (time.monotonic() - start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


@contextlib.contextmanager
def _watchdog(limit: float) -> Iterator[None]:
    target = threading.get_ident()
    stop = threading.Event()

    def watch() -> None:
        if not stop.wait(limit):
            _interrupt(target, RankTimeout, stop)

    watcher = threading.Thread(target=watch, name="check_spmd-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        _stop_watching(stop, watcher)


def _stop_watching(stop: threading.Event, watcher: threading.Thread) -> None:
    """Stop the watcher and take the ``RankStopped`` it may have left pending here.

    A pending one is delivered at the next Python call (here, ``_pending``), never cleared
    with ``PyThreadState_SetAsyncExc(thread, NULL)``: on CPython 3.11 that leaves the
    interpreter's eval breaker set, and any code run under ``sys.settrace`` afterwards (a
    coverage tool, a debugger) loops for ever on its first traced call."""
    while True:
        try:
            stop.set()
            watcher.join()
            _pending()
            return
        except RankStopped:
            continue  # delivered: once the watchdog has ended, no other can come


def _pending() -> None:
    """A Python call: the interpreter delivers a pending asynchronous exception on entry."""

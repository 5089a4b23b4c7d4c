"""Running a program for one rank, bounded: a per-rank time limit, threads watched, async
programs refused.

The limit: in the main thread of a POSIX process, ``SIGALRM`` (a real-time timer, nested
inside any timer already set, such as pytest-timeout's, which is restored after) raises
:class:`RankTimeout` in the program, again every 0.1 s until it stops (a program that
catches it goes on being interrupted); elsewhere a watchdog thread raises it
asynchronously in the program's thread (``PyThreadState_SetAsyncExc``), which interrupts
Python code but not a call blocked in C.  ``RankTimeout`` derives from ``BaseException``
so that a program's ``except Exception`` does not swallow it.
"""

from __future__ import annotations

import contextlib
import ctypes
import inspect
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from layout import show, show_error

from .._core import BackendConfigError, NotAMemberError, overriding
from ._events import library_dirs
from ._recording import Recording

__all__ = ["AwaitableProgram", "RankTimeout", "refuse_async", "run_rank"]


class RankTimeout(BaseException):
    """Raised in a program that ran past its per-rank time limit (a ``BaseException``, so
    ``except Exception`` in the program does not stop it)."""


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
             around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
             ) -> None:
    """Run ``program(recorder)`` with ``recorder`` as the process's backend, within
    ``limit`` seconds; what happened goes to ``recorder.trace``."""
    trace = recorder.trace
    before = set(threading.enumerate())
    try:
        with overriding(recorder, recorder.told), (around or contextlib.nullcontext)(), \
                _deadline(limit):
            result = program(recorder)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise AwaitableProgram(
                    "check_spmd runs the program synchronously, but it returned an awaitable "
                    f"({show(result)}); pass a function that runs it, e.g. "
                    "lambda backend: asyncio.run(program(backend))")
    except AwaitableProgram:
        raise
    except RankTimeout:
        trace.timed_out = limit
    except NotAMemberError as e:
        trace.error, trace.error_at = show_error(e), trace.requests
    except Exception as e:  # the program's own failure (its message may not print)
        trace.error = f"{show_error(e)} ({_where(e)})"
        trace.error_at = trace.requests
    finally:
        recorder._closed = True
    _watch_threads(trace, before)


def _where(error: BaseException) -> str:
    """``file:line`` of the last frame of the program's own in the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    dirs = library_dirs()
    mine = [f for f in frames if not os.path.abspath(f.filename).startswith(dirs)]
    where = (mine or frames)[-1] if frames else None
    return f"{where.filename}:{where.lineno}" if where is not None else "?"


def _watch_threads(trace: Any, before: set[threading.Thread]) -> None:
    """Threads the program left running: given a moment to end, then counted."""
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
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
        if stop.wait(limit):
            return
        while not stop.wait(0.1):  # again until the program stops
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target),
                                                       ctypes.py_object(RankTimeout))

    watcher = threading.Thread(target=watch, name="check_spmd-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        _stop_watching(stop, watcher)


def _stop_watching(stop: threading.Event, watcher: threading.Thread) -> None:
    """Stop the watchdog and take the ``RankTimeout`` it may have left pending here.

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
        except RankTimeout:
            continue  # delivered: once the watchdog has ended, no other can come


def _pending() -> None:
    """A Python call: the interpreter delivers a pending asynchronous exception on entry."""

"""A state's move running in the background: :class:`StateWork`, what
``backend.reshard_state(..., async_op=True)`` returns.

The move is the same one the blocking call makes, bucket by bucket, on a thread of its own
(started once every rank agreed on the plans and this rank's arguments were checked: those
errors still raise from the call).  The caller keeps computing, and reads the tensors as
their bucket lands (:meth:`StateWork.bucket`: an inference engine loading its weights bucket
by bucket) or all at once (:meth:`StateWork.wait`), as torch's ``Work.wait`` does.  An error
of the move (a pair of ranks that disagreed on what moves, a peer lost) is raised by every
later ``wait`` and by ``bucket`` of the bucket it stopped at or any after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from .._core import BackendConfigError, BackendError

__all__ = ["StateWork"]


class StateWork:
    """Handle of a state's move started with ``async_op=True``: :meth:`wait` for every
    tensor, :meth:`bucket` for one bucket's as soon as it has landed, :meth:`is_completed`
    to poll.  ``buckets``: how many buckets the move has (1 for a mapping of plans).

    >>> # work = reshard_state(plan, weights, async_op=True)
    >>> # ... compute ...;  engine.load(work.bucket(0));  ...;  new = work.wait()
    """

    def __init__(self, moving: Iterator[dict[str, Any]], buckets: int) -> None:
        self.buckets = buckets
        self._landed: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._done = False
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(moving,), daemon=True,
                                        name="meshlayout-reshard-state")
        self._thread.start()

    def _run(self, moving: Iterator[dict[str, Any]]) -> None:
        try:
            for got in moving:
                with self._lock:
                    self._landed.append(got)
                    self._lock.notify_all()
        except BaseException as e:  # kept for the caller's thread: raised by wait()
            self._error = e
        finally:
            with self._lock:
                self._done = True
                self._lock.notify_all()

    def is_completed(self) -> bool:
        """Whether the move has ended (every bucket landed, or it failed)."""
        with self._lock:
            return self._done

    def bucket(self, k: int, timeout: float | None = None) -> dict[str, Any]:
        """Bucket ``k``'s tensors (name -> this rank's destination local tensor, None where
        it is not in that tensor's destination), once it has landed: the move's error if it
        stopped at or before bucket ``k``; a typed error after ``timeout`` seconds."""
        if type(k) is not int or not 0 <= k < self.buckets:
            raise BackendConfigError(f"StateWork.bucket: k must be an int in [0, "
                                     f"{self.buckets}), got {k!r}")
        if not self._until(lambda: len(self._landed) > k, timeout, f"bucket {k}"):
            raise self._failed()
        with self._lock:
            return dict(self._landed[k])

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Every tensor's destination local tensor, as the blocking call returns them, once
        the move has ended; its error if it failed; a typed error after ``timeout``
        seconds."""
        self._until(lambda: self._done, timeout, "the whole move")
        if self._error is not None:
            raise self._failed()
        out: dict[str, Any] = {}
        with self._lock:
            for got in self._landed:
                out.update(got)
        return out

    def _until(self, ready: Callable[[], bool], timeout: float | None, what: str) -> bool:
        """Wait until ``ready()`` or the move's end; whether ``ready()`` (a typed error after
        ``timeout`` seconds)."""
        with self._lock:
            if not self._lock.wait_for(lambda: ready() or self._done, timeout):
                raise BackendError(f"StateWork: {what} had not landed after {timeout} s")
            return ready()

    def _failed(self) -> BaseException:
        """The error the move ended with (one that ended short of what was asked without an
        error cannot happen: the moves yield every bucket)."""
        return self._error if self._error is not None else BackendError(
            "StateWork: the move ended short of what was asked")

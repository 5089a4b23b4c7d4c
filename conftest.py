"""Shared pytest setup: Hypothesis profiles.

``default`` keeps the whole suite within a few minutes on 2 cores and is derandomized:
every run (CI's included) tries the same examples, so a green run here is a green run
there, and a failure reproduces.  ``thorough`` (chosen with
``MESHLAYOUT_HYPOTHESIS_PROFILE=thorough``) runs 20x the examples with fresh random
ones each run: the search for new counterexamples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("default", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=_SUPPRESSED)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("MESHLAYOUT_HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each public face pins its classes' ``__module__`` to itself (so pickles name the
    package), so doctest finds their docstrings in the face too; they run once, in the file
    that writes them (the face lists them in that file's ``__test__``), not again here."""
    items[:] = [item for item in items if not _pinned_class_in_its_face(item)]


def _pinned_class_in_its_face(item: pytest.Item) -> bool:
    test = getattr(item, "dtest", None)
    if test is None:
        return False
    package, _, name = test.name.partition(".")
    found = test.globs.get(name) if test.globs.get("__name__") == package else None
    return isinstance(found, type) and found.__module__ == package

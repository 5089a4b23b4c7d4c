"""Shared pytest setup: Hypothesis profiles.

``default`` keeps the whole suite within a few minutes on 2 cores and is derandomized:
every run (CI's included) tries the same examples, so a green run here is a green run
there, and a failure reproduces.  ``thorough`` (chosen with
``MESHLAYOUT_HYPOTHESIS_PROFILE=thorough``) runs 20x the examples with fresh random
ones each run: the search for new counterexamples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("default", max_examples=100, deadline=None, derandomize=True,
                          suppress_health_check=_SUPPRESSED)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("MESHLAYOUT_HYPOTHESIS_PROFILE", "default"))

"""Shared pytest setup: Hypothesis profiles.

``default`` keeps the whole suite within a few minutes on 2 cores; ``thorough``
(chosen with ``MESHLAYOUT_HYPOTHESIS_PROFILE=thorough``) runs 20x the examples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=_SUPPRESSED)
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=_SUPPRESSED)
settings.load_profile(os.environ.get("MESHLAYOUT_HYPOTHESIS_PROFILE", "default"))

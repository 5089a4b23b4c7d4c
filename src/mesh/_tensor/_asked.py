"""The keys of the reshard plans' memo (``_reshard``'s ``_MEMO``): what an entry answers,
typed so that every call site names one of a fixed set (``mypy`` checks the literals)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

__all__ = ["Asked", "MemoKey"]

Asked = Literal["src cells", "dst cells", "holders", "where", "placed", "receivers",
                "receives", "lost", "keeps", "sends", "reduces", "totals", "parts"]
"""What an entry of the plans' memo answers: a source or destination tile's cells, a source
tile's holders, a rank's host and domain, a tile's holders by place, a destination tile's
receivers; a rank's receives, lost boxes, kept part, sends and reductions; a plan's totals
one way; a staged cell's groups (:mod:`._staged`)."""

MemoKey = tuple[int, Asked, Hashable]
"""A memo entry's key: the plan's token, what it answers, and of what (a tile, a rank...)."""

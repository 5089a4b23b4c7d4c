"""``python -m mesh``: the ``meshlayout`` command (``python -m mesh explain --help``)."""

from ._cli import main

raise SystemExit(main())

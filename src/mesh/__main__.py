"""``python -m mesh``: the ``meshlayout`` command (``python -m mesh explain --help``)."""

from ._plan import main

raise SystemExit(main())

"""``python -m rebound_local.bench``."""

from rebound_local.bench import main

raise SystemExit(main())

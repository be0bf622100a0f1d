"""`python -m dsakit`: the same command line as the `dsakit` console script."""

from dsakit.cli import main

raise SystemExit(main())

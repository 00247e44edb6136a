"""python -m depthlab: the command line (:func:`depthlab.cli.main`)."""

from depthlab.cli import main

raise SystemExit(main())

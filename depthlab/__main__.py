from depthlab.cli import main

raise SystemExit(main())

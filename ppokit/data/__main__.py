from ppokit.data.cli import main

raise SystemExit(main())

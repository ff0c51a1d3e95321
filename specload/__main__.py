from specload.cli import main

raise SystemExit(main())

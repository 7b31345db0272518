from ascendctl.cli import main

raise SystemExit(main())

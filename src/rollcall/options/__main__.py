"""``python -m rollcall.options --markdown``: the option reference (:mod:`rollcall.options.reference`)."""

from rollcall.options.reference import main

raise SystemExit(main())

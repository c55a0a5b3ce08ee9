"""``python -m pyomo_odeest``: run the package demo."""
from .demo import main

raise SystemExit(main())

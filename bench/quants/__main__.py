"""`python -m bench.quants`: runs `bench.quants.main`."""

import sys

from .main import main

sys.exit(main())

"""`python -m bench.coverage`: runs `bench.coverage.main`."""

import sys

from .main import main

sys.exit(main())

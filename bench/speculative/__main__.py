"""`python -m bench.speculative`: runs `bench.speculative.main`."""

import sys

from .main import main

sys.exit(main())

"""`python -m bench.serve`: runs `bench.serve.main`."""

import sys

from .main import main

sys.exit(main())

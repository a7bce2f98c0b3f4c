"""`python -m bench.state`: runs `bench.state.main`."""

import sys

from .main import main

sys.exit(main())

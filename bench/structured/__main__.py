"""`python -m bench.structured`: runs `bench.structured.main`."""

import sys

from .main import main

sys.exit(main())

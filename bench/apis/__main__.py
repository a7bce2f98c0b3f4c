"""`python -m bench.apis`: runs `bench.apis.main`."""

import sys

from .main import main

sys.exit(main())

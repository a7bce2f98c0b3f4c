"""`python -m bench.json_layout`: runs `bench.json_layout.main`."""

import sys

from .main import main

sys.exit(main())

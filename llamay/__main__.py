import sys

from llamay.cli.main import main

sys.exit(main())

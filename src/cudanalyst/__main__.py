"""`python -m cudanalyst`."""

import sys

from cudanalyst.cli import main

sys.exit(main())

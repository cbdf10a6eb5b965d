"""`python -m cudanalyst.cli`."""

import sys

from cudanalyst.cli import main

sys.exit(main())

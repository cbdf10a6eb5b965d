"""`python -m cudanalyst`: the `cudanalyst` console script."""

import sys

from cudanalyst.entrypoints import cli

sys.exit(cli())

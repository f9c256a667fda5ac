"""`python -m x402_client.cli`: the `x402-eur` command."""

import sys

from . import main

sys.exit(main())

"""`python -m cdc_assets.cli`: the same as the `cdc-assets` command."""

import sys

from cdc_assets.cli.parser import main

sys.exit(main())

"""`python -m nightly_assets.cli`: what the `nightly` script runs."""

import sys

from nightly_assets.cli import main

sys.exit(main())

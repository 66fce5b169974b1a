"""Keep nightly_assets' own test run out of the overlay folders.

Their tests belong to the `nightlysample` demo project: the demo pipeline runs them
against an installed wheel, with the project's own markers.
"""

collect_ignore_glob = ["*"]

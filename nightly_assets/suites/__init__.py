"""Test suites shipped with nightly_assets and copied into the night's images (not imported)."""

"""The catalog: runners.yaml and one pipeline per <name>/defs.yaml (nightly_assets/catalog/loader.py)."""

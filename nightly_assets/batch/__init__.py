"""Batch-scheduled work (seed 004, Theta): jobs submitted and polled, deploys, benchmark sweeps, reports.

Kept free of imports: the local scheduler's supervisor starts as `python -m
nightly_assets.batch.schedulers`, and importing this package must stay cheap for it.
"""

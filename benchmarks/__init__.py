"""Benchmarks: each prints ratios measured against a baseline taken in the same run."""

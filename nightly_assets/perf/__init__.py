"""Benchmark results of the tested projects (not this repository's own speed benchmarks, which are
benchmarks/ at the root): timing files, change points and their checks."""

"""Accelerators on a runner: probing, facts, and handing devices to suites."""

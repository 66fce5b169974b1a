"""Splitting one suite across many machines: plans from recorded test durations (issue 39)."""

"""GitHub: a small REST client for one repository (pull requests, labels, statuses, issues)."""

"""nightlysample: a tiny pure-Python array kernel library."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nightlysample")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0.0.0"

"""A package's public names imported from their modules on first use (a module ``__getattr__``,
PEP 562), so that importing the package does not import what each name needs: the CLI answers at
once, and a code location loads without the SDKs only a run uses."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of `package`: each name of `homes` (name -> the module of `package`
    defining it) from its module when first asked for; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return __getattr__

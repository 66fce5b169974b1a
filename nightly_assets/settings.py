"""Where the embedded default keeps its state, which resource set (local or prod) is in force, and
how the NIGHTLY_* variables reach the resources: as `dg.EnvVar`s, read by each run."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ValidatorFunctionWrapHandler, WrapValidator

# No dagster import at the top: `nightly status` and `nightly tests` read these settings, and
# importing dagster is most of their start-up. The functions that need it import it.

Env = Literal["local", "prod"]


def nightly_env() -> Env:
    """NIGHTLY_ENV picks the resource set: `local` (the default; everything on this machine) or `prod`."""
    value = os.environ.get("NIGHTLY_ENV", "local")
    if value not in ("local", "prod"):
        raise ValueError(f"NIGHTLY_ENV={value!r}: expected 'local' or 'prod'")
    return value  # type: ignore[return-value]


def nightly_home() -> Path:
    """Root of artefacts, the SQLite warehouse, git caches and alerts: NIGHTLY_HOME or ./.nightly."""
    return Path(os.environ.get("NIGHTLY_HOME", Path.cwd() / ".nightly")).resolve()


WAREHOUSE_URL_VAR = "NIGHTLY_WAREHOUSE_URL"


def local_warehouse_url(home: Path) -> str:
    """The SQLite warehouse of local mode with no NIGHTLY_WAREHOUSE_URL."""
    return f"sqlite:///{home / 'warehouse.sqlite'}"


def env_var_names(config: object) -> set[str]:
    """Every variable a Dagster config reads through `{env: NAME}`: in resources (`dg.EnvVar`
    fields, nested resources included) or in an instance's YAML (mappings and lists)."""
    import dagster as dg

    if isinstance(config, dg.ConfigurableResource):
        config = config._convert_to_config_dictionary()  # the config as Dagster sees it
    if isinstance(config, dict):
        if set(config) == {"env"}:
            return {str(config["env"])}
        return set().union(*(env_var_names(value) for value in config.values()))
    if isinstance(config, list):
        return set().union(*(env_var_names(value) for value in config))
    return set()


def env_settings(defaults: Mapping[str, Any] | None = None, /, **fields: str) -> dict[str, Any]:
    """`field=VARIABLE` as `{field: dg.EnvVar(VARIABLE)}`, for each variable that is set (not ""),
    over `defaults`. The UI and run config show `{env: VARIABLE}` and each run reads the value; an
    unset variable is left out, so the field keeps its default (an EnvVar of an unset variable
    would fail the run)."""
    import dagster as dg

    variables = {field: dg.EnvVar(name) for field, name in fields.items() if os.environ.get(name)}
    return {**(defaults or {}), **variables}


def _defer_env_var(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    import dagster as dg

    int_env_var = type(dg.EnvVar.int("_"))  # what dg.EnvVar.int returns (its class is not exported)
    return value if isinstance(value, dg.EnvVar | int_env_var) else handler(value)


# For a field that is not a str: until a run resolves it, a dg.EnvVar holds the variable's name,
# so the field's type and checks apply to the value the run reads, not to the name.
FromEnv = WrapValidator(_defer_env_var)


def one_of(*choices: str) -> AfterValidator:
    """A str field's check that it is one of `choices` (a Literal field takes no `{env: NAME}`)."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"{value!r}: expected " + " or ".join(repr(c) for c in choices))
        return value

    return AfterValidator(check)


def _seconds(positive: bool) -> AfterValidator:
    def check(text: str) -> str:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > 0 if positive else value >= 0):
            raise ValueError(f"{text!r}: expected a number of seconds {'> 0' if positive else '>= 0'}")
        return text

    return AfterValidator(check)


def _shell_words(text: str) -> str:
    try:
        shlex.split(text)
    except ValueError as error:  # an unclosed quote or a trailing backslash
        raise ValueError(f"{text!r}: expected options separated by spaces ({error})") from None
    return text


# Options a variable may set as one string, split as a shell would (quotes keep a space in one).
ShellWords = Annotated[str, AfterValidator(_shell_words), FromEnv]


# Durations a variable may set. Dagster reads `{env: NAME}` into str, int and bool fields but not
# floats, so these are the number's text, checked when the resource is built and read with float().
Seconds = Annotated[str, _seconds(positive=False), FromEnv]
PositiveSeconds = Annotated[str, _seconds(positive=True), FromEnv]

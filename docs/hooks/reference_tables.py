"""The reference tables of the docs site, generated from the code so they never drift from it.

An mkdocs hook (mkdocs.yml `hooks:`): a page that holds `<!-- generated: NAME -->` gets the
Markdown of the generator NAME in its place when the site is built:

* `catalog`: every model of the pipeline document (`<name>/defs.yaml`'s `attributes`) and of
  `runners.yaml`, found from `Pipeline` and `Runner` through their fields' types: each field's
  name, type, default and description (the `Field(description=...)`, else the comment beside or
  above the field in the source);
* `stage_kinds`: each registered stage kind (`KIND = StageKind(...)` in
  `nightly_assets/stage_kinds/`): its module, the runner kinds it takes, its kinds tags and its
  `params` model's fields;
* `runner_kinds`: each runner kind (`RunnerKind`) with its backend's module and capabilities, and
  the stage kinds that take it;
* `settings`: every variable the resources read as a `dg.EnvVar` (wired by `resources_for` with
  every NIGHTLY_* variable set), with the resource field it reaches, its type, default and
  description; then every NIGHTLY_* name the package's modules read, with those modules.

`python docs/hooks/reference_tables.py NAME` prints one of them.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import os
import re
import sys
import tempfile
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- generated: (\w+) -->")


# -- one model's fields ------------------------------------------------------------------------


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comment of each field in the model's own class body: the one at the end of its line(s),
    else the block of comment lines right above it."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comment_of_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment_of_line[token.start[0]] = token.string.lstrip("#").strip()
    [cls] = ast.parse(source).body
    assert isinstance(cls, ast.ClassDef)
    found = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        end = node.end_lineno or node.lineno
        beside = [comment_of_line[n] for n in range(node.lineno, end + 1) if n in comment_of_line]
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comment_of_line.get(line, ""))
            line -= 1
        text = " ".join(beside) or " ".join(above)
        if text:
            found[node.target.id] = text
    return found


def type_name(annotation: Any) -> str:
    """A field's type as a reader of the YAML needs it: `int`, `str | None`, `list[Stage]`, `"a" | "b"`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    factory = info.default_factory
    value = factory() if factory is not None else info.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return f"a {type(value).__name__} of its defaults"
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def fields_table(model: type[BaseModel], place: str = "") -> str:
    """The model's fields as a Markdown table: field, type, default, description."""
    comments = field_comments(model)
    rows = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        description = info.description or comments.get(name, "")
        rows.append(
            f"| `{place}{info.alias or name}` | `{cell(type_name(info.annotation))}` "
            f"| `{cell(default_text(info))}` | {cell(description)} |"
        )
    return "\n".join(rows)


def nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models a field's type names, at any depth (`list[Stage]`, `Suite | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from nested_models(arg)


def reachable_models(*roots: type[BaseModel]) -> list[type[BaseModel]]:
    """The roots and every model their fields name, breadth first, each once."""
    seen: list[type[BaseModel]] = []
    queue = list(roots)
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            queue.extend(nested_models(info.annotation))
    return seen


def doc_of(thing: object) -> str:
    """The first paragraph of a docstring, on one line (none inherited from pydantic's bases)."""
    doc = thing.__dict__.get("__doc__") if isinstance(thing, type) else getattr(thing, "__doc__", None)
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def model_section(model: type[BaseModel], level: str = "###") -> str:
    module = model.__module__
    head = f"{level} {model.__name__}\n\n`{module}.{model.__name__}`"
    doc = doc_of(model)
    return f"{head}" + (f": {doc}" if doc else "") + "\n\n" + fields_table(model) + "\n"


# -- the generators ----------------------------------------------------------------------------


def _kinds() -> Any:
    import nightly_assets.catalog.loader  # noqa: F401 - imports the stage kinds, which register
    from nightly_assets.catalog.kinds import registered_kinds

    return registered_kinds()


def catalog() -> str:
    from nightly_assets.catalog.models import Catalog, Pipeline, Runner

    parts = [
        "A pipeline's `defs.yaml` holds `type: nightly_assets.catalog.component.NightlyPipeline` and, "
        "under `attributes`, one `Pipeline`; `runners.yaml` holds `pools` and `runners` (below). "
        "Each model refuses a key it does not list.\n",
        "## The pipeline document\n",
        *(model_section(m) for m in reachable_models(Pipeline) if m is not Runner),
        "## runners.yaml\n",
        "| field | type | description |\n| --- | --- | --- |",
        *(
            f"| `{name}` | `{cell(type_name(info.annotation))}` | "
            f"{'Dagster concurrency pools and their limits' if name == 'pools' else 'runners by name'} |"
            for name, info in Catalog.model_fields.items()
            if name in ("pools", "runners")
        ),
        "",
        *(model_section(m) for m in reachable_models(Runner)),
    ]
    return "\n".join(parts)


def stage_kinds() -> str:
    kinds = _kinds()
    parts = [
        "| kind | runner kinds | kinds tags | module |\n| --- | --- | --- | --- |",
        *(
            f"| [`{name}`](#{name}) | {', '.join(sorted(kind.runners))} | "
            f"{', '.join(sorted(kind.kinds))} | `{kind.build.__module__}` |"
            for name, kind in kinds.items()
        ),
        "",
    ]
    for name, kind in kinds.items():
        params = kind.params
        parts.append(f"## {name}\n")
        module_doc = doc_of(sys.modules[kind.build.__module__])
        if module_doc:
            parts.append(module_doc + "\n")
        parts.append(
            f"Runs on: {', '.join(f'`{r}`' for r in sorted(kind.runners))}. "
            f"Params: `{params.__module__}.{params.__name__}`"
            + (f": {doc_of(params)}" if doc_of(params) else "")
            + "\n"
        )
        if params.model_fields:
            parts.append(fields_table(params) + "\n")
        else:
            parts.append("No `params`.\n")
        for nested in reachable_models(params)[1:]:
            parts.append(model_section(nested, "###"))
    return "\n".join(parts)


def runner_kinds() -> str:
    from nightly_assets.catalog.kinds import RunnerKind
    from nightly_assets.runners import backends

    kinds = _kinds()
    rows = [
        "| runner kind | backend | runs | stage kinds that take it |",
        "| --- | --- | --- | --- |",
    ]
    for name, backend in backends().items():
        module = type(backend).__module__
        stage_kinds = [k for k, kind in kinds.items() if name in kind.runners]
        rows.append(
            f"| `{name}` | `{module}` | {', '.join(sorted(backend.supports))} | "
            f"{', '.join(f'`{k}`' for k in stage_kinds)} |"
        )
    assert list(backends()) == list(typing.get_args(RunnerKind))
    notes = [
        f"* **`{name}`** (`{type(backend).__module__}`): {doc_of(sys.modules[type(backend).__module__])}"
        for name, backend in backends().items()
    ]
    return "\n".join([*rows, "", *notes, ""])


class _EveryVariableSet(dict[str, str]):
    """`os.environ` as if every setting of ours were set, so `resources_for` wires each one."""

    def get(self, key: str, default: Any = None) -> str | None:  # type: ignore[override]
        if key.startswith("NIGHTLY_") or key == "SLACK_BOT_TOKEN":
            return "set"
        return super().get(key, default)


def env_var_fields() -> dict[str, tuple[str, type, str, FieldInfo]]:
    """Each variable a resource reads as a `dg.EnvVar`: (where, the model, the field, its info)."""
    import dagster as dg

    from nightly_assets.resources import resources_for

    found: dict[str, tuple[str, type, str, FieldInfo]] = {}

    def walk(value: Any, where: str) -> None:
        if isinstance(value, BaseModel):
            for name, info in type(value).model_fields.items():
                inner: Any = getattr(value, name, None)  # an EnvVar or IntEnvVar, else a value to walk
                if isinstance(inner, dg.EnvVar) or type(inner).__name__ == "IntEnvVar":
                    found.setdefault(str(inner.env_var_name), (where, type(value), name, info))
                else:
                    walk(inner, f"{where}.{name}")
        elif isinstance(value, dict):
            for key, inner in value.items():
                if isinstance(inner, dg.EnvVar):
                    found.setdefault(str(inner.env_var_name), (where, type(value), str(key), FieldInfo()))
                else:
                    walk(inner, f"{where}[{key}]")

    with (
        mock.patch.object(os, "environ", _EveryVariableSet(os.environ)),
        tempfile.TemporaryDirectory() as home,
    ):
        for env in ("local", "prod"):
            for key, resource in resources_for(env, Path(home)).items():  # type: ignore[arg-type]
                walk(resource, key)
    return dict(sorted(found.items()))


def variables_read() -> dict[str, list[str]]:
    """Every NIGHTLY_* name the package's modules hold (as test_deployment reads them), with those modules."""
    package = ROOT / "nightly_assets"
    read: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if "suites" in path.relative_to(package).parts:
            continue
        module = path.relative_to(ROOT).as_posix()
        for name in re.findall(r'"(NIGHTLY_[A-Z_]*[A-Z])"', path.read_text()):
            read.setdefault(name, set()).add(module)
    return {name: sorted(modules) for name, modules in sorted(read.items())}


def settings() -> str:
    rows = [
        "| variable | resource | field | type | default | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for variable, (where, model, name, info) in env_var_fields().items():
        if model is dict:
            rows.append(f"| `{variable}` | `{where}` | `{name}` | `str` | | |")
            continue
        description = info.description or field_comments(model).get(name, "")
        rows.append(
            f"| `{variable}` | `{where}` ({model.__name__}) | `{name}` "
            f"| `{cell(type_name(info.annotation))}` | `{cell(default_text(info))}` | {cell(description)} |"
        )
    read = ["| variable | read in |", "| --- | --- |"]
    read += [
        f"| `{name}` | {', '.join(f'`{m}`' for m in modules)} |" for name, modules in variables_read().items()
    ]
    return "\n".join(
        [
            "### Passed to the resources as `dg.EnvVar`s\n",
            "Each run reads these from its environment; the UI and run config show `{env: NAME}`. "
            "An unset variable is left out, so the field keeps the default below (local mode puts "
            "folders of `NIGHTLY_HOME` in some, as the table above says).\n",
            *rows,
            "",
            "### Every NIGHTLY_* variable the code names\n",
            *read,
            "",
        ]
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "catalog": catalog,
    "stage_kinds": stage_kinds,
    "runner_kinds": runner_kinds,
    "settings": settings,
}


def render(markdown: str) -> str:
    """The page with each `<!-- generated: NAME -->` replaced by its tables."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"no generator {name!r}; expected one of {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: runs on every page's Markdown before it becomes HTML."""
    return render(markdown)


if __name__ == "__main__":
    print(GENERATORS[sys.argv[1]]())

"""One pipeline of the catalog as a Dagster component: `<name>/defs.yaml` in the defs folder,

    type: nightly_assets.catalog.component.NightlyPipeline
    attributes:
      name: <name>          # the pipeline's document (catalog/models.py: Pipeline)
      ...

`dg check yaml` checks the attributes against the Pipeline model's JSON schema, `dg scaffold defs
nightly_assets.catalog.component.NightlyPipeline <name>` writes a minimal pipeline to fill in, and
`dg list components` shows the type (pyproject.toml: [tool.dg.project] registry_modules).

The code location (definitions.py) reads every defs.yaml through the catalog loader, which checks
the pipelines against runners.yaml and each other and adds the cross-pipeline sensors; this class
builds the same definitions for one pipeline when Dagster's own loader (dg.load_from_defs_folder)
reads the folder, its attributes validated by the same loader, with the same messages.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict

from nightly_assets.catalog.kinds import registered_kinds
from nightly_assets.catalog.loader import (
    DEFS_FILE,
    build_catalog,
    load_runners,
    pipeline_from_attributes,
)
from nightly_assets.catalog.models import Pipeline


class PipelineAttributes(BaseModel):
    """A NightlyPipeline's `attributes:`, the pipeline's document as it stands. Its JSON schema is
    the Pipeline model's (what `dg check yaml` and editors check the file against); the catalog
    loader validates the values, naming the file and the field as the catalog always has."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return params_by_kind(Pipeline.model_json_schema(*args, **kwargs))


def params_by_kind(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (the Pipeline's) with each stage's `kind` one of the registered kinds and its
    `params` typed by that kind's params model (JSON Schema if/then), so that `dg check yaml` and an
    editor reject a misspelt or mistyped param as the catalog loader does. Each kind's models go in
    `$defs` as `<kind>__<Model>`: two kinds may name a model alike."""
    defs = schema.setdefault("$defs", {})
    stage = defs["Stage"]
    kinds = registered_kinds()
    stage["properties"]["kind"] = {"enum": sorted(kinds), "title": "Kind", "type": "string"}
    rules = []
    for kind, rule in sorted(kinds.items()):
        params = rule.params.model_json_schema(ref_template=f"#/$defs/{kind}__{{model}}")
        for name, model in params.pop("$defs", {}).items():
            defs[f"{kind}__{name}"] = model
        defs[f"{kind}__params"] = params
        then = {"properties": {"params": {"$ref": f"#/$defs/{kind}__params"}}}
        rules.append({"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]}, "then": then})
    stage["allOf"] = rules
    return schema


TEMPLATE = """\
# A nightly pipeline: the attributes are the pipeline's document (docs/pipelines.md, docs/catalog.md).
# Check it with `dg check yaml <this folder>` and `dg check defs`; stage kinds: nightly_assets/stage_kinds/.
type: {type}
attributes:
  name: {name}  # the folder's name; asset keys, jobs and the schedule are named after it
  title: {title}
  seed: new
  description: >-
    What this pipeline builds and tests, night after night (shown on its assets).
  cron: "0 4 * * *"  # UTC; the schedule runs the night that just ended
  start_date: {start}
  notify_channel: "#nightly"
  repositories:
    - name: project
      url: https://github.com/example/project.git  # or sample:<name>, a repository made locally
      branch: main
  targets:  # one `target` partition each
    - name: cpu
      arch: amd64
  stages:
    - name: sources
      kind: sources
      description: The repository pinned to its commit at the end of the night.
    - name: tests_unit
      kind: test_suite
      deps: [sources]
      description: Unit tests of the pinned checkout.
      suite: {{markers: unit, timeout_minutes: 30, runner: local}}  # a runner of runners.yaml
    - name: night_summary
      kind: night_summary
      deps: [tests_unit]
      description: The night's table of stages, status, runner, duration and artefacts.
"""


class PipelineScaffolder(dg.Scaffolder):
    """`dg scaffold defs nightly_assets.catalog.component.NightlyPipeline <name>`: <name>/defs.yaml,
    a minimal pipeline that loads as it is (sources, one test suite, the night's summary)."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        folder = Path(request.target_path)
        folder.mkdir(parents=True, exist_ok=True)
        name = folder.name
        (folder / DEFS_FILE).write_text(
            TEMPLATE.format(
                type=request.type_name,
                name=name,
                title=name.replace("_", " ").capitalize(),
                start=dt.datetime.now(dt.UTC).date().isoformat(),
            )
        )


@dg.scaffold_with(PipelineScaffolder)
class NightlyPipeline(dg.Component):
    """One nightly pipeline of the catalog: its stage assets and checks, nightly and summary jobs,
    schedule, and PR tier; `attributes` are the pipeline's document (runners from runners.yaml)."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    @classmethod
    def get_spec(cls) -> dg.ComponentTypeSpec:
        return dg.ComponentTypeSpec(
            description=cls.__doc__, produces=["asset", "asset_check", "job", "schedule", "sensor"]
        )

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return PipelineAttributes

    @classmethod
    def load(cls, attributes: BaseModel | None, context: dg.ComponentLoadContext) -> NightlyPipeline:
        document = attributes.model_dump() if attributes is not None else None
        return cls(pipeline_from_attributes(context.path / DEFS_FILE, document, context.defs_module_path))

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from nightly_assets.pipelines import build_pipeline
        from nightly_assets.settings import nightly_env

        directory = context.defs_module_path  # the catalog folder, where runners.yaml lives
        catalog = build_catalog(directory, *load_runners(directory), {self.pipeline.name: self.pipeline})
        return build_pipeline(catalog, directory, self.pipeline, nightly_env()).definitions()

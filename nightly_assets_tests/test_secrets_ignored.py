"""The local secrets files the docs name (compose's `.env`, the Kubernetes Secret's env file, a GCP
key) are one `git add .` or one `docker-compose build` away: git ignores them, and no build context
of docker-compose.yml sends them (read with the docker SDK's own .dockerignore matcher)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from docker.utils.build import exclude_paths

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    REPO / "README.md",
    REPO / "docker-compose.yml",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "deploy").rglob("*")),
]
# A file name a doc tells the operator to put secrets in: an env file, or a key file.
SECRET_FILE = re.compile(r"(?<![\w.-])((?:[\w-]+)?\.env|[\w-]*key\.json)(?![\w.-])")
NOT_SECRET = ("example", "template")  # committed on purpose, values empty


def documented_secret_files() -> list[str]:
    names = set()
    for doc in DOCS:
        if doc.is_file() and doc.suffix in ("", ".md", ".yml", ".yaml", ".sh", ".dockerignore"):
            names |= set(SECRET_FILE.findall(doc.read_text(errors="replace")))
    return sorted(n for n in names if not any(word in n for word in NOT_SECRET))


SECRETS = documented_secret_files()


def test_the_docs_name_their_secrets_files():
    """The scan finds what deploy/README.md names, so the checks below cover them."""
    assert {".env", "nightly-secrets.env"} <= set(SECRETS), SECRETS


@pytest.mark.parametrize("name", SECRETS)
def test_git_ignores_each_documented_secrets_file(name):
    for where in (name, f"deploy/{name}"):  # next to docker-compose.yml, or beside the deploy files
        check = subprocess.run(["git", "check-ignore", "--no-index", "--quiet", where], cwd=REPO, check=False)
        assert check.returncode == 0, f"{where} is not ignored by git: add it to .gitignore"


def build_contexts() -> list[tuple[Path, str]]:
    """(context folder, Dockerfile relative to it) of every image docker-compose.yml builds."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    found = set()
    for service in compose["services"].values():
        build = service.get("build")
        if build is None:
            continue
        build = {"context": build} if isinstance(build, str) else build
        found.add((str(build.get("context", ".")), str(build.get("dockerfile", "Dockerfile"))))
    return [((REPO / context).resolve(), dockerfile) for context, dockerfile in sorted(found)]


def ignore_patterns(path: Path) -> list[str]:
    """The patterns of a .dockerignore, read as docker-py's build reads them."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def leaked_secrets(folder: str, tmp_path: Path) -> list[str]:
    """The documented secrets files, placed in `folder` of the repository, that some build context
    of docker-compose.yml would send, with why: each context is walked as docker-py walks it,
    with its .dockerignore (the legacy builder) and its `<Dockerfile>.dockerignore` (BuildKit)."""
    leaks = []
    for context, dockerfile in build_contexts():
        inside = [
            (REPO / folder / name).resolve().relative_to(context).as_posix()
            for name in SECRETS
            if (REPO / folder / name).resolve().is_relative_to(context)
        ]
        if not inside:
            continue  # none of them can be in this context
        ignore_files = (context / ".dockerignore", context / f"{dockerfile}.dockerignore")
        applied = [f for f in ignore_files if f.is_file()]
        if not applied:
            leaks.append(f"{context.relative_to(REPO)} ({dockerfile}) has no .dockerignore: sends {inside}")
            continue
        mirror = tmp_path / context.relative_to(REPO) / dockerfile  # the secrets as files, nothing else
        for relative in inside:
            (mirror / relative).parent.mkdir(parents=True, exist_ok=True)
            (mirror / relative).write_text("SECRET=1\n")
        for ignore in applied:
            sent = set(exclude_paths(str(mirror), ignore_patterns(ignore), dockerfile=dockerfile))
            if set(inside) & sent:
                leaks.append(f"{ignore.relative_to(REPO)} lets {sorted(set(inside) & sent)} in")
    return leaks


def test_no_build_context_sends_a_documented_secrets_file(tmp_path):
    """Where the docs put them: next to docker-compose.yml (the repository root)."""
    assert SECRETS
    assert leaked_secrets(".", tmp_path) == []


def test_no_build_context_sends_a_secrets_file_put_beside_the_deploy_files(tmp_path):
    assert leaked_secrets("deploy", tmp_path) == []

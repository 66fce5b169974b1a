#!/usr/bin/env bash
# The docker-compose deployment's images, built with no network inside the build (`make deploy-images`):
#
#   1. fill    pip download of what the images install (nightly_assets[deploy], deploy/requirements.txt,
#              and the nights' own requirements/wheelhouse.txt) into WHEELHOUSE, through this machine's
#              pip configuration (PyPI or a local mirror). NIGHTLY_DEPLOY_OFFLINE=1 skips it: WHEELHOUSE
#              was carried over from a machine that ran it.
#   2. check   nightly_assets' wheel built, and every requirement resolved from WHEELHOUSE and the
#              repository's .wheelhouse alone (pip --isolated --no-index): what is missing is named here.
#   3. build   deploy/Dockerfile and deploy/Dockerfile.dagster, sent with a context of only the files they
#              copy, FROM the base image given; pip in them has no index (--no-index --find-links).
#
# Settings (environment; deploy/README.md):
#   NIGHTLY_DEPLOY_BASE_IMAGE     base of both images (python:3.11-slim); air-gapped: a local image with
#                                 python3 3.11 (and its venv module) and git
#   NIGHTLY_DEPLOY_APT_PACKAGES   Debian packages apt-get installs into the code image (git); "" when the
#                                 base image has them (apt needs a network)
#   NIGHTLY_DEPLOY_OFFLINE=1      skip step 1
#   NIGHTLY_DEPLOY_WHEELHOUSE     the images' wheelhouse (build/deploy-wheelhouse, where `docker-compose
#                                 build` looks for it)
#   PYTHON                        a Python 3.11 with pip (.venv/bin/python): the wheels pip picks suit it,
#                                 so it must be the images' Python version on their platform
#   DOCKER_HOST                   the engine the images are built on (the docker CLI's own setting)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
wheelhouse=${NIGHTLY_DEPLOY_WHEELHOUSE:-build/deploy-wheelhouse}
base_image=${NIGHTLY_DEPLOY_BASE_IMAGE:-python:3.11-slim}
apt_packages=${NIGHTLY_DEPLOY_APT_PACKAGES-git}
# Resolved apart: the nights' pins (e.g. an old packaging for a project's tests) need not suit Dagster.
night_requirements=(-r requirements/wheelhouse.txt)
mkdir -p "$wheelhouse"

if [ "${NIGHTLY_DEPLOY_OFFLINE:-0}" != 1 ]; then
  echo "== fill $wheelhouse (pip download; NIGHTLY_DEPLOY_OFFLINE=1 skips this)"
  "$python" -m pip download -q --dest "$wheelhouse" ".[deploy]" -r deploy/requirements.txt
  "$python" -m pip download -q --dest "$wheelhouse" "${night_requirements[@]}"
fi

echo "== check: every wheel from $wheelhouse and .wheelhouse alone"
offline=(--isolated --no-index --find-links "$wheelhouse")
if [ -d .wheelhouse ]; then
  offline+=(--find-links .wheelhouse)
fi
rm -f "$wheelhouse"/nightly_assets-*.whl
# SOURCE_DATE_EPOCH: the same sources give the same wheel, so an unchanged checkout reuses the
# engine's cached layers instead of installing everything again.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-315532800} \
  "$python" -m pip wheel -q "${offline[@]}" --no-deps --wheel-dir "$wheelhouse" .
wheel=$(ls "$wheelhouse"/nightly_assets-*.whl)
# --dest: what only .wheelhouse has is copied beside the rest, so the images see it too.
if ! { "$python" -m pip download -q "${offline[@]}" --dest "$wheelhouse" "${wheel}[deploy]" -r deploy/requirements.txt \
  && "$python" -m pip download -q "${offline[@]}" --dest "$wheelhouse" "${night_requirements[@]}"; }; then
  echo "$wheelhouse lacks the wheels named above: run this where pip reaches a package index" \
    "(without NIGHTLY_DEPLOY_OFFLINE=1), or carry $wheelhouse over from a machine that did" >&2
  exit 1
fi
echo "$(ls "$wheelhouse" | wc -l) wheels in $wheelhouse"

# Only what the Dockerfiles copy goes to the engine (no .dockerignore plays a part).
build() {
  local dockerfile=$1 tag=$2
  shift 2
  echo "== build $tag (deploy/$dockerfile FROM $base_image)"
  tar -c deploy/"$dockerfile" deploy/dagster.yaml deploy/workspace.yaml \
      -C "$(dirname "$wheelhouse")" "$(basename "$wheelhouse")" \
    | docker build -f deploy/"$dockerfile" --build-arg BASE_IMAGE="$base_image" \
      --build-arg WHEELHOUSE="$(basename "$wheelhouse")" "$@" -t "$tag" -
}
build Dockerfile nightly_assets_user_code --build-arg APT_PACKAGES="$apt_packages"
build Dockerfile.dagster nightly_assets_dagster

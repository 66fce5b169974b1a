#!/usr/bin/env bash
# nightly_assets on a GPU host, without the repository: the orchestrator in a venv of its own, the
# nights on the host's framework stack (its torch / JAX / CuPy build), demo_gpu (or $PIPELINE) run
# for each night.
#
#   deploy/gpu_host.sh WHEEL_DIR NIGHT [NIGHT ...]
#
# WHEEL_DIR holds nightly_assets' wheel and its dependencies (`pip download nightly_assets`, or
# `pip wheel .` then `pip download` of its requirements, on a machine with an index): an offline
# host installs from it alone. Settings (environment):
#   NIGHTLY_BASE_PYTHON  the framework stack's Python (default: the python3 on PATH that imports torch)
#   ORCH_PYTHON          the interpreter the orchestrator's venv is made from (default: the base
#                        interpreter of NIGHTLY_BASE_PYTHON: never the stack's venv itself, whose
#                        packages, e.g. protobuf, may not suit Dagster)
#   WORK                 where the venv, DAGSTER_HOME and NIGHTLY_HOME go (default ./nightly-gpu-host)
#   PIPELINE             the pipeline to run (default demo_gpu; another catalog: NIGHTLY_CATALOG_DIR)
#   PIP_NO_DEPS=1        install every wheel of WHEEL_DIR as it is, unresolved (a set trimmed of the
#                        optional clients: GCS, ECR, Kubernetes, the tf_theta plots)
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 WHEEL_DIR NIGHT [NIGHT ...]   (NIGHT as YYYY-MM-DD)" >&2
  exit 2
fi
wheel_dir=$(cd "$1" && pwd)
shift
work=${WORK:-$PWD/nightly-gpu-host}
mkdir -p "$work"

if [ -z "${NIGHTLY_BASE_PYTHON:-}" ]; then
  if python3 -c 'import torch' 2>/dev/null; then
    NIGHTLY_BASE_PYTHON=$(python3 -c 'import sys; print(sys.executable)')
  else
    echo "$0: set NIGHTLY_BASE_PYTHON to the Python of the host's framework stack (torch, JAX, CuPy)" >&2
    exit 2
  fi
fi
export NIGHTLY_BASE_PYTHON
orch_python=${ORCH_PYTHON:-$("$NIGHTLY_BASE_PYTHON" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')}

echo "== orchestrator venv: $work/venv from $orch_python ($("$orch_python" --version))"
if [ ! -x "$work/venv/bin/python" ]; then
  # --without-pip: distributions strip ensurepip; the stack's pip installs into it (`pip --python`).
  "$orch_python" -m venv --without-pip "$work/venv"
fi
# PIP_NO_DEPS=1: WHEEL_DIR is a trimmed set (the optional clients left out): install it as it is.
if [ -n "${PIP_NO_DEPS:-}" ]; then wanted=("$wheel_dir"/*.whl); else wanted=(nightly_assets); fi
"$NIGHTLY_BASE_PYTHON" -m pip --python "$work/venv/bin/python" install --quiet --no-index \
  --find-links "$wheel_dir" "${wanted[@]}"

export DAGSTER_HOME="$work/dagster_home" NIGHTLY_HOME="$work/nightly"
cd "$work"
"$work/venv/bin/python" -c 'import nightly_assets; print("   nightly_assets from", nightly_assets.__file__)'

echo "== nightly init"
"$work/venv/bin/nightly" init
echo "== GPUs: $(nvidia-smi -L 2>/dev/null || amd-smi list 2>/dev/null || echo none)"
echo "== framework stack: $NIGHTLY_BASE_PYTHON"
"$NIGHTLY_BASE_PYTHON" - <<'EOF'
import importlib.metadata as md
for name in ("torch", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "triton"):
    try:
        print(f"   {name} {md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
pipeline=${PIPELINE:-demo_gpu}
status=0
for night in "$@"; do
  echo "== nightly run $pipeline --night $night"
  "$work/venv/bin/nightly" run "$pipeline" --night "$night" || status=$?
done
"$work/venv/bin/nightly" status --pipeline "$pipeline"
exit $status

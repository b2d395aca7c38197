#!/usr/bin/env bash
# The one command that runs every test, on a fresh machine with only a Docker engine running:
# installs what is missing, lints, type-checks, builds the docs, builds the training images offline,
# and runs the unit and the Docker integration tests. Extra arguments go to pytest.
#
#   scripts/test.sh          everything (the images built first when they are not up to date)
#   scripts/test.sh --fast   ruff, mypy, the docs and the unit tests: no Docker engine, no image build
#   scripts/test.sh --fast -m "not slow"   the same without the few unit tests that take seconds each
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi

# The unit tests never use the SDK v3 venv; the fast lane does not install it.
[ "$fast" = 1 ] && export SETUP_SDK3=0
source scripts/setup.sh

# Python caches each module's bytecode, and pytest each test module's rewritten asserts, in
# __pycache__; without that (PYTHONDONTWRITEBYTECODE set in the shell) every pytest process compiles
# the package and the test files again, about ten seconds of each worker's time.
unset PYTHONDONTWRITEBYTECODE

# Two workers (pytest-xdist) on this project's two-core machines; PYTEST_WORKERS changes it.
workers="${PYTEST_WORKERS:-2}"
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider)

echo "== ruff"
.venv/bin/ruff check emulator tests benchmarks examples
echo "== mypy"
.venv/bin/mypy emulator
# The docs pages: --strict fails on a link to a missing page or anchor (mkdocs.yml, validation). The
# site goes to a throwaway folder: built to be checked, never kept in the repository.
echo "== mkdocs"
.venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"

if [ "$fast" = 1 ]; then
  echo "== pytest (unit)"
  "${pytest[@]}" -n "$workers" tests/unit "$@"
  exit 0
fi

echo "== building the default training image (offline; skipped when up to date)"
.venv/bin/hetero-emu image build
# The framework images the tests run (tests/integration/test_framework_images.py, the SDK tests'
# estimators, torch_distributed, the debugger under torchrun): PyTorch 1.x and TensorFlow 2.x on
# Python 3.9, PyTorch 2.x on 3.11. The first build of each fetches its wheels into pip's cache under
# ~/.cache/hetero-emu (kept between builds); jobs would build them on demand, this says when.
echo "== building the framework images (offline; skipped when up to date)"
.venv/bin/hetero-emu image build --framework pytorch:1.11.0 --python py38
.venv/bin/hetero-emu image build --framework pytorch:2.1.0 --python py310
.venv/bin/hetero-emu image build --framework tensorflow:2.9.2 --python py39

# The node image of the real swarm that tests/swarm/ makes out of docker-in-docker containers.
echo "== building the swarm node image (offline; skipped when up to date)"
.venv/bin/hetero-emu image build --variant swarm-node

# Everything that may share the engine runs on the workers; what may not (pyproject.toml, marker
# serial: the fault and swarm suites, the memlock probe, the ECR tag) runs after it in one process.
# The second pass selecting nothing (pytest's exit 5, e.g. with -k) is no failure.
echo "== pytest (on $workers workers)"
"${pytest[@]}" -n "$workers" tests -m "not serial" "$@"
echo "== pytest (the serial tests, one at a time)"
"${pytest[@]}" tests -m serial "$@" || [ $? = 5 ]

#!/usr/bin/env bash
# The one command that runs every test, on a fresh machine with only a Docker engine running:
# installs what is missing, lints, type-checks, builds the docs, builds the training images offline,
# and runs the unit and the Docker integration tests. Extra arguments go to pytest.
#
#   scripts/test.sh          everything (the images built first when they are not up to date)
#   scripts/test.sh --fast   ruff, mypy, the docs and the unit tests: no Docker engine, no image build
#   scripts/test.sh --fast -m "not slow"   the same without the few unit tests that take seconds each
#   scripts/test.sh --tests-only   the two pytest passes alone, the images already built (soak.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
tests_only=0
case "${1:-}" in
  --fast) fast=1; shift ;;
  --tests-only) tests_only=1; shift ;;
esac

# The unit tests never use the SDK v3 venv; the fast lane does not install it.
[ "$fast" = 1 ] && export SETUP_SDK3=0
source scripts/setup.sh

# Python caches each module's bytecode, and pytest each test module's rewritten asserts, in
# __pycache__; without that (PYTHONDONTWRITEBYTECODE set in the shell) every pytest process compiles
# the package and the test files again, about ten seconds of each worker's time.
unset PYTHONDONTWRITEBYTECODE

# Two workers (pytest-xdist) for CPU-bound tests on this project's two-core machines, four for the
# Docker tests, which on two workers leave the CPUs half idle (containers starting, the MPI toolkit's
# fixed sleeps); PYTEST_WORKERS and DOCKER_WORKERS change them. JUNIT_DIR, when set, gets a JUnit
# report of each pass (scripts/soak.sh reads them).
workers="${PYTEST_WORKERS:-2}"
docker_workers="${DOCKER_WORKERS:-4}"
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider)

if [ "$tests_only" = 0 ]; then
  echo "== ruff"
  .venv/bin/ruff check emulator tests benchmarks examples scripts
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
  # The Hugging Face image of tests/integration/test_huggingface_in_containers.py: transformers 4.36.0
  # on the PyTorch 2.1.0 image above, one pip layer over it.
  .venv/bin/hetero-emu image build --framework huggingface-pytorch:4.36.0:2.1.0 --python py310

  # The node image of the real swarm that tests/swarm/ makes out of docker-in-docker containers.
  echo "== building the swarm node image (offline; skipped when up to date)"
  .venv/bin/hetero-emu image build --variant swarm-node
fi

# The tests, in two passes of pytest-xdist; `--dist loadgroup` runs the tests of one group
# (tests/conftest.py) on one worker, one after another:
# 1. what must not share the engine with other Docker tests (marker serial: the fault suite, the
#    memlock probes, the ECR tag, kept jobs and killed drivers), in order on one worker, while the
#    other workers run the unit tests, which never touch the engine;
# 2. every other Docker test, the swarm suite (one cluster, on one worker) among them, on more
#    workers than cores (docs/benchmarks.md, the test suite).
# The second pass runs even when the first failed, so one run shows every failure. A pass selecting
# nothing (pytest's exit 5, e.g. with -k) is no failure.
failed=0
run_pass() {
  local name="$1" workers="$2" marks="$3"
  shift 3
  echo "== pytest: $name (on $workers workers)"
  "${pytest[@]}" -n "$workers" --dist loadgroup tests -m "$marks" \
    ${JUNIT_DIR:+--junitxml="$JUNIT_DIR/$name.xml"} "$@" || [ $? = 5 ] || failed=1
}
run_pass serial-and-unit "$workers" "serial or not docker" "$@"
run_pass docker "$docker_workers" "docker and not serial" "$@"
exit "$failed"

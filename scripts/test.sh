#!/usr/bin/env bash
# The one command that runs every test, on a fresh machine with only a Docker engine running:
# installs what is missing, lints, type-checks, builds the docs, builds the training images offline, and
# runs the unit and the Docker integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== ruff"
.venv/bin/ruff check emulator tests benchmarks examples
echo "== mypy"
.venv/bin/mypy emulator
# The docs pages: --strict fails on a link to a missing page or anchor (mkdocs.yml, validation). The
# site goes to a throwaway folder: built to be checked, never kept in the repository.
echo "== mkdocs"
.venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"

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

echo "== pytest"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"

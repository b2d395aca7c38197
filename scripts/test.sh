#!/usr/bin/env bash
# The one command that runs every test, on a fresh machine with only a Docker engine running:
# installs what is missing, lints, type-checks, builds the training images offline, and
# runs the unit and the Docker integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== ruff"
.venv/bin/ruff check emulator tests benchmarks examples
echo "== mypy"
.venv/bin/mypy emulator

echo "== building the default training image (offline; skipped when up to date)"
.venv/bin/hetero-emu image build
# The PyTorch variant, for tests/integration/test_torch_distributed.py and the SDK tests' PyTorch
# estimators; its first build fetches ~2.7 GB of wheels (kept in the build cache).
echo "== building the PyTorch variant (offline; skipped when up to date)"
.venv/bin/hetero-emu image build --variant pytorch

# The node image of the real swarm that tests/swarm/ makes out of docker-in-docker containers.
echo "== building the swarm node image (offline; skipped when up to date)"
.venv/bin/hetero-emu image build --variant swarm-node

echo "== pytest"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"

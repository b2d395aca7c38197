#!/usr/bin/env bash
# The one command that runs the demo on a fresh machine with only a Docker engine running:
# installs what is missing, builds the default training image offline (once), and runs the
# data-offload example (`hetero-emu demo`). Extra arguments go to `hetero-emu demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-demo.sh
exec .venv/bin/hetero-emu demo "$@"

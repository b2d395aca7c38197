#!/usr/bin/env bash
# Sourced by test.sh: install what the tests need on a fresh machine with only a Docker engine
# running: what the demo needs (setup-demo.sh: mmdebstrap, a .venv with hetero-emu), and besides
# docker-compose, graphviz, the AWS CLI and chromium, hetero-emu's dev tools in .venv and a second
# venv with SDK v3. Safe to run again: it skips what is there.

SETUP_EXTRA=dev source scripts/setup-demo.sh

need_apt=()
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
# Graphviz's dot draws render's cluster.svg (emulator/reports/diagram.py); the tests require it in CI.
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
# `hetero-emu serve` is tested with Debian's AWS CLI v2 and, for the live page, its chromium driven by
# Selenium through chromium-driver (tests/integration/test_serve_*.py).
[ -x /usr/bin/aws ] || need_apt+=(awscli)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
[ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"  # setup-demo.sh's

# SDK v3 (ModelTrainer) cannot share a venv with v2: tests/integration/test_sdk_v3.py runs its scripts
# with .venv-sdk3/bin/python. Its install (about a gigabyte of packages) is redone only when
# pyproject.toml or the pin changed; hetero-emu itself is installed editable, so code changes need none.
# The unit tests never use it: the fast lane (test.sh --fast) sets SETUP_SDK3=0 and skips it.
SDK3_PIN='sagemaker==3.27.0'
sdk3_stamp="$(cat pyproject.toml; echo "$SDK3_PIN")"
sdk3_stamp="$(printf '%s' "$sdk3_stamp" | sha256sum | cut -d' ' -f1)"
if [ "${SETUP_SDK3:-1}" = 0 ]; then
  echo "== .venv-sdk3 not needed (SETUP_SDK3=0)"
elif [ -x .venv-sdk3/bin/python ] && [ "$(cat .venv-sdk3/.hetero-emu-stamp 2>/dev/null)" = "$sdk3_stamp" ]; then
  echo "== .venv-sdk3 is up to date"
else
  echo "== installing hetero-emu and SageMaker SDK v3 ($SDK3_PIN) into .venv-sdk3"
  [ -x .venv-sdk3/bin/python ] || "$PYTHON" -m venv .venv-sdk3
  .venv-sdk3/bin/python -m pip install -q --upgrade pip
  PYTHONWARNINGS=ignore::UserWarning .venv-sdk3/bin/python -m pip install -q -e '.[sagemaker3]' "$SDK3_PIN"
  echo "$sdk3_stamp" > .venv-sdk3/.hetero-emu-stamp
fi

#!/usr/bin/env bash
# Sourced by test.sh and demo.sh: install what a fresh machine with only a Docker engine lacks:
# Debian's mmdebstrap (the offline image build), docker-compose and graphviz, and a .venv with hetero-emu
# and its dev tools. Safe to run again: it skips what is there.
# The image build needs no MPI package on the host: Open MPI comes from Debian into the image's rootfs
# and mpi4py is a binary wheel that works with it (images/README.md, MPI).

need_apt=()
command -v mmdebstrap >/dev/null 2>&1 || command -v debootstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
# Graphviz's dot draws render's cluster.svg (emulator/reports/diagram.py); the tests require it in CI.
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
# `hetero-emu serve` is tested with Debian's AWS CLI v2 and, for the live page, its chromium driven by
# Selenium through chromium-driver (tests/integration/test_serve_*.py).
[ -x /usr/bin/aws ] || need_apt+=(awscli)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]} (apt)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PYTHON" -m venv .venv
fi
# hetero-emu is installed editable, so code changes need no reinstall: only a changed pyproject.toml
# does (the stamp), which keeps a second run of the fast test lane from spending its time in pip.
venv_stamp="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat .venv/.hetero-emu-stamp 2>/dev/null)" = "$venv_stamp" ] && .venv/bin/python -c 'import emulator' 2>/dev/null; then
  echo "== .venv is up to date"
else
  echo "== installing hetero-emu and its dev tools into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools tells every editable install of a package-dir layout (images/ ships as emulator.images)
  # that folders named like the package may shadow it: an InformationOnly note (a UserWarning), not a
  # problem of this project, so it is not shown.
  PYTHONWARNINGS=ignore::UserWarning .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$venv_stamp" > .venv/.hetero-emu-stamp
fi


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

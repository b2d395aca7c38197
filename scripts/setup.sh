#!/usr/bin/env bash
# Sourced by test.sh and demo.sh: install what a fresh machine with only a Docker engine lacks:
# Debian's mmdebstrap (the offline image build) and docker-compose, and a .venv with hetero-emu
# and its dev tools. Safe to run again: it skips what is there.

need_apt=()
command -v mmdebstrap >/dev/null 2>&1 || command -v debootstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
command -v docker-compose >/dev/null 2>&1 || need_apt+=(docker-compose)
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
echo "== installing hetero-emu and its dev tools into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'


#!/usr/bin/env bash
# Sourced by demo.sh (and by setup.sh, for the tests): install what the demo needs on a fresh machine
# with only a Docker engine: what the offline image build needs (Debian's mmdebstrap; gcc and the
# Python headers where they are missing) and a .venv with hetero-emu itself, nothing else. What only the tests need (their Debian packages, the dev tools, the SDK v3
# venv) is setup.sh's. Safe to run again: it skips what is there.
# The image build needs no MPI package on the host: Open MPI comes from Debian into the image's rootfs
# and mpi4py is a binary wheel that works with it (images/README.md, MPI).

apt_updated=0
apt_install() {  # setup.sh installs the tests' packages with it too: the package lists read once
  echo "== installing $* (apt)"
  local sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  [ "$apt_updated" = 1 ] || $sudo_cmd apt-get update -q
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "$@"
}

PYTHON="${PYTHON:-python3}"
need_apt=()
command -v mmdebstrap >/dev/null 2>&1 || command -v debootstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
# The image build compiles sagemaker-training's small C extension on the host (images/README.md,
# What a fresh machine needs), and Debian's python3 makes no venv without python3-venv; pyenv and
# python.org builds have both headers and venv.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
"$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.isfile(sysconfig.get_paths()["include"] + "/Python.h"))' \
  || need_apt+=(python3-dev)
"$PYTHON" -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
[ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PYTHON" -m venv .venv
fi
# hetero-emu is installed editable, so code changes need no reinstall: only a changed pyproject.toml
# does. setup.sh sets SETUP_EXTRA=dev before sourcing this, so that the tests' venv gets hetero-emu
# and its dev tools in one pip install. A stamp per install says which pyproject.toml it was made
# from: .hetero-emu-stamp with the dev tools (enough for the demo too), .hetero-emu-demo-stamp without.
venv_stamp="$(sha256sum pyproject.toml | cut -d' ' -f1)"
venv_current() {  # the stamp file $1 names this pyproject.toml and hetero-emu imports
  [ "$(cat "$1" 2>/dev/null)" = "$venv_stamp" ] && .venv/bin/python -c 'import emulator' 2>/dev/null
}
if [ "${SETUP_EXTRA:-}" = dev ]; then
  stamp=.venv/.hetero-emu-stamp target='.[dev]' what="hetero-emu and its dev tools"
else
  stamp=.venv/.hetero-emu-demo-stamp target=. what="hetero-emu"
fi
if venv_current .venv/.hetero-emu-stamp || venv_current "$stamp"; then
  echo "== .venv is up to date"
else
  echo "== installing $what into .venv"
  # The tests' venv gets the newest pip, as it always had; the demo's does with the one it came with
  # (any pip since 21.3 installs a pyproject.toml project editable), a few seconds sooner.
  [ "${SETUP_EXTRA:-}" != dev ] || .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # setuptools tells every editable install of a package-dir layout (images/ ships as emulator.images)
  # that folders named like the package may shadow it: an InformationOnly note (a UserWarning), not a
  # problem of this project, so it is not shown. pip's version check is a request for nothing.
  PYTHONWARNINGS=ignore::UserWarning .venv/bin/python -m pip install -q --disable-pip-version-check -e "$target"
  echo "$venv_stamp" > "$stamp"
fi

#!/bin/bash
# Installs one framework image (images/README.md, Framework images) into a container of its Debian
# rootfs; emulator/backend/framework_build.py runs it with the package index reachable and commits the
# container as the image. Nothing here is baked in from the host: the host's CA bundle, pip's cache and
# the Horovod wheel cache are bind mounts, which a commit leaves out.
#
#   /opt/hetero-emu-build/requirements.txt   the pinned packages of the venv (frameworks.requirements)
#   /opt/hetero-emu-build/images/            the recipes (sshd.conf and ssh.conf of images/training)
#   /opt/hetero-emu-build/wheels/            Horovod's wheel, built once per (Horovod, TensorFlow, Python)
#   HETERO_EMU_HOROVOD                        Horovod's version, or empty
set -euo pipefail
build=/opt/hetero-emu-build
python="python${HETERO_EMU_PYTHON:?}"

echo "== venv: /opt/venv on $($python --version)"
$python -m venv /opt/venv
export PATH=/opt/venv/bin:$PATH
# bullseye's ensurepip brings pip 20.3; a pip that reads pyproject builds and --report is needed, and
# a setuptools that still ships pkg_resources, which older packages import (grpcio-tools' protoc at
# run time, source packages when they build); the pins keep it (frameworks.json: setuptools).
pip install --progress-bar off --upgrade "pip==24.3.1" "setuptools==75.3.0" "wheel==0.45.1"

echo "== packages: $(grep -c . "$HETERO_EMU_REQUIREMENTS") pinned requirements"
# --prefer-binary: a wheel of an older release beats compiling a newer one's sources.
pip install --progress-bar off --prefer-binary -r "${HETERO_EMU_REQUIREMENTS:?}"

if [ -n "${HETERO_EMU_HOROVOD:-}" ]; then
  # Horovod publishes only sources and must be compiled against this very TensorFlow and Open MPI
  # (https://horovod.readthedocs.io/en/stable/install_include.html): once per key, then reused.
  wheels=$build/wheels
  if ! ls $wheels/horovod-*.whl >/dev/null 2>&1; then
    echo "== horovod $HETERO_EMU_HOROVOD: compiling against $(python -c 'import tensorflow as tf; print("tensorflow", tf.__version__)') and Open MPI"
    mkdir -p $wheels/.part
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 \
      HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
      pip wheel --progress-bar off --no-deps --no-build-isolation --no-cache-dir -w $wheels/.part \
        "horovod==$HETERO_EMU_HOROVOD"
    mv $wheels/.part/horovod-*.whl $wheels/ && rmdir $wheels/.part
  fi
  pip install --progress-bar off $wheels/horovod-*.whl
  python -c 'import horovod.tensorflow as hvd; assert hvd.mpi_built(), "horovod was built without MPI"'
fi

echo "== sshd and ssh as in the default image, PAM as in AWS's images"
install -m 0644 $build/images/training/sshd.conf /etc/ssh/sshd_config.d/hetero-emu.conf
install -m 0644 $build/images/training/ssh.conf /etc/ssh/ssh_config.d/hetero-emu.conf
if [ ! -d /etc/ssh/sshd_config.d ] || ! grep -q '^Include /etc/ssh/sshd_config.d' /etc/ssh/sshd_config; then
  # bullseye's sshd_config has no Include line: the settings go first, where sshd takes them.
  { cat /etc/ssh/sshd_config.d/hetero-emu.conf; cat /etc/ssh/sshd_config; } > /tmp/sshd_config
  mv /tmp/sshd_config /etc/ssh/sshd_config
fi
if ! grep -q '^Include /etc/ssh/ssh_config.d' /etc/ssh/ssh_config; then
  { cat /etc/ssh/ssh_config.d/hetero-emu.conf; cat /etc/ssh/ssh_config; } > /tmp/ssh_config
  mv /tmp/ssh_config /etc/ssh/ssh_config
fi
sed -i 's/^session\s*required\s*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd
grep -q '^session\s*optional\s*pam_loginuid.so' /etc/pam.d/sshd
rm -f /etc/ssh/ssh_host_*
mkdir -p /opt/ml/code /opt/ml/input/config /opt/ml/input/data /opt/ml/model /opt/ml/output/data \
  /opt/ml/checkpoints /run/sshd

echo "== trimming what a training job never imports"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
find "$site" -mindepth 2 -type d -name tests -prune -exec rm -rf {} +
rm -rf "$site"/nvidia/*/include
# PyPI's torch is the CUDA build. What a job without a GPU never opens goes (measured with
# /proc/self/maps: `import torch`, a gloo all_reduce, a backward pass and conv2d load none of them):
# cuDNN's kernel libraries (libcudnn.so itself, which libtorch_cuda links, stays and loads them only on
# a GPU) and Triton's bundled CUDA compilers.
find "$site"/nvidia/cudnn/lib -name 'libcudnn_*.so*' -delete 2>/dev/null || true
rm -rf "$site"/triton/third_party/cuda/bin "$site"/triton/backends/nvidia/bin
# (pip's cache at /root/.cache/pip is the host's, mounted: it is never touched here.)
rm -rf /tmp/* 2>/dev/null || true

mkdir -p /opt/hetero-emu
pip freeze --all > /opt/hetero-emu/packages.txt
echo "== $(wc -l < /opt/hetero-emu/packages.txt) packages in /opt/venv; du: $(du -sh /opt/venv | cut -f1)"

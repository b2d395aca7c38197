#!/bin/bash
# Stage 1 of a framework image (images/README.md, Framework images): the venv. Run by
# emulator/backend/framework_build.py in a container of the Debian rootfs with the package index
# reachable; the container is committed as the stage image, which a rebuild reuses while the rootfs,
# this file and the pins are unchanged (stage 2, configure.sh, is redone on its own). Nothing from
# the host is baked in: the CA bundle, pip's cache and the Horovod wheel cache are bind mounts, which
# a commit leaves out.
#
#   HETERO_EMU_REQUIREMENTS                   the pinned packages of the venv (frameworks.requirements)
#   HETERO_EMU_PYTHON                         the Python the venv runs: 3.9, 3.11 or 3.13
#   HETERO_EMU_HOROVOD                        Horovod's version, or empty
#   /opt/hetero-emu-build/wheels/             Horovod's wheel, built once per (Horovod, TensorFlow, Python)
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
echo "== $(pip list 2>/dev/null | tail -n +3 | wc -l) packages in /opt/venv; du: $(du -sh /opt/venv | cut -f1)"

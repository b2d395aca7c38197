#!/bin/bash
# Stage 2 of a framework image (images/README.md, Framework images): what AWS's training image of this
# framework version installs for scripts beyond the framework and its toolkit (scipy, pandas, opencv,
# seaborn, the SageMaker SDK, tf-models-official...; emulator/data/frameworks.json `aws_packages`, made by
# scripts/aws_image_packages.py). Run by emulator/backend/framework_build.py in a container of the venv
# stage (venv.sh) with the package index reachable; committed as a stage image of its own, so that a
# change here or to these pins redoes this stage only, not the venv's gigabytes.
#
#   HETERO_EMU_AWS_PACKAGES    the pinned packages (one a line)
#   HETERO_EMU_REQUIREMENTS    the venv's pins (framework, toolkits, numpy, protobuf): kept as they are
set -euo pipefail
export PATH=/opt/venv/bin:$PATH
echo "== AWS's image packages: $(grep -c . "${HETERO_EMU_AWS_PACKAGES:?}") pinned requirements"
# The venv's pins are constraints: nothing here may move the framework, numpy or protobuf. The build
# constraint keeps pkg_resources for an old source package's setup.py (setuptools 81 dropped it).
echo "setuptools<81" > /tmp/build-constraints.txt
PIP_BUILD_CONSTRAINT=/tmp/build-constraints.txt \
  pip install --progress-bar off --prefer-binary -c "${HETERO_EMU_REQUIREMENTS:?}" -r "$HETERO_EMU_AWS_PACKAGES"
pip check || echo "== pip check reports the conflicts above (AWS's own images report some as well)"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
find "$site" -mindepth 2 -type d -name tests -prune -exec rm -rf {} +
rm -rf /tmp/* 2>/dev/null || true
echo "== $(pip list 2>/dev/null | tail -n +3 | wc -l) packages in /opt/venv; du: $(du -sh /opt/venv | cut -f1)"

#!/bin/bash
# The Hugging Face layer of a framework image (images/README.md, Hugging Face images), as AWS's
# Hugging Face training images are their framework image plus one `pip install` of transformers,
# datasets, accelerate... (aws/deep-learning-containers, huggingface/pytorch/training/docker/*/Dockerfile.gpu).
# Run by emulator/backend/huggingface_build.py in a container of the framework image with the package
# index reachable; the container is committed as the Hugging Face image.
#
#   HETERO_EMU_REQUIREMENTS   the framework image's pins and the layer's (emulator/data/huggingface.json):
#                             pip keeps the framework's and adds the layer's, as the table's resolver did
#   HETERO_EMU_AWS_PACKAGES   the framework image's pins of AWS's image packages (may be empty)
set -euo pipefail
export PATH=/opt/venv/bin:$PATH
echo "== Hugging Face packages: $(grep -c . "${HETERO_EMU_REQUIREMENTS:?}") pinned requirements on $(python --version)"
# What AWS's framework image installs for scripts (HETERO_EMU_AWS_PACKAGES, when the framework image
# has such a stage) is resolved with the rest, so that the layer keeps those pins too; where both pin a
# package (accelerate, which AWS's PyTorch 2.x images install as well), the layer's pin wins, as in AWS's
# Hugging Face image, which installs its own.
aws=()
if [ -s "${HETERO_EMU_AWS_PACKAGES:-}" ]; then
  python - "$HETERO_EMU_REQUIREMENTS" "$HETERO_EMU_AWS_PACKAGES" /tmp/aws-packages-kept.txt <<'PY'
import re, sys
def name(line):
    return re.sub(r"[-_.]+", "-", re.split(r"[\[=<>!~; ]", line.strip(), maxsplit=1)[0]).lower()
layer = {name(line) for line in open(sys.argv[1]) if line.strip()}
kept = [line for line in open(sys.argv[2]) if line.strip() and name(line) not in layer]
open(sys.argv[3], "w").write("".join(kept))
PY
  aws=(-r /tmp/aws-packages-kept.txt)
fi
pip install --progress-bar off --prefer-binary -r "$HETERO_EMU_REQUIREMENTS" "${aws[@]}"
# accelerate only where the layer pins it (AWS's images from transformers 4.28 on; older ones lack it).
python - "$HETERO_EMU_REQUIREMENTS" <<'PY'
import importlib, sys
pinned = {line.split("==")[0].split("[")[0].strip().lower() for line in open(sys.argv[1]) if line.strip()}
names = ["transformers", "datasets"] + [n for n in ("accelerate",) if n in pinned]
print("==", ", ".join(f"{n} {importlib.import_module(n).__version__}" for n in names))
PY

echo "== trimming what a training job never imports"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
find "$site" -mindepth 2 -type d -name tests -prune -exec rm -rf {} +
# (pip's cache at /root/.cache/pip is the host's, mounted: it is never touched here.)
rm -rf /tmp/* 2>/dev/null || true
/opt/venv/bin/pip freeze --all > /opt/hetero-emu/packages.txt
echo "== $(wc -l < /opt/hetero-emu/packages.txt) packages listed in /opt/hetero-emu/packages.txt; du: $(du -sh /opt/venv | cut -f1)"

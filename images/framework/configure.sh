#!/bin/bash
# Stage 2 of a framework image (images/README.md, Framework images): sshd, ssh and PAM as the
# default image and AWS's images have them, the /opt/ml folders, and the list of what the venv holds.
# Run in a container of the stage-1 image (venv.sh); the container is committed as the framework image.
#
#   /opt/hetero-emu-build/images/            the recipes (sshd.conf and ssh.conf of images/training)
set -euo pipefail
build=/opt/hetero-emu-build
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

mkdir -p /opt/hetero-emu
/opt/venv/bin/pip freeze --all > /opt/hetero-emu/packages.txt
echo "== $(wc -l < /opt/hetero-emu/packages.txt) packages listed in /opt/hetero-emu/packages.txt"

#!/bin/sh
# Starts the node's Docker engine (images/README.md: "swarm-node/"). Extra arguments go to dockerd.
set -eu

# Docker mounts /sys and, on a cgroup v1 host, the tmpfs at /sys/fs/cgroup and each hierarchy
# under it read-only unless the container is --privileged, which fails on this host (its bounding
# set lacks CAP_SYS_RESOURCE). With CAP_SYS_ADMIN and a private cgroup namespace they can be
# remounted read-write, which dockerd and runc need to make the cgroups of the node's containers.
# A cgroup hierarchy is the container's bind mount of a superblock the host shares: only the
# mount's own flag can change (remount,bind); a plain remount of it fails with EBUSY.
mount -o remount,rw /sys
mounts=$(cat /proc/self/mounts)
echo "$mounts" | while read -r _ target _ _; do
    case "$target" in
        /sys/fs/cgroup | /sys/fs/cgroup/*) mount -o remount,bind,rw "$target" ;;
    esac
done

# tcp://0.0.0.0:2375 without TLS: the harness publishes it on 127.0.0.1 of the host only. --tls=false
# says so explicitly; without it dockerd 20.10 sleeps 15 s at start to show its warning about a
# TCP socket without TLS (moby daemon/listeners, "Startup is intentionally being slowed down").
# overlay2: /var/lib/docker is a bind mount of a host folder, on which overlayfs can stack.
exec dockerd \
    --host unix:///var/run/docker.sock \
    --host tcp://0.0.0.0:2375 \
    --tls=false \
    --storage-driver overlay2 \
    "$@"

"""A job's SSH keys for MPI: what the hosts of an MPI distribution find in /root/.ssh.

The toolkit's MPI runner has the first host of the distribution group start the script on every host
of it with `mpirun`, which reaches them over SSH as root; the other hosts run `sshd` and wait
(sagemaker_training/mpi.py). On the service the image and the platform set that up; here the key pair
is made per job by the emulator, never baked into an image and never reused by another job, and the
folder is mounted read-only at /root/.ssh on those hosts only (`emulator.planning.plan.mpi_groups`).

The folder holds exactly:

- `id_ed25519` (0600) and `id_ed25519.pub`: the user key every host logs in with;
- `authorized_keys`: that public key, so every host lets every other in as root;
- `config`: no host-key prompt and no known_hosts file (the hosts are new every job);
- `ssh_host_ed25519_key` (0600) and `ssh_host_ed25519_key.pub`: the host key the image's sshd is
  started with (the same on every host of the job, which is why no host key is ever checked).

Keys are made in Python (`cryptography`), in OpenSSH's format without a passphrase, not by running
ssh-keygen: the driver's machine need not have OpenSSH. They are secrets: nothing prints them; the
plan names only the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

USER_KEY = "id_ed25519"
HOST_KEY = "ssh_host_ed25519_key"
AUTHORIZED_KEYS = "authorized_keys"
CONFIG = "config"
# ssh_config(5): new hosts every job, all sharing one host key: nothing to check, nothing to remember.
CLIENT_CONFIG = "Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    LogLevel ERROR\n"
FILES = (USER_KEY, f"{USER_KEY}.pub", AUTHORIZED_KEYS, CONFIG, HOST_KEY, f"{HOST_KEY}.pub")
PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644


def _key_pair(comment: str) -> tuple[bytes, bytes]:
    """A new ed25519 key: (OpenSSH private key without passphrase, `ssh-ed25519 AAAA... comment` line)."""
    # Imported here: only an MPI job makes keys, and every `run` would pay the import (~15 ms).
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public + f" {comment}\n".encode()


def write_keys(folder: Path, job_name: str, client_config: bool = True) -> None:
    """Make `folder` (which must not exist; 0700, as ~/.ssh) with a new user key and host key for the job.

    Each private file is created 0600 (O_EXCL), so it is never readable by others, not even for a moment.
    Without `client_config` there is no `config`: the ssh client refuses to start at all when
    ~/.ssh/config belongs to a user other than root or itself ("Bad owner or permissions", OpenSSH
    readconf.c), which is what a file written by a driver that is not root is, seen from the
    container's root; the default image's /etc/ssh/ssh_config.d holds the same settings."""
    folder.mkdir(mode=0o700)
    user_private, user_public = _key_pair(f"hetero-emu-{job_name}")
    host_private, host_public = _key_pair(f"hetero-emu-{job_name}-host")
    contents = {
        USER_KEY: (user_private, PRIVATE_MODE),
        f"{USER_KEY}.pub": (user_public, PUBLIC_MODE),
        AUTHORIZED_KEYS: (user_public, PUBLIC_MODE),
        CONFIG: (CLIENT_CONFIG.encode(), PUBLIC_MODE),
        HOST_KEY: (host_private, PRIVATE_MODE),
        f"{HOST_KEY}.pub": (host_public, PUBLIC_MODE),
    }
    if not client_config:
        del contents[CONFIG]
    for name, (data, mode) in contents.items():
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(folder / name, mode)  # the umask may have taken bits off the public files' mode

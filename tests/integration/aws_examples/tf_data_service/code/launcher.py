"""Every host runs this: the data group serves a tf.data.service, the dnn group trains with Horovod.

The shape of AWS's heterogeneous TensorFlow tf.data.service example (its code is not copied): the
first data host runs the dispatcher, every data host a worker, each dnn host one more worker (once per
host, not per MPI rank); every MPI rank trains; world rank 0 on the first dnn host stops every host's
data service through port 16000 when training is done.
"""

import os
import socket
import subprocess
import sys
import time

from sagemaker_training import environment

SHUTDOWN_PORT = 16000


def run(script: str, extra: list[str]) -> int:
    return subprocess.run([sys.executable, script, *sys.argv[1:], *extra]).returncode


def shut_down(hosts: list[str]) -> None:
    if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
        return
    for host in hosts:
        for _attempt in range(12):
            try:
                with socket.create_connection((host, SHUTDOWN_PORT), timeout=10):
                    print(f"sent the shutdown to {host}:{SHUTDOWN_PORT}", flush=True)
                    break
            except OSError:
                time.sleep(5)
        else:
            raise SystemExit(f"could not reach {host}:{SHUTDOWN_PORT}")


def main() -> int:
    env = environment.Environment()
    groups = env.instance_groups_dict
    dispatcher = groups["data_group"]["hosts"][0]
    extra = ["--dispatcher_host", dispatcher]
    if env.current_instance_group == "data_group":
        return run("train_data.py", extra)
    if os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0") == "0":
        subprocess.Popen([sys.executable, "train_data.py", *sys.argv[1:], *extra])  # one more worker per host
    code = run("train_dnn.py", extra)
    if env.current_host == groups["dnn_group"]["hosts"][0]:
        shut_down(groups["data_group"]["hosts"] + groups["dnn_group"]["hosts"])
    return code


if __name__ == "__main__":
    sys.exit(main())

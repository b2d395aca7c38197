"""Every host runs this: the data group serves MNIST batches over gRPC, the dnn group trains on them.

The shape of AWS's heterogeneous PyTorch gRPC example (its code is not copied): roles from the
toolkit's Environment(), the proto compiled with grpcio-tools, the data server stopped by a TCP
connection to port 16000 once the first trainer is done (it then kills itself: -9 counts as success).
"""

import socket
import subprocess
import sys
import time

from sagemaker_training import environment

SHUTDOWN_PORT = 16000


def child(script: str, extra: list[str]) -> int:
    code = subprocess.run([sys.executable, script, *sys.argv[1:], *extra]).returncode
    return 0 if code in (-9, -15) else code


def shut_down(host: str) -> None:
    for _attempt in range(12):
        try:
            with socket.create_connection((host, SHUTDOWN_PORT), timeout=10):
                print(f"sent the shutdown to {host}:{SHUTDOWN_PORT}", flush=True)
                return
        except OSError:
            time.sleep(5)
    raise SystemExit(f"could not reach {host}:{SHUTDOWN_PORT}")


def main() -> int:
    env = environment.Environment()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--grpc_python_out=.",
                    "batches.proto"], check=True)
    groups = env.instance_groups_dict
    dispatcher = groups["data_group"]["hosts"][0]
    if env.current_instance_group == "data_group":
        return child("train_data.py", ["--dispatcher_host", dispatcher])
    code = child("train_dnn.py", ["--dispatcher_host", dispatcher])
    if env.current_host == groups["dnn_group"]["hosts"][0]:
        shut_down(dispatcher)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""A tf.data.service dispatcher (on the first data host) and workers, until the shutdown signal."""

import argparse
import os
import socket

import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dispatcher_host", type=str)
    parser.add_argument("--current_host", type=str, default=os.environ["SM_CURRENT_HOST"])
    parser.add_argument("--num_of_data_workers", type=int, default=1)
    args, _ = parser.parse_known_args()
    servers = []
    if args.current_host == args.dispatcher_host:
        servers.append(tf.data.experimental.service.DispatchServer(
            tf.data.experimental.service.DispatcherConfig(port=6000)))
        print("dispatcher on port 6000", flush=True)
    for i in range(args.num_of_data_workers):
        port = 6001 + i
        servers.append(tf.data.experimental.service.WorkerServer(tf.data.experimental.service.WorkerConfig(
            port=port, dispatcher_address=f"{args.dispatcher_host}:6000",
            worker_address=f"{args.current_host}:{port}")))
        print(f"worker on port {port}", flush=True)
    with socket.create_server(("", 16000)) as listener:
        listener.accept()[0].close()
    print("shutdown received", flush=True)
    for server in servers:
        server._stop()
        server.join()


if __name__ == "__main__":
    main()

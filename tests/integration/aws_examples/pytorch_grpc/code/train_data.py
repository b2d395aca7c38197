"""The data group: batches of MNIST made by a DataLoader in a producer process, streamed over gRPC."""

import argparse
import multiprocessing as mp
import os
import queue
import socket
from concurrent import futures

import batches_pb2
import batches_pb2_grpc
import grpc
import torch
from torchvision import datasets, transforms


class MyMNIST(datasets.MNIST):
    """As many samples as the trainers will ask for; torchvision finds the files in ./data/MyMNIST/raw."""

    def __init__(self, batch_size: int, iterations: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.length = batch_size * iterations

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return super().__getitem__(index % len(self.data))


def fill(q: "mp.Queue", args: argparse.Namespace) -> None:
    data = MyMNIST(args.batch_size, args.iterations, root="./data", train=True, download=True,
                   transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,)),
                                                 transforms.GaussianBlur(11)]))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, num_workers=args.num_data_workers)
    for images, labels in loader:
        q.put((images.numpy().tobytes(), labels.type(torch.int8).numpy().tobytes()))
    print("Finished filling queue", flush=True)


class Feed(batches_pb2_grpc.BatchFeedServicer):
    def __init__(self, q: "mp.Queue") -> None:
        self.q = q

    def stream_batches(self, request, context):
        while True:
            try:
                images, labels = self.q.get(timeout=1)
            except queue.Empty:
                continue
            yield batches_pb2.Batch(images=images, labels=labels)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--num-data-workers", type=int, default=1)
    parser.add_argument("--grpc-workers", type=int, default=1)
    args, _ = parser.parse_known_args()
    q: mp.Queue = mp.Queue(maxsize=32)
    producer = mp.Process(target=fill, args=(q, args))  # not a daemon: its DataLoader has workers
    producer.start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.grpc_workers))
    batches_pb2_grpc.add_BatchFeedServicer_to_server(Feed(q), server)
    server.add_insecure_port("[::]:6000")
    server.start()
    print("serving batches on port 6000", flush=True)
    with socket.create_server(("", 16000)) as listener:
        listener.accept()[0].close()
    print("shutdown received", flush=True)
    server.stop(2).wait()
    producer.terminate()
    os.system(f"kill -9 {os.getpid()}")


if __name__ == "__main__":
    main()

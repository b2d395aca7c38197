"""The dnn group: trains a small CNN on the batches the data group streams, saves the model."""

import argparse
import json
import os

import batches_pb2
import batches_pb2_grpc
import grpc
import numpy as np
import torch
import torch.nn.functional as F
from sagemaker_training import environment  # noqa: F401  (as the example imports it)
from torch import nn


class RemoteBatches(torch.utils.data.IterableDataset):
    def __init__(self, host: str, batch_size: int, iterations: int) -> None:
        self.host, self.batch_size, self.iterations = host, batch_size, iterations

    def __len__(self) -> int:
        return self.batch_size * self.iterations

    def __iter__(self):
        channel = grpc.insecure_channel(f"{self.host}:6000",
                                        options=[("grpc.max_receive_message_length", 200 * 1024 * 1024)])
        grpc.channel_ready_future(channel).result(timeout=300)
        for batch in batches_pb2_grpc.BatchFeedStub(channel).stream_batches(batches_pb2.Empty()):
            images = torch.tensor(np.frombuffer(batch.images, dtype=np.float32).reshape(self.batch_size, 1, 28, 28))
            labels = torch.tensor(np.frombuffer(batch.labels, dtype=np.int8).reshape(self.batch_size)).long()
            yield images, labels


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, 1), nn.Conv2d(8, 16, 3, 1)
        self.fc1, self.fc2 = nn.Linear(2304, 32), nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return F.log_softmax(self.fc2(F.relu(self.fc1(torch.flatten(x, 1)))), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--num-data-workers", type=int, default=1)
    parser.add_argument("--num-dnn-workers", type=int, default=1)
    parser.add_argument("--grpc-workers", type=int, default=1)
    parser.add_argument("--pin-memory", type=bool, default=False)
    parser.add_argument("--region", type=str)
    parser.add_argument("--dispatcher_host", type=str)
    parser.add_argument("--hosts", type=list, default=json.loads(os.environ["SM_HOSTS"]))
    parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
    parser.add_argument("--train", type=str, default=os.environ["SM_CHANNEL_TRAINING"])
    parser.add_argument("--num-gpus", type=int, default=int(os.environ["SM_NUM_GPUS"]))
    args = parser.parse_args()
    device = torch.device("cuda" if args.num_gpus > 0 else "cpu")
    data = RemoteBatches(args.dispatcher_host, args.batch_size, args.iterations)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=args.num_dnn_workers,
                                         pin_memory=args.pin_memory)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for step, (images, labels) in enumerate(loader, start=1):
        optimizer.zero_grad()
        loss = F.nll_loss(model(images.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        print(f"step {step}/{args.iterations} on {device}: loss {loss.item():.4f}", flush=True)
        if step == args.iterations:
            break
    torch.save(model.cpu().state_dict(), os.path.join(args.model_dir, "model.pth"))
    print("TRAINED " + json.dumps({"steps": step, "device": str(device)}), flush=True)


if __name__ == "__main__":
    main()

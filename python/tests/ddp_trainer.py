"""One rank of the two-process DDP test (test_torch_ddp.py): trains a linear model on a job
read from a real coordinator through sluice.torch, and prints one JSON line with the element
ids it saw, its step count and the mean loss per epoch."""

import json
import sys

import numpy as np
import torch
import torch.distributed as dist

import sluice
import sluice.torch


def main(coordinator, init_method, rank, world_size, epochs):
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    n = 64
    ids = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5, 3.0], np.float32))[:, None]
    ds = sluice.data.Dataset.from_tensor_slices({"id": ids, "x": x, "y": y}).batch(8)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, losses, steps = [], [], 0
    for epoch in range(epochs):
        data = sluice.torch.IterableDataset(ds, coordinator=coordinator,
                                            job="ddp-epoch-%d" % epoch, sharding_policy="ranges")
        total, count = 0.0, 0
        for batch in torch.utils.data.DataLoader(data, batch_size=None, num_workers=0):
            assert isinstance(batch["x"], torch.Tensor)
            seen += batch["id"].tolist()
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            loss.backward()
            opt.step()
            total += loss.item()
            count += 1
            steps += 1
        losses.append(total / count)
    print(json.dumps({"rank": rank, "ids": seen, "steps": steps, "losses": losses}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))

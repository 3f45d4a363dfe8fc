"""One rank of the two-process DDP test (test_torch_ddp.py): trains a linear model on a job
read from a real coordinator through sluice.torch, normalizing every batch in place (the
README's training loop), and prints one JSON line with the element ids it saw, its step count,
the mean loss per epoch, how many batches arrived with values other than the dataset's rows for
their ids, and how many batches changed after the next one was fetched."""

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
    mean, std = torch.from_numpy(x.mean(axis=0)), torch.from_numpy(x.std(axis=0))
    seen, losses, steps, bad_arrivals, changed_later = [], [], 0, 0, 0
    for epoch in range(epochs):
        data = sluice.torch.IterableDataset(ds, coordinator=coordinator,
                                            job="ddp-epoch-%d" % epoch, sharding_policy="ranges")
        total, count = 0.0, 0
        previous = None  # the previous batch's tensor and a copy of its values
        for batch in torch.utils.data.DataLoader(data, batch_size=None, num_workers=0):
            assert isinstance(batch["x"], torch.Tensor)
            ids = batch["id"].tolist()
            seen += ids
            # The batch is what the pipeline produced (a copy taken on arrival) ...
            if not np.array_equal(batch["x"].numpy(), x[ids]):
                bad_arrivals += 1
            # ... and normalizing it in place changed no batch that came before it.
            if previous is not None and not torch.equal(previous[0], previous[1]):
                changed_later += 1
            batch["x"].sub_(mean).div_(std)
            previous = (batch["x"], batch["x"].clone())
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            loss.backward()
            opt.step()
            total += loss.item()
            count += 1
            steps += 1
        losses.append(total / count)
    print(json.dumps({"rank": rank, "ids": seen, "steps": steps, "losses": losses,
                      "bad_arrivals": bad_arrivals, "changed_later": changed_later}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))

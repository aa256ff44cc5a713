"""A small DDP training job, shaped like a SageMaker PyTorch script, runnable on CPU (gloo).

``remote-debug demo`` runs it as a local SageMaker-shaped job with two ranks and stops every rank at
the line marked ``REMOTE-DEBUG-BREAKPOINT``.  Nothing in here knows about the debugger: the hook
attaches to it from outside, which is the point.
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    torch.manual_seed(1234)

    model: nn.Module = nn.Linear(4, 1)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # Each rank sees its own shard of the data: the targets depend on the rank.
    inputs = torch.randn(16, 4) + rank
    targets = inputs.sum(dim=1, keepdim=True) * (rank + 1)

    steps = int(os.environ.get("SM_HP_STEPS", "3"))
    loss_value = 0.0
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.item())
        shard_marker = rank * 100 + step  # REMOTE-DEBUG-BREAKPOINT
        print(f"rank {rank}/{world_size} step {step} loss {loss_value:.4f} marker {shard_marker}", flush=True)

    if rank == 0:
        model_dir = os.environ.get("SM_MODEL_DIR", ".")
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "metrics.json"), "w") as fh:
            json.dump({"final_loss": loss_value, "world_size": world_size}, fh)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

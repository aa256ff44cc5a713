"""An ordinary PyTorch training script (single process or torchrun DDP): nothing debug-related in it.

The launchers next to this file make the job debuggable from outside (``remote_debug.enable``);
this script is shipped unchanged.  Set a breakpoint on the marked line after ``remote-debug attach``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu")
    model: nn.Module = nn.Linear(4, 1).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(64, 4, device=device) + rank
    targets = inputs.sum(dim=1, keepdim=True)
    for step in range(int(os.environ.get("SM_HP_STEPS", "100"))):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)  # a good breakpoint
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

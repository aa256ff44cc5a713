"""A stranger's training script for the SageMaker training toolkit: its work is in a module of a subfolder.

Run by the image's own ``train`` (the toolkit) from ``/opt/ml/code``, under torchrun (``torch_distributed``) or
under mpirun (``python -m mpi4py train.py``).  Nothing debug-related in here.
"""

import os
import socket

from helpers.step import one_step


def main() -> None:
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size, barrier = comm.Get_rank(), comm.Get_size(), comm.Barrier
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
    total = 0
    for step in range(2):
        total = one_step(rank, step, total)
    print(f"rank {rank} of {size} on {socket.gethostname()}: total {total}", flush=True)
    barrier()


if __name__ == "__main__":
    main()

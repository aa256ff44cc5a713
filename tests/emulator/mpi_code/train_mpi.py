"""An MPI training script, as the training toolkit runs it under ``mpirun`` (``python -m mpi4py train_mpi.py``).

Each rank learns who it is from MPI (``OMPI_COMM_WORLD_*``): there is no ``RANK``/``LOCAL_RANK``.  The
locals at the marked line are what the end-to-end test reads at each rank's breakpoint: its MPI rank,
the node it runs on, the ``SM_CURRENT_HOST`` it inherited (``mpirun -x`` hands every rank the
master's), the torchrun variables it has (none) and an allreduce over every node.  Nothing
debug-related is in here.
"""

from __future__ import annotations

import os
import socket

from mpi4py import MPI


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    size = comm.Get_size()
    node = socket.gethostname()
    sm_current_host = os.environ.get("SM_CURRENT_HOST", "")
    torchrun_vars = sorted(name for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE") if name in os.environ)
    total = comm.allreduce(rank)  # crosses the nodes over MPI's own TCP transport
    print(f"rank {rank} of {size} on {node}: SM_CURRENT_HOST={sm_current_host} torchrun vars {torchrun_vars}")
    for step in range(2):
        print(f"rank {rank}/{size} on {node} step {step} total {total}", flush=True)  # a good breakpoint
    comm.Barrier()


if __name__ == "__main__":
    main()

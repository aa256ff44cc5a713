"""The tiny torch.distributed (gloo, CPU) training script the end-to-end tests debug, and where it breaks."""

from __future__ import annotations

import textwrap
from pathlib import Path

DDP_SCRIPT = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.tensor([float(rank + 1)])
    dist.all_reduce(tensor)
    secret = 1000 + 7 * rank  # BREAK-HERE
    total = float(tensor.item()) + secret
    print("rank", rank, "total", total, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def break_line(path: Path) -> int:
    """The line marked BREAK-HERE (1-based)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "BREAK-HERE" in line)


def marked_project(root: Path, template: str) -> tuple[Path, Path]:
    """``root/project`` with ``train.py`` = ``template`` formatted with ``marks=`` the path of ``root/marks``,
    the dir where the script leaves marks for the test and the test for the script; both returned."""
    project, marks = root / "project", root / "marks"
    project.mkdir()
    marks.mkdir()
    (project / "train.py").write_text(template.format(marks=str(marks)))
    return project, marks


def make_project(root: Path) -> Path:
    src = root / "project"
    src.mkdir()
    (src / "train.py").write_text(DDP_SCRIPT)
    return src

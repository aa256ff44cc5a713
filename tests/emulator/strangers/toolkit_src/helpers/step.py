"""One step of the stranger's training: where the breakpoint goes (a module in a subfolder of the source dir)."""


def one_step(rank: int, step: int, total: int) -> int:
    total += rank + step  # a good breakpoint
    return total

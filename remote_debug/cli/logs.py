"""``remote-debug logs JOB``: what the ranks print, from the start of the run, each line with its rank."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import err_console
from remote_debug.contract import spec
from remote_debug.laptop.core.errors import EXIT_INTERRUPTED
from remote_debug.laptop.core.jobinfo import JobInfo
from remote_debug.laptop.diagnose.rank_output import RankLine, RankOutput
from remote_debug.laptop.platforms import backend_for, job_ref


def _say(line: str) -> None:
    err_console.print(f"remote-debug: {line}", markup=False, highlight=False)


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="Job name (or SageMaker training-job ARN).")],
    ranks: Annotated[str, typer.Option("--ranks", help="all, or e.g. 0,2: only the lines of these ranks.")] = "all",
    follow: Annotated[
        bool, flag("--follow", "-f", help="Then print new lines as they come, until the job ends (Ctrl-C stops).")
    ] = False,
    tail_lines: Annotated[
        int | None, typer.Option("--tail", min=0, metavar="N", help="Only the last N lines so far (then --follow).")
    ] = None,
    hook_lines: Annotated[
        bool, flag("--hook-lines", help="Also remote-debug's own lines (\\[remote-debug] ...) of the hook and ranks.")
    ] = False,
    as_json: Annotated[
        bool, flag("--json", help='One JSON object per line: {"node", "rank" (null: unknown), "line", "time"}.')
    ] = False,
) -> None:
    """What the ranks print, from the start of the run: \\[rank 3] for a line a rank tagged (ours, torchrun's
    --tee, mpirun's --tag-output), \\[algo-1] for one only its node is known of.

    Local jobs: the nodes' log files. SageMaker: CloudWatch Logs (/aws/sagemaker/TrainingJobs)."""
    selection = spec.parse_ranks(ranks)
    ref = job_ref(job)
    output = RankOutput(backend_for(ref), ref.name, ranks=selection, hook_lines=hook_lines)

    def show(batch: list[RankLine]) -> None:
        write = sys.stdout.write
        for line in batch:
            write((json.dumps(line.to_json()) if as_json else line.text()) + "\n")
        sys.stdout.flush()

    def ended(info: JobInfo) -> None:
        if follow:
            _say(f"job {info.name} ended ({info.status}): printing its last lines, then stopping")

    try:
        if tail_lines is not None:
            show(output.last(tail_lines))
        if not follow:
            if tail_lines is None:
                for batch in output.until_now():
                    show(batch)
            return
        _say(f"following the output of job {ref.name} until it ends ({output.output.where()}; Ctrl-C stops)")
        for batch in output.follow(ended):
            show(batch)
    except KeyboardInterrupt:
        sys.stdout.flush()
        raise typer.Exit(EXIT_INTERRUPTED) from None

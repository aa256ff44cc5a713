"""``remote-debug doctor [JOB] [--json]``: check AWS access, tools, IAM permissions and a job."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from remote_debug.cli.application import app, flag
from remote_debug.cli.output import console, print_json
from remote_debug.laptop.diagnose.doctor import FAIL, Doctor, passed
from remote_debug.laptop.platforms import job_ref
from remote_debug.laptop.wire.documents import DoctorCheck, DoctorReport

STYLES = {"ok": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


@app.command()
def doctor(
    job: Annotated[str | None, typer.Argument(help="Also check this SageMaker job (name or ARN).")] = None,
    as_json: Annotated[bool, flag("--json", help="Print JSON.")] = False,
    check_aws: Annotated[bool, flag("--aws", help="Also check AWS (default: when AWS is configured).")] = False,
) -> None:
    """Check credentials, region, session-manager-plugin, OpenSSH, IAM permissions (and a job)."""
    ref = job_ref(job) if job else None
    checks = Doctor(region=ref.region if ref else None, check_aws=check_aws or None).run(ref.name if ref else None)
    ok = passed(checks)
    if as_json:
        print_json(DoctorReport(ok=ok, checks=[DoctorCheck(**c.to_json()) for c in checks]).to_json())
        raise typer.Exit(0 if ok else 1)
    width = max(len(c.name) for c in checks)
    for c in checks:
        style = STYLES.get(c.status, "")
        console.print(f"[{style}]{c.status.upper():4}[/]  {escape(c.name.ljust(width))}  {escape(c.detail)}")
        if c.fix and c.status != "ok":
            console.print(f"      {' ' * width}  fix: {escape(c.fix)}")
        actions = c.data.get("actions") if c.status != "ok" else None
        if actions:  # the table of what IAM allows, missing ones first
            iam = Table("action", "decision", "needed for", title=f"IAM: {escape(str(c.data.get('principal')))}")
            for row in sorted(actions, key=lambda r: (r["decision"] == "allowed", not r["required"], r["action"])):
                mark = "green" if row["decision"] == "allowed" else ("bold red" if row["required"] else "yellow")
                iam.add_row(row["action"], f"[{mark}]{row['decision']}[/]", row["needed_for"])
            console.print(iam)
    failed = [c.name for c in checks if c.status == FAIL]
    console.print("all checks passed" if ok else f"failed: {', '.join(failed)}", markup=False)
    raise typer.Exit(0 if ok else 1)

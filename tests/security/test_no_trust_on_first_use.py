"""Nothing we ship turns host-key checking off: no ``StrictHostKeyChecking no`` / ``accept-new``, no
known_hosts thrown away to /dev/null, no paramiko policy that accepts unknown keys - in the package,
the VS Code extension, templates, docs and scripts (tests are excluded: they hold hostile user
configs on purpose).  The live-session test checks the files attach actually writes."""

from __future__ import annotations

import re
import subprocess

from tests.helpers.hook_runs import REPO

FORBIDDEN = re.compile(
    r"StrictHostKeyChecking[\s=\"',:]+(no|off|false|accept-new)\b"
    r"|UserKnownHostsFile[\s=\"',:]+/dev/null"
    r"|AutoAddPolicy|WarningPolicy|set_missing_host_key_policy",
    re.IGNORECASE,
)
BINARY_SUFFIXES = (".png", ".jpg", ".gif", ".vsix", ".whl", ".gz", ".zip", ".ico", ".woff", ".woff2")


def _shipped_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()
    return [
        p
        for p in listed
        if not p.startswith(("tests/", "vscode-extension/test/"))
        and not p.endswith(BINARY_SUFFIXES)
        and (REPO / p).is_file()
    ]


def test_nothing_we_ship_disables_host_key_checking() -> None:
    for sample in (
        "ssh -o StrictHostKeyChecking=no",
        "    StrictHostKeyChecking accept-new",
        "['-o', 'UserKnownHostsFile=/dev/null']",
        "client.set_missing_host_key_policy(AutoAddPolicy())",
    ):
        assert FORBIDDEN.search(sample), sample
    files = _shipped_files()
    assert len(files) > 50 and "remote_debug/laptop/connection/ssh_config.py" in files
    found = []
    for name in files:
        text = (REPO / name).read_text(errors="replace")
        found += [f"{name}: {m.group(0)}" for m in FORBIDDEN.finditer(text)]
    assert found == []
    # the rule itself is live: what we write says "yes"
    assert "StrictHostKeyChecking yes" in (REPO / "remote_debug/laptop/connection/ssh_config.py").read_text()
    print(f"\n[security] host-key policy: {len(files)} shipped files scanned, {len(found)} offenders")

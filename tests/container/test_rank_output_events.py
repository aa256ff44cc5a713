"""A rank's prints in its debugger (DAP ``output`` events, asked for with ``redirectOutput``): sent live while that
debugger is attached, and no longer once it is gone - pydevd alone would tee every later print of the rank into a
message (50-100x slower prints) and hand it to every later debugger, asked or not."""

from __future__ import annotations

from remote_debug.contract import spec
from remote_debug.laptop.ide.dap_client import attach_and_configure
from tests.helpers.hook_runs import PYTHON, HookRun, wait_for

# Beats until stopped; each beat says what the rank's stdout is (pydevd's tee is an IORedirector)
PRINTING_RANK = (
    "import pathlib, sys, time\n"
    "marks = pathlib.Path(sys.argv[1])\n"
    "beats = 0\n"
    "while not (marks / 'stop').exists():\n"
    "    beats += 1\n"
    "    print(f'beat {beats}', flush=True)\n"
    "    (marks / 'stdout-type').write_text(f'{type(sys.stdout).__name__} {beats}')\n"
    "    time.sleep(0.05)\n"
)


def _said(run: HookRun) -> tuple[str, int]:
    """The rank's last beat: (its stdout's type, the beat's number)."""
    try:
        kind, _, beats = (run.marks / "stdout-type").read_text().partition(" ")
    except OSError:
        return "", 0
    return kind, int(beats) if beats.isdigit() else 0


def _stdout_type(run: HookRun) -> str:
    return _said(run)[0]


def test_a_rank_prints_into_the_debugger_that_asked_and_stops_when_it_goes(run: HookRun) -> None:
    script = run.root / "train.py"
    script.write_text(PRINTING_RANK)
    run.env[spec.ENV_LISTEN] = "eager"
    run.start(PYTHON, str(script), str(run.marks))
    port = wait_for(lambda: (d := run.rank_if_any(0)) is not None and d["port"] and d["port"], 30, "the listener")
    wait_for(lambda: _stdout_type(run), 30, "the first beat")
    untouched = _stdout_type(run)
    assert untouched != "IORedirector"

    asked = attach_and_configure("127.0.0.1", int(port), timeout=30, extra={"redirectOutput": True})
    try:
        wait_for(lambda: "beat " in asked.output(), 30, "the rank's prints in its debugger")
        assert _stdout_type(run) == "IORedirector"
    finally:
        asked.disconnect()
    # gone: the rank prints as before it was attached
    wait_for(lambda: _stdout_type(run) == untouched, 30, "the rank's own stdout back")

    silent = attach_and_configure("127.0.0.1", int(port), timeout=30)
    try:
        seen = _said(run)[1]
        wait_for(lambda: _said(run)[1] > seen + 10, 30, "more beats")
        assert "beat " not in silent.output()  # it did not ask: it gets none
    finally:
        silent.disconnect()
        (run.marks / "stop").touch()

"""Printing for humans (rich) and machines (``--json``): one place, so every command behaves alike."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape

from remote_debug.laptop.wire import event_text
from remote_debug.laptop.wire import events as ev
from remote_debug.laptop.wire.events import plural

console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def error_line(message: str) -> None:
    # One line, always: multi-line messages would break the "one actionable line" promise.
    first = " ".join(str(message).split()) or "failed"
    print(f"remote-debug: error: {first}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def progress(what: str, *, enabled: bool = True, every: float = 10.0, out: Console | None = None) -> Iterator[None]:
    """Show that ``what`` (e.g. "stopping job X") is still going while the block runs, on stderr.

    On a terminal: a spinner with the seconds so far.  Elsewhere (a log, CI, the extension's output
    channel) a spinner is invisible, so: a line at the start and one every ``every`` seconds.
    ``enabled=False`` (``--json``): nothing, the caller's JSON is the whole answer.
    """
    out = out or err_console
    if not enabled:
        yield
        return
    started = time.monotonic()
    done = threading.Event()

    def elapsed() -> str:
        return plural(round(time.monotonic() - started), "second")

    with contextlib.ExitStack() as stack:
        say: Callable[[], None]
        if out.is_terminal:
            status = stack.enter_context(out.status(f"{escape(what)}..."))
            period = 1.0

            def say() -> None:
                status.update(f"{escape(what)}... {elapsed()}")
        else:
            out.print(f"remote-debug: {what}...", markup=False, highlight=False)
            period = every

            def say() -> None:
                out.print(f"remote-debug: still {what} ({elapsed()} so far)", markup=False, highlight=False)

        def tick() -> None:
            while not done.wait(period):
                say()

        ticker = threading.Thread(target=tick, daemon=True, name="progress")
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()


# --- attach/demo events: the human line is the event's wording (laptop/wire/event_text.py) ---------------


def describe_event(event: ev.Event) -> str | None:
    """The human line the attach/demo/run stream prints for an event (None: not worth a line there)."""
    return None if type(event) in event_text.QUIET else event_text.event_text(event)


def wait_printer() -> ev.Emit:
    """For a command that prints no event stream (ssh, stacks, ssh-config, run, sync): the lines of a wait - the
    job's status while it starts, what it waits for and where - on stderr, so that nothing waits silently (and
    stdout stays the command's own, ``--json`` included)."""

    def emit(event: ev.Event) -> None:
        if isinstance(event, (ev.Waiting, ev.JobStatusEvent)):
            err_console.print(f"remote-debug: {describe_event(event)}", markup=False, highlight=False)

    return emit


def event_printer(as_json: bool) -> ev.Emit:
    """An emit for attach/demo: the event's JSON line on stdout (``--json``, with its human line as ``text``),
    else its human line on stderr."""

    def emit(event: ev.Event) -> None:
        if as_json:
            print_json(event_text.with_text(event))
            return
        line = describe_event(event)
        if line:
            err_console.print(f"[bold cyan]remote-debug[/]: {escape(line)}", markup=True, highlight=False)

    return emit

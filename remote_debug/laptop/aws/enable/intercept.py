"""Handing the SDK's final CreateTrainingJob request to the core, at the botocore level.

Why not configure everything on the SDK object: the debug spec and the client key are per job, and
the SDKs name the job only when they start it (v2 ``fit()`` appends a timestamp to the base name,
v3 ``ModelTrainer.train()`` too, and v3 has no way to pass a name).  So ``enable()`` marks the
estimator's environment with a one-off token and registers a ``before-parameter-build`` handler for
``sagemaker.CreateTrainingJob``: when a request carrying the token is about to be serialised, the
handler removes the token and rewrites the request in place with
:func:`remote_debug.laptop.aws.enable.request.enable_request` - which then knows the real job name.
Requests of other estimators sharing the session carry no token (or another) and are left alone.

Where to register: on the boto3 session (``session.events``: every client created from it later
inherits the handler) and on the clients the SDK already holds (SDK v2 keeps one on its Session;
``ModelTrainer`` gets one from sagemaker-core's per-session client cache).  Registration is keyed,
so registering twice on the same emitter is harmless.

If the handler never runs (a ``PipelineSession`` only writes a pipeline definition), the job keeps
the token variable and no spec: it runs undebugged, and nothing breaks.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MARKER_ENV = "REMOTE_DEBUG_ENABLE_TOKEN"
EVENT = "before-parameter-build.sagemaker.CreateTrainingJob"

Apply = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class PendingEnable:
    """One ``enable()`` of an SDK object, waiting for the requests it should rewrite."""

    apply: Apply  # request dict (token removed) -> debuggable request dict
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    jobs: list[str] = field(default_factory=list)  # jobs made debuggable so far, in order

    @property
    def unique_id(self) -> str:
        return f"remote-debug-enable-{self.token}"

    def handler(self, params: dict[str, Any], **_kwargs: Any) -> None:
        env = params.get("Environment")
        if not isinstance(env, dict) or env.get(MARKER_ENV) != self.token:
            return
        request = dict(params)
        request["Environment"] = {k: v for k, v in env.items() if k != MARKER_ENV}
        debuggable = self.apply(request)
        # botocore goes on with this very dict object: rewrite it in place.
        params.clear()
        params.update(debuggable)
        self.jobs.append(str(debuggable["TrainingJobName"]))

    def install(self, *, boto_session: Any = None, clients: Iterable[Any] = ()) -> None:
        if boto_session is not None:
            boto_session.events.register(EVENT, self.handler, unique_id=self.unique_id)
        for client in clients:
            client.meta.events.register(EVENT, self.handler, unique_id=self.unique_id)


def marked(environment: Any, pending: PendingEnable) -> dict[str, Any]:
    """``environment`` (an SDK's, possibly None) plus the token; an older token is replaced."""
    return {**dict(environment or {}), MARKER_ENV: pending.token}

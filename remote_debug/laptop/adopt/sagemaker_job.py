"""``remote-debug adopt JOB``: a SageMaker training job started without remote_debug becomes debuggable.

The job has no hook, no spec in its environment, no sshd: all it can be given is SageMaker's native remote
debug (an SSM shell as root in each container, :class:`~remote_debug.laptop.aws.ssm_shell.ShellSession`).  Through
that shell each node gets what a hooked node has, in a private dir of a random name
``/tmp/remote-debug-adopt-<job>.<node>.<random>`` (per node: the emulator's nodes share the machine's /tmp; on
SageMaker each container has its own anyway), made and checked by :mod:`remote_debug.container.node.adopt.node_dir`,
whose guard every later step passes through (another user of the container must not be able to point root
at files of theirs):

1. the container side of remote_debug + debugpy (the bundle ``enable()`` ships), as a tar.gz put there;
2. ``--adopt-node --probe`` (run with the bundle): the node's ranks, found from /proc, and every check
   ``adopt --pid`` makes; any node's refusal is the one line the user gets, before anything is started;
3. the job's key pair and secret here (as ``enable()`` makes them), and the job tag
   ``remote-debug:transport=ssm``, which is what makes the SageMaker backend treat a job without a spec in
   its environment as debuggable, for every later command of any laptop that has the key;
4. the node daemon (sshd + manifest, ``--node-daemon``) detached, its stdout the container's log, so its
   MAC'd manifest lines reach CloudWatch, where attach reads them; then ``--adopt-node REQUEST`` queues the
   rank agent into each rank (a pending call made by gdb, or by our own ptrace call where the image has no
   gdb, as AWS's PyTorch images have none; or ``sys.remote_exec``) and confirms it.

Before turning remote debugging on, a job nobody tagged gets the owner tag ``remote-debug:owner`` = the
caller's ``aws:userid`` (as ``enable()`` tags the jobs it launches): that is what ``templates/iam/user-policy.json``
lets a user tag an unowned job with, and what then lets them update, tag and stop it as their own.  A job
already tagged keeps its owner.

A failure after the bundle reached a node (a refusal, a failed probe, a denied AddTags) removes what this run
put there, through the same shell: nothing of ours is left in the containers of a job we did not adopt.

The job secret travels only inside files written 0600 through the shell's stdin (``put_file``), never in a
command line.  Afterwards ``attach``, ``stacks`` and ``ssh`` work on the job as on one started by enable().
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from remote_debug.container.node.adopt import node_dir
from remote_debug.container.node.adopt.on_node import AdoptedRank
from remote_debug.container.node_env import ENV_CODE_DIR
from remote_debug.contract import spec
from remote_debug.laptop.adopt.local_job import AdoptOutcome
from remote_debug.laptop.aws import clients as aws
from remote_debug.laptop.aws import ssm
from remote_debug.laptop.aws.enable.bundle import bundle_dir
from remote_debug.laptop.aws.enable.owner import claim_job
from remote_debug.laptop.aws.enable.update import UPDATABLE_STATES
from remote_debug.laptop.aws.sagemaker_backend import nodes_of
from remote_debug.laptop.aws.ssm_shell import ShellError, ShellSession
from remote_debug.laptop.core.errors import AwsError, UserError
from remote_debug.laptop.core.keys import ensure_job_key, job_secret
from remote_debug.laptop.core.paths import StatePaths

TAG_ADOPTED = aws.TAG_PREFIX + "adopted"
# What a node's shell may run the adopter with: PATH's first, then where images put theirs (AWS's DLCs: conda).
PYTHON_CANDIDATES = ("python3", "/opt/conda/bin/python3", "/usr/local/bin/python3", "/usr/bin/python3")
CONNECT_TIMEOUT = 600.0  # from enabling remote debug until each node's shell answers
ADOPT_TIMEOUT = 300.0  # one node's --adopt-node: an injection per rank (4 at a time) + the confirm window
POLL_SECONDS = 2.0

ShellFactory = Callable[[str], ShellSession]


@dataclass
class NodeAccess:
    """One node's shell and what the probe found there."""

    node: str
    shell: ShellSession
    root_prefix: str  # "" (the shell is root) or "sudo -n " when only sudo gives root
    python: str = ""
    dir: str = ""
    bundle: str = ""
    probe: dict[str, Any] = field(default_factory=dict)
    made: str = ""  # the outermost path this run created on the node (removed again if adopting fails)

    def sh(self, command: str) -> str:
        """``command`` as root: as it is, or through ``sudo -n sh -c``."""
        return f"{self.root_prefix}sh -c {shlex.quote(command)}" if self.root_prefix else command


def bundle_tarball(paths: StatePaths) -> tuple[str, bytes]:
    """(content fingerprint, tar.gz of ``remote_debug/`` + ``debugpy/``): what ``enable()`` ships, packed."""
    directory = bundle_dir(paths)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name in ("remote_debug", "debugpy"):
            tar.add(directory / name, name, filter=_root_owned)
    return directory.name, out.getvalue()


def _root_owned(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """Root on the node unpacks the bundle keeping the owners in the archive: not the laptop user's uid, which
    may be another user's there (who could then rewrite the code root and the ranks run)."""
    member.uid = member.gid = 0
    member.uname = member.gname = "root"
    return member


def adopt_sagemaker(
    job: str,
    *,
    sagemaker: Any,
    open_shell: ShellFactory,
    owner: str,
    paths: StatePaths | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    say: Callable[[str], None] = lambda _line: None,
) -> AdoptOutcome:
    """Adopt every rank of every node of the running SageMaker job ``job`` (a name).  ``open_shell(node)``
    returns a started ShellSession to that node; ``owner`` is the caller's ``aws:userid``, the owner tag an
    untagged job gets.  UserError (one line) when the job cannot be adopted."""
    paths = paths or StatePaths.default()
    description = _describe(sagemaker, job)
    _refuse_early(job, description)
    _claim(sagemaker, job, str(description["TrainingJobArn"]), owner, say)
    if not (description.get("RemoteDebugConfig") or {}).get("EnableRemoteDebug"):
        secondary = str(description.get("SecondaryStatus", ""))
        if secondary not in UPDATABLE_STATES:
            raise UserError(
                f"job {job} is {secondary}: SageMaker turns on remote debugging only while a job is "
                f"{' or '.join(UPDATABLE_STATES)}; try again then"
            )
        say(f"turning on SageMaker remote debugging for {job}")
        _call(
            lambda: sagemaker.update_training_job(TrainingJobName=job, RemoteDebugConfig={"EnableRemoteDebug": True}),
            f"enabling remote debugging on {job}",
        )
    description = _wait_training(sagemaker, job, connect_timeout)
    nodes = nodes_of(description.get("ResourceConfig") or {})
    fingerprint, tarball = bundle_tarball(paths)
    deadline = time.monotonic() + connect_timeout
    accesses: dict[str, NodeAccess] = {}
    try:
        with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
            opened = list(pool.map(lambda node: _connect(node, open_shell, deadline), nodes))
        accesses = {a.node: a for a in opened}
        say(f"probing {len(nodes)} node{'s' if len(nodes) != 1 else ''} and uploading the bundle")
        try:
            with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
                list(pool.map(lambda a: _prepare(a, job, fingerprint, tarball), accesses.values()))
            for access in accesses.values():  # every node checked before any is touched
                _refuse_node(access, job)
            key_path, public_key = ensure_job_key(paths, job)
            debug = spec.DebugSpec(
                job_name=job,
                client_public_key=public_key,
                job_secret=job_secret(key_path),
                transport=spec.Transport.SSM,
                options=spec.DebugOptions(),
            )
            _call(
                lambda: sagemaker.add_tags(
                    ResourceArn=description["TrainingJobArn"],
                    Tags=[
                        {"Key": aws.TAG_TRANSPORT, "Value": spec.Transport.SSM.value},
                        {"Key": TAG_ADOPTED, "Value": "true"},
                    ],
                ),
                f"tagging job {job}",
            )
        except BaseException:
            for access in accesses.values():  # nothing started yet: leave nothing behind in the containers
                _remove_ours(access)
            raise
        say("starting the node daemons and adopting the ranks")
        with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
            results = list(pool.map(lambda a: _adopt(a, debug), accesses.values()))
    finally:
        for access in accesses.values():
            access.shell.close()
    ranks = sorted((r for result in results for r in result[1]), key=lambda r: r.rank)
    outcome = AdoptOutcome(job=job, already=all(result[0] for result in results), nodes=nodes, ranks=ranks)
    if ranks and all(r.state == "failed" for r in ranks):
        raise UserError(f"no rank of job {job} could be adopted: {ranks[0].note}")
    return outcome


# --- the job -------------------------------------------------------------------------------------------


def _call(action: Callable[[], Any], what: str) -> Any:
    try:
        return action()
    except Exception as exc:
        if not aws.is_error(exc):
            raise
        raise AwsError(aws.describe_error(exc, what)) from None


def _claim(sagemaker: Any, job: str, arn: str, owner: str, say: Callable[[str], None]) -> None:
    """Tag a job nobody owns with ``owner`` (see the module doc); a job with an owner keeps it."""
    if _call(lambda: claim_job(sagemaker, arn, owner), f"tagging job {job} with its owner"):
        say(f"tagged {job} with {aws.TAG_OWNER}={owner}: nobody owned it")


def _describe(sagemaker: Any, job: str) -> dict[str, Any]:
    answer: dict[str, Any] = _call(
        lambda: sagemaker.describe_training_job(TrainingJobName=job), f"describing SageMaker job {job}"
    )
    return answer


def _refuse_early(job: str, description: dict[str, Any]) -> None:
    status = str(description.get("TrainingJobStatus", ""))
    if status != "InProgress":
        raise UserError(f"job {job} is {status}: only a running job can be adopted")
    if description.get("EnableNetworkIsolation"):
        raise UserError(
            f"job {job} runs with network isolation, which SageMaker's remote debugging (SSM) cannot "
            "reach: relaunch it without EnableNetworkIsolation to debug it"
        )
    if spec.ENV_VERSION in (description.get("Environment") or {}):
        raise UserError(f"job {job} was started with remote-debug already: remote-debug attach {job}")


def _wait_training(sagemaker: Any, job: str, timeout: float) -> dict[str, Any]:
    """Until the job is in Training with remote debugging on (what SSM needs to connect)."""
    deadline = time.monotonic() + timeout
    while True:
        description = _describe(sagemaker, job)
        _refuse_early(job, description)
        enabled = (description.get("RemoteDebugConfig") or {}).get("EnableRemoteDebug")
        if enabled and description.get("SecondaryStatus") == "Training":
            return description
        if time.monotonic() > deadline:
            raise UserError(
                f"job {job} did not reach Training with remote debugging on within {timeout:g} s "
                f"(it is {description.get('SecondaryStatus')})"
            )
        time.sleep(POLL_SECONDS)


# --- each node -----------------------------------------------------------------------------------------


def _connect(node: str, open_shell: ShellFactory, deadline: float) -> NodeAccess:
    """The node's shell, retried until ``deadline`` (SSM may say "not connected" for a while after enabling),
    as root: directly, or through passwordless sudo."""
    while True:
        try:
            shell = open_shell(node)
            break
        except ShellError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_SECONDS)
    try:
        if shell.check("id -u").strip() == "0":
            return NodeAccess(node, shell, "")
        if shell.run("sudo -n true")[0] == 0:
            return NodeAccess(node, shell, "sudo -n ")
        raise UserError(
            f"the SSM shell on {node} is not root and may not sudo: adopting needs root in the "
            "container (to trace the ranks and run sshd)"
        )
    except BaseException:
        shell.close()
        raise


def _prepare(access: NodeAccess, job: str, fingerprint: str, tarball: bytes) -> None:
    """A Python 3.10+ to run the adopter, the private dir with the bundle in it, then the probe."""
    shell = access.shell
    find = "; ".join(
        f"if command -v {p} >/dev/null 2>&1 && {p} -c 'import sys; sys.exit(sys.version_info < (3, 10))' "
        f"2>/dev/null; then command -v {p}; exit 0; fi"
        for p in PYTHON_CANDIDATES
    )
    code, found = shell.run(find)
    if code != 0 or not found.strip():
        raise UserError(f"no Python 3.10+ on {access.node} ({', '.join(PYTHON_CANDIDATES)}) to run the adopter")
    access.python = found.strip().splitlines()[-1]
    # a random name, made 0700 without following links, or an earlier adoption's dir checked as ours (its
    # ranks use it): node_dir's docstring says why a predictable name in a shared /tmp cannot be used
    code, made = shell.run(access.sh(node_dir.make_command(access.python, job, access.node)))
    state, _, directory = made.strip().rpartition("\n")[2].partition(" ")
    if code != 0 or state not in ("new", "old") or not directory.startswith(node_dir.PARENT + "/"):
        raise UserError(
            f"cannot make a private dir in {node_dir.PARENT} on {access.node}: {made.strip()[-300:] or 'no answer'}"
        )
    access.dir = directory
    access.bundle = f"{access.dir}/bundle-{fingerprint}"
    access.made = directory if state == "new" else ""
    bundle = shlex.quote(access.bundle.rpartition("/")[2])
    if _run_in(access, f"test -d {bundle}")[0] != 0:  # adopted before: the ranks may use that bundle
        access.made = access.made or access.bundle
        uploaded = _put(access, "bundle.tar.gz", tarball)
        # unpacked from the file just checked, in the dir just checked: never what an earlier step left there
        _check_in(
            access,
            f"rm -rf {bundle}.tmp && mkdir {bundle}.tmp && tar -xzf bundle.tar.gz -C {bundle}.tmp "
            f"&& chmod -R go-w {bundle}.tmp && mv {bundle}.tmp {bundle} && rm -f bundle.tar.gz",
            uploaded,
            timeout=120,
        )
    output = _check_in(access, f"{_with_bundle(access)} --adopt-node --probe", timeout=60)
    access.probe = _last_json(output, access.node)


def _put(access: NodeAccess, name: str, data: bytes) -> dict[str, str]:
    """``data`` as the 0600 file ``name`` in the node's private dir (each upload step behind the guard); the
    digest a later step hands the guard, which checks the file before that step uses it."""
    access.shell.put_file(name, data, 0o600, wrap=lambda c: access.sh(node_dir.in_dir(access.python, access.dir, c)))
    return {name: hashlib.sha256(data).hexdigest()}


def _run_in(
    access: NodeAccess, command: str, sha256: dict[str, str] | None = None, timeout: float = 60.0
) -> tuple[int, str]:
    """``command`` as root inside the node's private dir, once node_dir's guard has checked the dir (and the
    files named in ``sha256``) in this same step; the guard's refusal is a UserError (its one line)."""
    code, output = access.shell.run(access.sh(node_dir.in_dir(access.python, access.dir, command, sha256)), timeout)
    last = (output.strip().splitlines() or [""])[-1]
    if code == node_dir.EXIT_REFUSED and last.startswith(node_dir.REFUSAL):
        raise UserError(f"on {access.node}: {last.removeprefix(node_dir.REFUSAL)}; nothing was run")
    return code, output


def _check_in(access: NodeAccess, command: str, sha256: dict[str, str] | None = None, timeout: float = 60.0) -> str:
    """:func:`_run_in` that raises ShellError (with the output's last line) unless the exit status is 0."""
    code, output = _run_in(access, command, sha256, timeout)
    if code != 0:
        last = (output.strip().splitlines() or ["no output"])[-1]
        raise ShellError(f"`{command[:80]}` failed on {access.node} (exit status {code}): {last[:200]}")
    return output


def _remove_ours(access: NodeAccess) -> None:
    """Best effort: what this run put on the node (the private dir, or just the new bundle) goes again."""
    if not access.made:
        return
    try:
        if access.made == access.dir:  # made by this run: rm of the entry itself (a link would go, not its target)
            access.shell.run(access.sh(f"rm -rf {shlex.quote(access.dir)}"), timeout=60)
        else:  # a new bundle in an earlier adoption's dir, and the upload, if its unpacking failed
            name = shlex.quote(access.made.rpartition("/")[2])
            _run_in(access, f"rm -rf {name} {name}.tmp bundle.tar.gz", timeout=60)
    except ShellError:  # the session is gone: nothing more can be done from here
        pass


def _with_bundle(access: NodeAccess) -> str:
    """The adopter's command line, run inside the private dir (``_run_in``): the bundle by its full path, which
    the processes started here keep using after this step (nobody but us can rename or enter that dir)."""
    return f"PYTHONPATH={shlex.quote(access.bundle)} {shlex.quote(access.python)} -m remote_debug.container"


def _last_json(output: str, node: str) -> dict[str, Any]:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                answer: dict[str, Any] = json.loads(line)
            except ValueError:
                break
            return answer
    raise UserError(f"the adopter on {node} gave no answer: {output.strip()[-300:]}")


def _refuse_node(access: NodeAccess, job: str) -> None:
    """The node's refusal as one line; where py-spy can still read the ranks (the probe's ``stacks``: another
    user's ranks, no way in on that CPU, seccomp refusing ptrace alone) it names that instead of a bare no.
    A node without gdb is no refusal any more: the ptrace injector takes its place on x86-64."""
    refusal = access.probe.get("refusal")
    if not refusal:
        return
    if access.probe.get("stacks"):
        # `stacks --no-hook` reads jobs of this machine only (for now): the way to the ranks' stacks is the node's
        # own shell, which SageMaker's native remote debug (on now) opens to the AWS CLI
        target = ssm.native_target(job, access.node)
        raise UserError(
            f"cannot adopt {access.node}: {refusal}; every rank's stacks can still be read with py-spy "
            f"on the node (py-spy dump --pid PID), in a shell there: aws ssm start-session --target "
            f"{target}"
        )
    raise UserError(f"cannot adopt {access.node}: {refusal}")


def _adopt(access: NodeAccess, debug: spec.DebugSpec) -> tuple[bool, list[AdoptedRank]]:
    """The node daemon (detached), then the ranks; (every rank adopted before, the ranks)."""
    probe = access.probe
    roots = [int(p) for p in probe["roots"]]
    env = {
        **debug.to_env(),
        spec.ENV_MANIFEST_DIR: f"{access.dir}/manifest",
        spec.ENV_STATE_DIR: f"{access.dir}/state",
    }
    if probe.get("code_dir"):
        env[ENV_CODE_DIR] = str(probe["code_dir"])
    env_sum = _put(access, "daemon.env", "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()).encode())
    root = roots[0]
    # The daemon's stdout is the container's log, which SageMaker ships to CloudWatch, where the laptop reads
    # the manifest lines.  That is the stdout of the training tree's root: the container's PID 1 on SageMaker
    # (which has a PID namespace), the node's command in the emulator (which has none: there /proc/1 is the
    # machine's init, and only the command's stdout is read into the node's log stream).  ">>": the stdout
    # may be a file, which must not be truncated.  setsid and every stream redirected: the daemon leaves the
    # shell's terminal, or the SSM session would never end.  NodeLock keeps a second daemon from starting.
    # daemon.env is sourced only after the guard checked its digest in this same step.
    _check_in(
        access,
        (
            f"( set -a && . ./daemon.env && rm -f ./daemon.env && exec env PYTHONPATH={shlex.quote(access.bundle)} "
            f"setsid {shlex.quote(access.python)} -m remote_debug.container --node-daemon --parent-pid {root} ) "
            f"</dev/null >>/proc/{root}/fd/1 2>>/proc/{root}/fd/2 &"
        ),
        env_sum,
    )
    request = {"node": access.node, "roots": roots, "env": env}
    request_sum = _put(access, "request.json", (json.dumps(request) + "\n").encode())
    code, output = _run_in(
        access,
        f"{_with_bundle(access)} --adopt-node request.json; rc=$?; rm -f request.json; exit $rc",
        request_sum,
        timeout=ADOPT_TIMEOUT,
    )
    answer = _last_json(output, access.node)
    if code != 0 or "error" in answer:
        raise UserError(f"cannot adopt {access.node}: {answer.get('error') or output.strip()[-300:]}")
    ranks = [AdoptedRank(**r) for r in answer.get("ranks") or []]
    return bool(answer.get("already")), ranks

"""What a node runs for debugging besides training: sshd, the manifest, and its publication.

Shared by the two ways a node gets its services: the hook that wraps the entry command
(``python -m remote_debug.container -- CMD``) and the node daemon that the first Python process
starts when the entry cannot be wrapped (see ``bootstrap``).  Neither may break training, so
:meth:`NodeServices.start` records failures in the manifest's ``errors`` and logs them; it raises
only on bugs, which its callers catch.

Per transport: ``local``/``ssm`` run sshd on loopback (the SSM agent, or the local relay, connects
from inside the node; ``local`` behind a uid gate, since every user of the machine reaches its
loopback: see ``sshd_gate``); ``direct`` runs it on the node's VPC address; ``hybrid`` also registers the
node as an SSM managed instance and publishes its id.  On SageMaker, an image without sshd gets
openssh-server installed in the background (bounded, logged), and sshd starts when it is there:
training does not wait for a package manager.

Every ssh session runs through ``ssh_session`` (sshd's ForceCommand): it sees the job's environment,
interpreter and code dir, and whatever it starts ends with the node's services (:meth:`finish`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from remote_debug.container import node_env
from remote_debug.container.log import describe, log, one_line
from remote_debug.container.node import sshd_install as install
from remote_debug.container.node.gone_ranks import GoneRankWatcher
from remote_debug.container.node.hybrid import HybridError, HybridRegistration
from remote_debug.container.node.publish import ManifestPublisher, lines_enabled
from remote_debug.container.node.ssh_session import SessionScope
from remote_debug.container.node.sshd import (
    ENV_SSHD,
    Sshd,
    SshdError,
    current_user,
    find_sftp_server,
    find_sshd,
    prepare_state_dir,
    start_sshd,
)
from remote_debug.contract.spec import (
    ENV_STATE_DIR,
    LOOPBACK,
    DebugSpec,
    NodeManifest,
    NodeState,
    Transport,
    write_node_manifest,
)
from remote_debug.oskit import peer_uid

REGISTER_WAIT = 150.0  # amazon-ssm-agent -register is bounded by 120 s (hybrid.REGISTER_TIMEOUT)


class NodeServices:
    def __init__(self, spec: DebugSpec, env: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.env = dict(os.environ if env is None else env)
        self.manifest: NodeManifest | None = None
        self.manifest_dir: Path | None = None
        self.sshd: Sshd | None = None
        self.sessions: SessionScope | None = None
        self.own_state_dir: Path | None = None  # removed at the end when we created it
        self.publisher: ManifestPublisher | None = None
        self.hybrid: HybridRegistration | None = None
        self.installer: threading.Thread | None = None
        self.registrar: threading.Thread | None = None
        self.gone_ranks: GoneRankWatcher | None = None  # makes the documents of dead ranks final
        # publish() runs on the main thread and on the installer thread; finish() must not race a
        # late sshd start either.
        self._lock = threading.RLock()
        self._finished = False

    # --- the manifest --------------------------------------------------------------------------

    def publish(self, **changes: object) -> None:
        with self._lock:
            if self.manifest is None or self.manifest_dir is None:
                return
            self.manifest = replace(self.manifest, **changes)  # type: ignore[arg-type]
            try:
                write_node_manifest(self.manifest_dir, self.manifest)
            except OSError as exc:
                log(f"cannot write node manifest in {self.manifest_dir}: {describe(exc)}")
                return
            if self.publisher is not None:
                self.publisher.poll()  # node changes go out at once; ranks every half second

    def error(self, message: str) -> None:
        log(message)
        with self._lock:
            if self.manifest is not None:
                self.publish(errors=[*self.manifest.errors, one_line(message)])

    # --- start / finish ------------------------------------------------------------------------

    def start(self) -> None:
        identity = node_env.identify(self.env)
        # proven ours before anything is written there (a /tmp default another user made first is refused)
        self.manifest_dir = node_env.prepare_manifest_dir(
            node_env.manifest_dir(self.spec.job_name, identity.node, self.env)
        )
        try:
            user = current_user()
        except SshdError as exc:
            user = self.env.get("USER", "")
            self.error(f"sshd failed: {exc}")
        listen = node_env.node_address(self.env) if self.spec.transport == Transport.DIRECT else LOOPBACK
        if lines_enabled(self.spec, self.env):
            self.publisher = ManifestPublisher(self.manifest_dir, identity.node, secret=self.spec.job_secret)
        self.manifest = NodeManifest(
            job_name=self.spec.job_name,
            node=identity.node,
            hosts=identity.hosts,
            sshd_host=listen,
            sshd_port=0,
            ssh_user=user,
            host_public_key="",
            code_dir=node_env.code_dir(self.env),
            state=NodeState.STARTING,
            hook_pid=os.getpid(),
        )
        self.publish()
        if self.spec.transport == Transport.HYBRID:  # amazon-ssm-agent -register talks to AWS: not on training's time
            self.hybrid = HybridRegistration(self.env)
            self.registrar = threading.Thread(target=self._register_hybrid, name="remote-debug-ssm", daemon=True)
            self.registrar.start()
        if self._needs_install():
            self.installer = threading.Thread(
                target=self._install_then_start_sshd, args=(listen,), name="remote-debug-install", daemon=True
            )
            self.installer.start()
        else:
            self._start_sshd(listen)
        if self.publisher is not None:
            self.publisher.start()
        self.gone_ranks = GoneRankWatcher(self.manifest_dir)
        self.gone_ranks.start()

    def settle_ranks(self) -> None:
        """Make the documents of ranks that died without a last word final now (the command ended)."""
        if self.gone_ranks is not None:
            self.gone_ranks.sweep()

    def _needs_install(self) -> bool:
        # an explicitly configured binary is the user's choice: report it missing, don't install
        return not self.env.get(ENV_SSHD) and not os.path.isfile(find_sshd()) and install.should_install(self.env)

    def _install_then_start_sshd(self, listen: str) -> None:
        reason = install.install_sshd(self.env)
        if reason is not None:
            self.error(f"sshd failed: {reason}")
            return
        self._start_sshd(listen)

    def _start_sshd(self, listen: str) -> None:
        with self._lock:
            if self._finished:
                return
            try:
                explicit = self.env.get(ENV_STATE_DIR)
                if explicit:
                    state_dir = Path(explicit)
                else:
                    state_dir = self.own_state_dir = Path(tempfile.mkdtemp(prefix="remote-debug-sshd-"))
                key, port = self.spec.client_public_key, self.spec.sshd_port
                sftp = find_sftp_server()
                sessions = self.sessions = self._session_scope(prepare_state_dir(state_dir), sftp)
                self.sshd = start_sshd(
                    state_dir,
                    key,
                    port,
                    listen_address=listen,
                    force_command=sessions.force_command if sessions else None,
                    sftp_server=sftp,
                    uid_gate=self._uid_gate(),
                )
            except (SshdError, OSError) as exc:
                self.error(f"sshd failed: {exc if isinstance(exc, SshdError) else describe(exc)}")
                return
            sshd = self.sshd
            self.publish(sshd_port=sshd.port, ssh_user=sshd.user, host_public_key=sshd.host_public_key)

    def _uid_gate(self) -> bool:
        """Whether sshd sits behind the uid gate (``sshd_gate``): for jobs on this machine, whose
        loopback every local user reaches.  On SageMaker the node is the job's alone."""
        if self.spec.transport != Transport.LOCAL:
            return False
        if not peer_uid.supported():
            log("this system does not tell who owns a connection: the job's sshd is reachable by every local user")
            return False
        return True

    def _session_scope(self, state_dir: Path, sftp_server: str | None) -> SessionScope | None:
        """What makes ssh sessions look like the job and end with it; None (plain sessions) if it cannot be.
        A forced command runs sftp too, which then needs OpenSSH's sftp-server binary."""
        if sftp_server is None:
            log("no sftp-server binary next to sshd: ssh sessions get sshd's own environment and may outlive the job")
            return None
        code_dir = self.manifest.code_dir if self.manifest is not None else node_env.code_dir(self.env)
        try:
            return SessionScope.create(state_dir, self.env, code_dir)
        except OSError as exc:
            log(f"ssh sessions get sshd's own environment: {describe(exc)}")
            return None

    def _end_sessions(self) -> None:
        if self.sessions is None:
            return
        try:
            ended = self.sessions.end()
        except Exception as exc:  # cleanup must not change how the job ended
            log(f"stopping what ssh sessions started failed: {describe(exc)}")
            return
        if ended:
            log(f"stopped {ended} process(es) started over ssh")

    def _register_hybrid(self) -> None:
        assert self.hybrid is not None
        try:
            instance = self.hybrid.start()
        except HybridError as exc:
            self.error(f"SSM hybrid registration failed: {exc}")
            return
        self.publish(ssm_target=instance)

    def finish(self, state: NodeState, exit_code: int | None) -> None:
        """Stop everything we started and publish how the node ended; never raises."""
        with self._lock:
            self._finished = True  # an sshd still being installed will not start now
        if self.gone_ranks is not None:  # last look: a rank killed with the node leaves no port behind
            self.gone_ranks.stop()
        if self.registrar is not None:  # a registration in flight must finish to be undone
            self.registrar.join(timeout=REGISTER_WAIT)  # (outside the lock: it publishes)
        with self._lock:
            if self.sshd is not None:
                try:
                    self.sshd.stop()
                except Exception as exc:
                    log(f"stopping sshd failed: {describe(exc)}")
            self._end_sessions()  # after sshd: no new session can start meanwhile
            if self.hybrid is not None:
                self.hybrid.stop()
            if self.own_state_dir is not None:  # holds the host's private key: do not leave it behind
                shutil.rmtree(self.own_state_dir, ignore_errors=True)
            self.publish(state=state, exit_code=exit_code)
        if self.publisher is not None:
            self.publisher.stop()

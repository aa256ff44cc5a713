// The commands: each asks what it needs (quick picks), runs the CLI, and updates the model.

import * as path from 'node:path';

import * as vscode from 'vscode';

import { Adopter } from './adopt';
import { AttachManager, AttachSettings, showError } from './attach';
import { AttachTargets } from './attachTarget';
import { Cli, CliError } from './cli';
import { DEFAULT_REMOTE_ROOT, PathMapping, pathMappings } from './debugConfig';
import { formatSshAlias, isRunning, JobInfo, parseJob, parseJobs, parseJsonDocument, type Released, type SshConfigWritten } from './events';
import { ListingProblems, parseListingStderr } from './listingProblems';
import { isKeptAlive, JobsModel, parseRanks } from './model';
import { withCancellableProgress } from './progress';
import { pickedRanks, rankPickItems, stuckRanks } from './rankPicker';
import { RunManager, syncSource } from './rerun';
import { REMOTE_SSH_EXTENSION, remoteSshUri, remoteWindowKind, sshCommand, suggestedSettings } from './remoteSsh';
import { SshConfigConsent } from './sshConsent';
import { localFileFor, StacksView } from './stacksView';
import { restrictedSetting, untrustedRoots } from './trust';
import { TreeNode } from './tree';

const NEVER_ASK_SSH_SETTINGS = 'remoteDebug.neverOfferRemoteSshSettings';
/** The launch options picked last (Launch Local Job…): offered picked the next time. */
const LAUNCH_OPTIONS_KEY = 'remoteDebug.launchOptions';

export type LaunchOption = 'keep-alive' | 'hold-on-failure';

/** `4` (ranks per node) or `2x4` (nodes x ranks per node): Launch Local Job…'s shape; undefined when neither. */
export function parseJobShape(text: string): { nodes: number; nprocPerNode: number } | undefined {
  const m = /^\s*(?:([1-9]\d*)\s*[x×*]\s*)?([1-9]\d*)\s*$/i.exec(text);
  return m ? { nodes: m[1] === undefined ? 1 : Number(m[1]), nprocPerNode: Number(m[2]) } : undefined;
}

/** `launch --local`'s options for the picked launch options (the seconds: the settings'). */
export function launchOptionArgs(picked: readonly LaunchOption[], settings: Pick<Settings, 'keepAliveSeconds' | 'holdOnFailureSeconds'>): string[] {
  return [
    ...(picked.includes('keep-alive') ? ['--keep-alive', String(settings.keepAliveSeconds)] : []),
    ...(picked.includes('hold-on-failure') ? ['--hold-on-failure', String(settings.holdOnFailureSeconds)] : []),
  ];
}

export interface Settings extends AttachSettings {
  cliPath: string;
  pythonPath: string;
  untrustedRoots?: string[];
  env: Record<string, string>;
  defaultRanks: string;
  nprocPerNode: number;
  nodes: number;
  keepAliveSeconds: number;
  holdOnFailureSeconds: number;
  waitSeconds: number;
  rerunWaitSeconds: number;
  refreshIntervalSeconds: number;
}

/** The settings; `scope`: a workspace folder (or a file in one), whose own values win in a multi-root workspace. */
export function readSettings(scope?: vscode.Uri): Settings {
  const c = vscode.workspace.getConfiguration('remoteDebug', scope);
  return {
    // executables: in Restricted Mode only the user's own values count (src/trust.ts)
    cliPath: restrictedSetting(c, 'cliPath', 'remote-debug'),
    pythonPath: restrictedSetting(c, 'pythonPath', ''),
    // and untrusted, not even a bare name may resolve to a file in the workspace folders (src/cliResolve.ts)
    untrustedRoots: untrustedRoots(),
    // the CLI reads the standard AWS variables; empty settings leave the environment alone
    env: { AWS_PROFILE: c.get<string>('aws.profile', ''), AWS_REGION: c.get<string>('aws.region', '') },
    defaultRanks: c.get<string>('defaultRanks', 'all'),
    pathMappings: c.get<PathMapping[]>('pathMappings', []),
    debugType: c.get<string>('debugType', 'auto'),
    justMyCode: c.get<boolean>('justMyCode', false),
    nprocPerNode: c.get<number>('launch.nprocPerNode', 2),
    nodes: c.get<number>('launch.nodes', 1),
    keepAliveSeconds: c.get<number>('launch.keepAliveSeconds', 1800),
    holdOnFailureSeconds: c.get<number>('launch.holdOnFailureSeconds', 600),
    waitSeconds: c.get<number>('launch.waitSeconds', 300),
    rerunWaitSeconds: c.get<number>('rerun.waitSeconds', 30),
    refreshIntervalSeconds: c.get<number>('refreshIntervalSeconds', 10),
    readyTimeoutSeconds: c.get<number>('readyTimeoutSeconds', 600),
    allStop: c.get<boolean>('allStop', true),
  };
}

interface Log {
  appendLine(line: string): void;
  show(preserveFocus?: boolean): void;
}

export class Commands {
  private refreshing: Promise<void> | undefined;
  private lastListingWarning = '';
  /** Why a backend's jobs were not listed (the Jobs view's warning node, the AWS status bar item). */
  readonly listing = new ListingProblems();
  private consent: SshConfigConsent | undefined;
  /** Adopt a Running Process… and Adopt Job… (adopt.ts); their Attach All Ranks is this class's. */
  private readonly adopter: Adopter;
  /** The Stacks view (stacksView.ts): Show Stacks fills it. */
  readonly stacks: StacksView;

  /** Ask-once before ~/.ssh/config is edited (activate shares it with attach, for --no-ssh-include). */
  get sshConsent(): SshConfigConsent {
    return (this.consent ??= new SshConfigConsent(this.globalState));
  }

  set sshConsent(consent: SshConfigConsent) {
    this.consent = consent;
  }

  constructor(
    private readonly cli: Cli,
    private readonly model: JobsModel,
    private readonly attacher: AttachManager,
    private readonly log: Log,
    private readonly globalState: vscode.Memento,
    private readonly runs: RunManager,
    /** Where each job's code is on this machine (path mappings' local root, the workspace folder). */
    readonly targets: AttachTargets = new AttachTargets(),
  ) {
    this.adopter = new Adopter(cli, model, this, log);
    this.stacks = new StacksView({
      run: (args, options) => this.cli.run(args, options),
      hasSession: (job, rank) => this.attacher.sessionFor(job, rank) !== undefined,
      attach: (job, ranks) => this.attachRanksOf(job, ranks),
      codeDirs: (job) => ({ ...this.model.get(job)?.info.code_dirs }),
      localFile: (job, node, file, codeDir) => this.localFile(job, node, file, codeDir),
    });
    // a rank's session starts or ends (the model says so): its row in the Stacks view says whether it is attached
    model.onDidChange(() => this.stacks.sessionsChanged());
  }

  register(): vscode.Disposable[] {
    const wrap =
      (name: string, fn: (...args: never[]) => Promise<unknown>) =>
      async (...args: never[]) => {
        try {
          await fn.apply(this, args);
        } catch (err) {
          if (err instanceof CliError && err.message === 'cancelled') {
            return;
          }
          const message = err instanceof Error ? err.message : String(err);
          this.log.appendLine(`${name}: ${message}`);
          await showError(message);
        }
      };
    const table: Record<string, (...args: never[]) => Promise<unknown>> = {
      'remoteDebug.refresh': this.refresh,
      'remoteDebug.attachToJob': this.attachToJob,
      'remoteDebug.attachAllRanks': this.attachAllRanks,
      'remoteDebug.attachRank': this.attachRank,
      'remoteDebug.attachNode': this.attachNode,
      'remoteDebug.openRemoteSsh': this.openRemoteSsh,
      'remoteDebug.showStacks': this.showStacks,
      'remoteDebug.stopJob': this.stopJob,
      'remoteDebug.detach': this.detach,
      'remoteDebug.launchLocalJob': this.launchLocalJob,
      'remoteDebug.syncAndRerun': this.syncAndRerun,
      'remoteDebug.stopRun': this.stopRun,
      'remoteDebug.release': this.release,
      'remoteDebug.adopt': () => this.adopter.adoptProcess(),
      'remoteDebug.adoptJob': (node?: TreeNode) => this.adopter.adoptJob(node),
      'remoteDebug.showOutput': async () => this.log.show(),
    };
    return [...Object.entries(table).map(([name, fn]) => vscode.commands.registerCommand(name, wrap(name, fn))), ...this.stacks.register()];
  }

  // --- jobs -------------------------------------------------------------------------------------

  /** `remote-debug jobs --json` into the model; concurrent calls share one CLI run. */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const result = await this.cli.run(['jobs', '--json'], { timeoutMs: 60_000 });
        this.model.setJobs(parseJobs(result.stdout));
        // a backend that could not be listed (expired SSO token, no region, ...): one JSON line each from newer
        // CLIs, a plain line from older ones; worth a log line when it changes, not every refresh
        const { problems, otherLines } = parseListingStderr(result.stderr);
        this.listing.set(problems);
        const warning = result.stderr.trim();
        if (warning && warning !== this.lastListingWarning) {
          problems.forEach((p) => this.log.appendLine(`jobs: ${p.backend} not listed (${p.problem}): ${p.message}${p.fix ? ` (fix: ${p.fix})` : ''}`));
          otherLines.forEach((l) => this.log.appendLine(`jobs: ${l}`));
        }
        this.lastListingWarning = warning;
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        this.log.appendLine(`jobs: ${message}`);
        this.listing.set([]); // the error says it all; a stale warning would only confuse
        this.model.setError(message);
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /** The tree item's job, else the only running one (`single`), else the user's pick of the running jobs. */
  async pickJob(options: { node?: TreeNode; placeHolder: string; single?: boolean }): Promise<JobInfo | undefined> {
    if (options.node && options.node.kind !== 'message') {
      const entry = this.model.get(options.node.job);
      if (entry) {
        return entry.info;
      }
    }
    await this.refresh();
    if (this.model.error) {
      throw new Error(`cannot list jobs: ${this.model.error}`);
    }
    const running = this.model.running().map((e) => e.info);
    if (running.length === 0) {
      const choice = await vscode.window.showInformationMessage(
        'Remote Debug: no running jobs. Launch one with remote-debug launch (or here), then attach.',
        'Launch Local Job…',
      );
      if (choice) {
        await vscode.commands.executeCommand('remoteDebug.launchLocalJob');
      }
      return undefined;
    }
    if (running.length === 1 && options.single) {
      return running[0];
    }
    const picked = await vscode.window.showQuickPick(
      running.map((info) => ({
        label: info.name,
        description: `${info.status}${info.secondary_status ? ` · ${info.secondary_status}` : ''} · ${info.backend}`,
        detail: `${info.nodes.length} node(s) × ${info.nproc_per_node || "?"} rank(s)${info.source_dir ? ` · ${info.source_dir}` : ''}`,
        info,
      })),
      { placeHolder: options.placeHolder, matchOnDescription: true },
    );
    return picked?.info;
  }

  // --- attach -----------------------------------------------------------------------------------

  /** Attach to `ranks` of the job from where its code is here (attachTarget.ts); nothing when a pick is dismissed. */
  private async attachJob(info: JobInfo, ranks: number[] | undefined | ((folder: vscode.WorkspaceFolder) => number[] | undefined)): Promise<void> {
    const target = await this.targets.resolve(info);
    if (!target) {
      return;
    }
    const wanted = typeof ranks === 'function' ? ranks(target.folder) : ranks;
    await this.attacher.attach({ job: info.name, ranks: wanted, folder: target.folder, localRoot: target.localRoot });
  }

  /** Attach `ranks` (undefined: all) of a job by name: the Stacks view's rank and class rows. */
  async attachRanksOf(job: string, ranks: number[] | undefined): Promise<void> {
    const info = await this.pickJob({ node: { kind: 'job', job }, placeHolder: vscode.l10n.t('Attach to which job?'), single: true });
    if (info) {
      await this.attachJob(info, ranks);
    }
  }

  async attachToJob(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: vscode.l10n.t('Attach the debugger to which job?') });
    if (!info) {
      return;
    }
    await this.attachJob(info, (folder) => parseRanks(readSettings(folder.uri).defaultRanks));
  }

  async attachAllRanks(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: vscode.l10n.t('Attach to every rank of which job?'), single: true });
    if (!info) {
      return;
    }
    await this.attachJob(info, undefined);
  }

  async attachRank(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: vscode.l10n.t('Attach to a rank of which job?'), single: true });
    if (!info) {
      return;
    }
    let ranks: number[] | undefined;
    if (node?.kind === 'rank') {
      ranks = [node.rank];
    } else {
      const all = this.model.allRanks(info.name);
      const stuck = stuckRanks(all, info.held_ranks.map((h) => h.rank)).filter((r) => !this.attacher.sessionFor(info.name, r));
      const picked = await vscode.window.showQuickPick(rankPickItems(all, stuck), {
        placeHolder: vscode.l10n.t('Attach to which nodes or ranks of {0}?', info.name),
        canPickMany: true,
      });
      if (!picked || picked.length === 0) {
        return;
      }
      ranks = pickedRanks(picked, all.map((r) => r.rank));
      if (ranks?.length === 0) {
        return;
      }
    }
    await this.attachJob(info, ranks);
  }

  /** From a node item: attach exactly the ranks the view shows on that node.  Elsewhere: Attach Rank…'s pick. */
  async attachNode(node?: TreeNode): Promise<void> {
    if (node?.kind !== 'node') {
      return this.attachRank(node);
    }
    const info = await this.pickJob({ node, placeHolder: 'Attach to a node of which job?', single: true });
    if (!info) {
      return;
    }
    const ranks = this.model.nodeRanks(info.name, node.node);
    if (ranks.length === 0) {
      throw new Error(`the ranks on ${node.node} of ${info.name} are not known yet: use Attach All Ranks`);
    }
    await this.attachJob(info, ranks);
  }

  /** From a rank: stop its session.  From a job (or the palette): stop every session and the tunnels. */
  async detach(node?: TreeNode): Promise<void> {
    if (node?.kind === 'rank') {
      await this.attacher.detachRank(node.job, node.rank);
      return;
    }
    const job = node && node.kind !== 'message' ? node.job : this.attacher.activeJobs()[0];
    if (job) {
      await this.attacher.detach(job);
    }
  }

  // --- sync and re-run ---------------------------------------------------------------------------

  /**
   * Save, `sync`, then `run` the job's entry again in the background (attaching first when nothing follows the
   * job), so the new ranks stop at the breakpoints.  The job: the tree item's, else the one attached job, else
   * a pick of the running jobs.
   */
  async syncAndRerun(node?: TreeNode): Promise<void> {
    const attached = this.attacher.activeJobs().flatMap((job) => this.model.get(job) ?? []);
    const fromView = node !== undefined && node.kind !== 'message';
    const info =
      !fromView && attached.length === 1
        ? attached[0].info
        : await this.pickJob({ node, placeHolder: 'Sync the workspace to which job, and run it again?', single: true });
    if (!info) {
      return;
    }
    const target = await this.targets.resolve(info);
    if (!target) {
      return;
    }
    const folder = target.folder;
    const settings = readSettings(folder.uri);
    await this.runs.syncAndRerun({
      job: info.name,
      folder,
      // the folder whose contents are the code dir (a SageMaker job's picked folder), else as syncSource says
      source: target.localRoot ?? syncSource(info, folder.uri.fsPath),
      waitSeconds: settings.rerunWaitSeconds,
      ranks: parseRanks(settings.defaultRanks),
    });
  }

  /** Stop this window's re-run of a job (its nodes stay kept alive). */
  async stopRun(node?: TreeNode): Promise<void> {
    let job = node && node.kind !== 'message' ? node.job : undefined;
    if (!job) {
      const live = this.runs.activeJobs();
      if (live.length === 0) {
        await vscode.window.showInformationMessage('Remote Debug: no re-run runs in this window.');
        return;
      }
      job = live.length === 1 ? live[0] : await vscode.window.showQuickPick(live, { placeHolder: 'Stop the re-run of which job?' });
    }
    if (job && !(await this.runs.stop(job))) {
      await vscode.window.showInformationMessage(`Remote Debug: no re-run of ${job} runs in this window.`);
    }
  }

  /** End a kept-alive job's keep-alive now (`remote-debug release`): its nodes are let go and the job ends. */
  async release(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: 'Release which kept-alive job?', single: true });
    if (!info) {
      return;
    }
    const entry = this.model.get(info.name);
    const kept = entry && isKeptAlive(entry);
    const choice = await vscode.window.showWarningMessage(
      `Release job ${info.name}?`,
      {
        modal: true,
        detail: kept
          ? 'Its nodes stop being kept alive: the job ends, and Sync and Re-run can no longer run it again.'
          : 'The job ends when its command ends instead of being kept alive for Sync and Re-run.',
      },
      'Release',
    );
    if (choice !== 'Release') {
      return;
    }
    // release stops a run still on: ours ends as one we stopped, not as a failed run
    await this.runs.stop(info.name);
    const result = await withCancellableProgress(vscode.l10n.t('Remote Debug: releasing {0}', info.name), (signal) =>
      this.cli.run(['release', info.name, '--json'], { timeoutMs: 300_000, signal }),
    );
    let nodes = '';
    try {
      const doc = parseJsonDocument(result.stdout) as Partial<Record<keyof Released, unknown>> | null;
      if (doc && typeof doc === 'object' && Array.isArray(doc.released)) {
        nodes = ` (${doc.released.filter((n): n is string => typeof n === 'string').join(', ')})`;
      }
    } catch {
      // an older CLI printed nothing to read: the listing below says how the job is
    }
    this.log.appendLine(`released ${info.name}${nodes}`);
    await this.refresh();
  }

  // --- remote-ssh -------------------------------------------------------------------------------

  async openRemoteSsh(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: 'Open Remote-SSH on a node of which job?', single: true });
    if (!info) {
      return;
    }
    // ssh (and Remote-SSH) find the entries through one Include line in ~/.ssh/config: not without a yes
    if (!(await this.sshConsent.ensure())) {
      await this.explainSshEntriesNeeded(info.name, node);
      return;
    }
    // the CLI writes (or refreshes) the ssh entries and tells us their aliases
    const data = (await withCancellableProgress(vscode.l10n.t('Remote Debug: ssh entries for {0}', info.name), (signal) =>
      this.cli.json(['ssh-config', info.name, '--json'], { timeoutMs: 120_000, signal }),
    )) as Partial<Record<keyof SshConfigWritten, unknown>>;
    const aliases = Array.isArray(data.aliases) ? data.aliases.filter((a): a is string => typeof a === 'string') : [];
    if (aliases.length === 0) {
      throw new Error(`the CLI reported no ssh hosts for ${info.name}`);
    }
    let alias: string | undefined;
    if (node?.kind === 'node' || node?.kind === 'rank') {
      alias = aliases.find((a) => a === formatSshAlias(info.name, node.node));
    }
    if (!alias) {
      alias =
        aliases.length === 1
          ? aliases[0]
          : await vscode.window.showQuickPick(aliases, { placeHolder: `Open Remote-SSH on which node of ${info.name}?` });
    }
    if (!alias) {
      return;
    }
    const chosen = alias;
    const nodeName = info.nodes.find((n) => formatSshAlias(info.name, n) === chosen) ?? alias;
    const folder = this.model.codeDir(info.name, nodeName) ?? readSettings().pathMappings[0]?.remoteRoot ?? DEFAULT_REMOTE_ROOT;

    const remoteName = vscode.env.remoteName;
    if (remoteName) {
      // This window is itself remote: the extension (and the CLI, and the entries it wrote) run on that machine,
      // where the Remote-SSH extension -- a UI extension on the laptop -- is out of sight.  Not "missing".
      await this.offerPlainSsh(
        alias,
        vscode.l10n.t(
          'Remote Debug: this is a {0} window. Opening a job node in Remote-SSH needs a local VS Code window (with remote-debug installed on that machine). From this window, the node is reachable with "{1}" in a terminal.',
          remoteWindowKind(remoteName),
          sshCommand(alias),
        ),
      );
      return;
    }
    if (!vscode.extensions.getExtension(REMOTE_SSH_EXTENSION)) {
      await this.offerPlainSsh(
        alias,
        vscode.l10n.t(
          'Remote Debug: the Remote - SSH extension ({0}) is not installed. The node is reachable as "{1}" with plain ssh.',
          REMOTE_SSH_EXTENSION,
          alias,
        ),
      );
      return;
    }
    await this.offerRemoteSshSettings(aliases);
    const uri = vscode.Uri.parse(remoteSshUri(alias, folder));
    this.log.appendLine(`opening ${uri.toString(true)}`);
    await vscode.commands.executeCommand('vscode.openFolder', uri, { forceNewWindow: true });
  }

  /** `ssh <alias>` instead of Remote-SSH: in a terminal, or on the clipboard. */
  private async offerPlainSsh(alias: string, message: string): Promise<void> {
    const openTerminal = vscode.l10n.t('Open Terminal');
    const copy = vscode.l10n.t('Copy ssh Command');
    const choice = await vscode.window.showWarningMessage(message, openTerminal, copy);
    if (choice === openTerminal) {
      const terminal = vscode.window.createTerminal({ name: `ssh ${alias}` });
      terminal.show();
      terminal.sendText(sshCommand(alias));
    } else if (choice === copy) {
      await vscode.env.clipboard.writeText(sshCommand(alias));
    }
  }

  /** Open Remote-SSH without the Include line: say why it cannot, and how to allow it (even after a Never). */
  private async explainSshEntriesNeeded(job: string, node?: TreeNode): Promise<void> {
    const allow = vscode.l10n.t('Allow…');
    const copy = vscode.l10n.t('Copy Command');
    const command = `remote-debug ssh-config ${job}`;
    const choice = await vscode.window.showInformationMessage(
      vscode.l10n.t(
        'Remote Debug: Open Remote-SSH needs the job\'s ssh Host entries, which ssh finds through one Include line in ~/.ssh/config, and Remote Debug may not add it. Allow it, or run "{0}" yourself.',
        command,
      ),
      allow,
      copy,
    );
    if (choice === allow) {
      if (await this.sshConsent.ask()) {
        await this.openRemoteSsh(node);
      }
    } else if (choice === copy) {
      await vscode.env.clipboard.writeText(command);
    }
  }

  /** Offer the Remote-SSH settings that help training containers; change nothing without a yes. */
  async offerRemoteSshSettings(aliases: string[]): Promise<void> {
    if (this.globalState.get<boolean>(NEVER_ASK_SSH_SETTINGS)) {
      return;
    }
    const ssh = vscode.workspace.getConfiguration('remote.SSH');
    const changes = suggestedSettings(
      { localServerDownload: ssh.get('localServerDownload'), remotePlatform: ssh.get('remotePlatform') },
      aliases,
    );
    if (changes.length === 0) {
      return;
    }
    const list = changes.map((c) => `• remote.SSH.${c.key}: ${c.why}`).join('\n');
    const choice = await vscode.window.showInformationMessage(
      'Remote Debug: change these Remote-SSH user settings for training containers?',
      { modal: true, detail: list },
      'Change Settings',
      'Not Now',
      'Never Ask',
    );
    if (choice === 'Change Settings') {
      for (const c of changes) {
        await vscode.workspace.getConfiguration(c.section).update(c.key, c.value, vscode.ConfigurationTarget.Global);
        this.log.appendLine(`set ${c.section}.${c.key} = ${JSON.stringify(c.value)}`);
      }
    } else if (choice === 'Never Ask') {
      await this.globalState.update(NEVER_ASK_SSH_SETTINGS, true);
    }
  }

  // --- stacks, stop, launch ---------------------------------------------------------------------

  /** Show Stacks: the job's ranks grouped by where they are, in the Stacks view (stacksView.ts). */
  async showStacks(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: 'Show the Python stacks of which job?', single: true });
    if (!info) {
      return;
    }
    await this.stacks.show(info.name);
  }

  /**
   * Where a file of the job (a stack frame's) is on this machine: mapped from the code dir of its node (else of any
   * node) as the attach maps breakpoints (the path mappings setting, else the job's local root <-> its code dir).
   */
  localFile(job: string, node: string | null, file: string, codeDir?: string): string | undefined {
    const info = this.model.get(job)?.info;
    const localRoot = info && this.targets.known(info);
    const folders = vscode.workspace.workspaceFolders ?? [];
    const folder = (localRoot && vscode.workspace.getWorkspaceFolder(vscode.Uri.file(localRoot))) || folders[0];
    const setting = readSettings(folder?.uri).pathMappings;
    const codeDirs = [
      codeDir,
      ...(node ? [this.model.codeDir(job, node) ?? info?.code_dirs?.[node]] : []),
      ...Object.values(info?.code_dirs ?? {}),
    ].filter((d): d is string => typeof d === 'string' && d !== '');
    const mappings = (codeDirs.length ? [...new Set(codeDirs)] : [undefined]).flatMap((dir) => pathMappings(setting, folder?.uri.fsPath, dir, localRoot));
    return localFileFor(file, mappings);
  }

  async stopJob(node?: TreeNode): Promise<void> {
    const info = await this.pickJob({ node, placeHolder: 'Stop which job?' });
    if (!info) {
      return;
    }
    if (!isRunning(info)) {
      await vscode.window.showInformationMessage(`Remote Debug: job ${info.name} is already ${info.status}.`);
      return;
    }
    const choice = await vscode.window.showWarningMessage(
      `Stop job ${info.name}?`,
      { modal: true, detail: 'Its processes get SIGTERM (SIGKILL after a grace period), as SageMaker stops a job.' },
      'Stop Job',
    );
    if (choice !== 'Stop Job') {
      return;
    }
    await this.runs.stop(info.name);
    await this.attacher.detach(info.name);
    const stopped = await withCancellableProgress(vscode.l10n.t('Remote Debug: stopping {0}', info.name), (signal) =>
      this.cli.json(['stop', info.name, '--json'], { timeoutMs: 300_000, signal }),
    );
    this.model.upsertJob(parseJob(stopped));
    await this.refresh();
  }

  /**
   * Keep alive (Sync and Re-run needs it) and hold on failure (a crash stays stopped at its exception for the
   * debugger), seconds from the settings; the last choice is offered picked.  Undefined: dismissed.
   */
  private async pickLaunchOptions(settings: Settings): Promise<LaunchOption[] | undefined> {
    const last = this.globalState.get<LaunchOption[]>(LAUNCH_OPTIONS_KEY) ?? [];
    const items: Array<vscode.QuickPickItem & { option: LaunchOption }> = [
      {
        option: 'keep-alive',
        label: 'Keep alive',
        description: `--keep-alive ${settings.keepAliveSeconds}`,
        detail: `its nodes stay up ${settings.keepAliveSeconds} s after the command ends: Sync and Re-run runs it again (Release ends it)`,
        picked: last.includes('keep-alive'),
      },
      {
        option: 'hold-on-failure',
        label: 'Hold on failure',
        description: `--hold-on-failure ${settings.holdOnFailureSeconds}`,
        detail: `a rank that dies of an uncaught exception stays up to ${settings.holdOnFailureSeconds} s, stopped at it for the debugger`,
        picked: last.includes('hold-on-failure'),
      },
    ];
    const picked = await vscode.window.showQuickPick(items, {
      canPickMany: true,
      placeHolder: 'Launch options (none picked: the job ends with its command; a failed rank exits at once)',
    });
    if (!picked) {
      return undefined;
    }
    const options = picked.map((p) => p.option);
    await this.globalState.update(LAUNCH_OPTIONS_KEY, options);
    return options;
  }

  async launchLocalJob(resource?: vscode.Uri): Promise<void> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    if (folders.length === 0) {
      throw new Error('open the folder with your training script first (File > Open Folder)');
    }
    let script = resource instanceof vscode.Uri ? resource : undefined;
    const active = vscode.window.activeTextEditor?.document.uri;
    if (!script) {
      const candidates = await vscode.workspace.findFiles('**/*.py', '**/{.venv,venv,node_modules,.git,__pycache__}/**', 500);
      if (candidates.length === 0) {
        throw new Error('no Python script in the workspace to launch');
      }
      const items = candidates
        .map((uri) => ({ label: vscode.workspace.asRelativePath(uri), uri }))
        .sort((a, b) => {
          const pa = active && a.uri.fsPath === active.fsPath ? 0 : 1;
          const pb = active && b.uri.fsPath === active.fsPath ? 0 : 1;
          return pa - pb || a.label.localeCompare(b.label);
        });
      script = (await vscode.window.showQuickPick(items, { placeHolder: 'Launch which training script as a local job?' }))?.uri;
    }
    if (!script) {
      return;
    }
    const folder = vscode.workspace.getWorkspaceFolder(script) ?? folders[0];
    const settings = readSettings(folder.uri);
    const shapeText = await vscode.window.showInputBox({
      prompt: 'Ranks per node (torchrun --nproc-per-node); for several nodes NODESxRANKS, e.g. 2x4 (algo-1, algo-2)',
      value: settings.nodes > 1 ? `${settings.nodes}x${settings.nprocPerNode}` : String(settings.nprocPerNode),
      validateInput: (v) => (parseJobShape(v) ? undefined : 'a whole number of ranks per node (at least 1), or NODESxRANKS like 2x4'),
    });
    const shape = shapeText === undefined ? undefined : parseJobShape(shapeText);
    if (!shape) {
      return;
    }
    const options = await this.pickLaunchOptions(settings);
    if (!options) {
      return;
    }
    const relative = path.relative(folder.uri.fsPath, script.fsPath);
    if (relative.startsWith('..')) {
      throw new Error(`${script.fsPath} is not inside the workspace folder ${folder.uri.fsPath}`);
    }
    const args = [
      'launch',
      '--local',
      ...(shape.nodes > 1 ? ['--nodes', String(shape.nodes)] : []),
      '--nproc-per-node',
      String(shape.nprocPerNode),
      '--wait',
      String(settings.waitSeconds),
      ...launchOptionArgs(options, settings),
      '--source-dir',
      folder.uri.fsPath,
      '--json',
      '--',
      this.cli.trainingPython(),
      relative,
    ];
    const launched = parseJob(
      await withCancellableProgress(vscode.l10n.t('Remote Debug: launching {0}', relative), (signal) =>
        this.cli.json(args, { cwd: folder.uri.fsPath, timeoutMs: 120_000, signal }),
      ),
    );
    this.model.upsertJob(launched);
    if (options.includes('keep-alive')) {
      this.model.markKeepAlive(launched.name); // Sync and Re-run works on it from now, not only once its nodes hold
    }
    this.log.appendLine(`launched ${launched.name}`);
    void this.refresh();
    const wait = settings.waitSeconds > 0 ? ` Its ranks wait up to ${settings.waitSeconds} s for the debugger.` : '';
    const choice = await vscode.window.showInformationMessage(`Remote Debug: launched ${launched.name}.${wait}`, 'Attach All Ranks');
    if (choice === 'Attach All Ranks') {
      await this.attacher.attach({ job: launched.name, ranks: undefined, folder });
    }
  }
}

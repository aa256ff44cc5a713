// Entry point: wires the CLI runner, the jobs model, the view, the commands and the debug type.
//
// The extension never re-implements the CLI: every job operation is `remote-debug ... --json`.

import * as vscode from 'vscode';

import { AttachManager } from './attach';
import { AttachCommands } from './attachCommands';
import { AttachMemory } from './attachMemory';
import { AttachTargets } from './attachTarget';
import { AwsStatusBar, registerAwsCommands, trackListingContext } from './awsUi';
import { Cli } from './cli';
import { CliSetup } from './cliSetup';
import { Commands, readSettings } from './commands';
import { registerDebugType } from './debugAdapter';
import { GroupCommands } from './groupActions';
import { HeldNotices } from './heldNotices';
import { isKeptAlive, JobsModel } from './model';
import { warnIfUnsupported } from './platform';
import { RankOutputs } from './rankOutput';
import { RunManager } from './rerun';
import { useSshConsent } from './sshConsent';
import { JobsTreeProvider, TreeNode } from './tree';

export interface ExtensionApi {
  model: JobsModel;
  attacher: AttachManager;
  commands: Commands;
  runs: RunManager;
  outputs: RankOutputs;
}

let attacher: AttachManager | undefined;
let runs: RunManager | undefined;
let outputs: RankOutputs | undefined;

export function activate(context: vscode.ExtensionContext): ExtensionApi {
  // a LogOutputChannel: each line with its time and level (info / warn / error)
  const log = vscode.window.createOutputChannel('Remote Debug', { log: true });
  const cli = new Cli(() => readSettings());
  const model = new JobsModel();
  // where each job's code is here (path mappings), and which jobs were attached (for a window reload)
  const targets = new AttachTargets(context.workspaceState);
  const memory = new AttachMemory(context.workspaceState);
  // a rank held after a failure, said once when the listing first shows it (the attach says its own)
  const held = new HeldNotices();
  attacher = new AttachManager(cli, model, log, (scope) => readSettings(scope), undefined, {
    memory,
    heldFailureTold: (job, rank) => held.toldOf(job, rank),
    localRootFor: (job) => {
      const info = model.get(job)?.info;
      return info && targets.known(info);
    },
  });
  // a re-run's output (its ranks' lines), apart from the extension's own log
  const runOutput = vscode.window.createOutputChannel('Remote Debug: Run');
  runs = new RunManager(cli, model, attacher, log, runOutput, () => commands.refresh());
  const commands = new Commands(cli, model, attacher, log, context.globalState, runs, targets);
  // each job's output (its ranks' lines, from the start of the run), "Remote Debug: JOB"
  outputs = new RankOutputs(
    cli,
    model,
    async (node) => (await commands.pickJob({ node: node as TreeNode | undefined, placeHolder: 'Show the output of which job?', single: true }))?.name,
    { followOnAttach: () => vscode.workspace.getConfiguration('remoteDebug').get<boolean>('output.followOnAttach', true) },
  );
  const attachCommands = new AttachCommands(commands, model, attacher, targets, memory, log);
  const tree = new JobsTreeProvider(model, undefined, undefined, commands.listing);
  const view = vscode.window.createTreeView('remoteDebug.jobs', { treeDataProvider: tree, showCollapseAll: true });

  // Refresh while the view is visible (the CLI is cheap to ask, but not free on SageMaker).
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    if (timer) {
      clearInterval(timer);
      timer = undefined;
    }
    const seconds = readSettings().refreshIntervalSeconds;
    if (view.visible && seconds > 0) {
      timer = setInterval(() => void commands.refresh(), Math.max(2, seconds) * 1000);
    }
  };
  view.onDidChangeVisibility(() => {
    if (view.visible) {
      void commands.refresh();
    }
    schedule();
  });
  const updateBadge = () => {
    const running = model.running().length;
    view.badge = running ? { value: running, tooltip: `${running} running job(s)` } : undefined;
  };
  model.onDidChange(updateBadge);
  // `remoteDebug.attached`: the group actions' `when`; `remoteDebug.keptAliveJob`: Sync and Re-run's (the view's
  // button and the keybinding are there only while a job it can run again is)
  const contexts = new Map<string, boolean>();
  const setContext = (name: string, value: boolean) => {
    if (contexts.get(name) !== value) {
      contexts.set(name, value);
      void vscode.commands.executeCommand('setContext', name, value);
    }
  };
  const updateContext = () => {
    setContext('remoteDebug.attached', attacher!.activeJobs().length > 0);
    setContext('remoteDebug.keptAliveJob', model.running().some(isKeptAlive));
  };
  model.onDidChange(updateContext);
  updateContext();
  model.onDidChange(() => held.check(model.list().map((e) => e.info), (job) => attacher!.isAttached(job)));

  context.subscriptions.push(
    log,
    runOutput,
    attacher,
    runs,
    tree,
    view,
    ...commands.register(),
    ...outputs.register(),
    ...attachCommands.register(),
    // launch.json's {"type": "remote-debug", "job": …} runs the attach; the dynamic entries list the running jobs
    // and the job's own session acts on every rank (its Pause / Continue / Step Over / Stop)
    ...registerDebugType(attachCommands, attacher.parentGroup()),
    // Continue / Pause / Step Over / Detach All Ranks
    ...new GroupCommands(attacher, log).register(),
    ...warnIfUnsupported(model),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('remoteDebug')) {
        schedule();
        void commands.refresh();
      }
    }),
    { dispose: () => timer && clearInterval(timer) },
  );
  // the CLI version check and Install / Upgrade; AWS profile, region and listing problems; ask before ~/.ssh/config
  const cliSetup = new CliSetup({ cli, settings: () => readSettings(), log, refresh: () => commands.refresh() });
  context.subscriptions.push(
    ...cliSetup.register(),
    ...registerAwsCommands(commands.listing, () => commands.refresh()),
    new AwsStatusBar(commands.listing),
    trackListingContext(commands.listing),
    useSshConsent(commands.sshConsent),
  );
  void cliSetup.check();
  schedule();
  // the first listing says which of the jobs attached before a window reload still run: those are attached again
  void commands.refresh().then(() => attachCommands.restoreAfterReload());
  return { model, attacher, commands, runs, outputs };
}

export async function deactivate(): Promise<void> {
  // A re-run stops on SIGINT and keeps the nodes; the attach processes hold the tunnels: stop them
  // (SIGINT lets them close cleanly).
  // and the `logs --follow` processes of the output channels
  await Promise.all([runs?.stopAll(), attacher?.stopAll(), outputs?.stopAll()]);
}

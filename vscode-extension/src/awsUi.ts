// AWS in the UI, the AWS Toolkit way: a status bar item with the profile and region the CLI uses (a warning
// background while the listing reports a credentials problem), pickers that write remoteDebug.aws.profile /
// remoteDebug.aws.region, the listing problem's fix run in a terminal, and the context key the Jobs view's welcome
// content reads when the only thing listed is the problem.

import * as vscode from 'vscode';

import { AwsProfile, awsFilePaths, effectiveAws, EffectiveAws, hasAwsFiles, isRegionId, readProfiles, regionChoices } from './awsProfiles';
import { backendTitle, ListingProblem, ListingProblems } from './listingProblems';

/** The first listing problem's kind (e.g. `sso-expired`), or '' when the listing had none. */
export const LISTING_PROBLEM_CONTEXT = 'remoteDebug.listingProblem';

export interface AwsSettings {
  profile: string;
  region: string;
}

export function readAwsSettings(): AwsSettings {
  const c = vscode.workspace.getConfiguration('remoteDebug');
  return { profile: c.get<string>('aws.profile', '') ?? '', region: c.get<string>('aws.region', '') ?? '' };
}

/** Where the machine's AWS setup comes from: injectable so tests use their own files and environment. */
export interface AwsSources {
  env: () => NodeJS.ProcessEnv;
  profiles: () => AwsProfile[];
  hasFiles: () => boolean;
  settings: () => AwsSettings;
}

export const defaultSources: AwsSources = {
  env: () => process.env,
  profiles: () => readProfiles(),
  hasFiles: () => hasAwsFiles(),
  settings: readAwsSettings,
};

function kindLabel(kind: AwsProfile['kind']): string {
  switch (kind) {
    case 'sso':
      return vscode.l10n.t('IAM Identity Center (SSO)');
    case 'role':
      return vscode.l10n.t('assumes a role');
    case 'process':
      return vscode.l10n.t('credential process');
    case 'keys':
      return vscode.l10n.t('access keys');
    case 'other':
      return '';
  }
}

/** The status bar text: `AWS: dev · eu-west-1` (a warning icon instead of the cloud while there is a problem). */
export function statusText(aws: EffectiveAws, problem: boolean): string {
  const region = aws.region ?? vscode.l10n.t('no region');
  return `${problem ? '$(warning)' : '$(cloud)'} ${vscode.l10n.t('AWS: {0} · {1}', aws.profile, region)}`;
}

export function statusTooltip(aws: EffectiveAws, problem: ListingProblem | undefined): string {
  const from: Record<string, string> = {
    setting: vscode.l10n.t('from the remoteDebug settings'),
    environment: vscode.l10n.t('from the environment'),
    default: vscode.l10n.t('the default'),
    profile: vscode.l10n.t("the profile's"),
  };
  const lines = [
    vscode.l10n.t('SageMaker jobs are listed with AWS profile {0} ({1})', aws.profile, from[aws.profileFrom]),
    aws.region
      ? vscode.l10n.t('in region {0} ({1}).', aws.region, from[aws.regionFrom ?? 'default'])
      : vscode.l10n.t('with no region set: pick one.'),
  ];
  if (problem) {
    lines.push('', vscode.l10n.t('{0} jobs not listed: {1}', backendTitle(problem.backend), problem.message));
  }
  lines.push('', vscode.l10n.t('Click to pick a profile.'));
  return lines.join('\n');
}

/** The `AWS: <profile> · <region>` status bar item. */
export class AwsStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly listing: ListingProblems,
    private readonly sources: AwsSources = defaultSources,
  ) {
    this.item = vscode.window.createStatusBarItem('remoteDebug.aws', vscode.StatusBarAlignment.Left, 0);
    this.item.name = vscode.l10n.t('Remote Debug: AWS profile and region');
    this.item.command = 'remoteDebug.aws.pickProfile';
    this.disposables.push(
      this.item,
      listing.onDidChange(() => this.update()),
      vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration('remoteDebug.aws') && this.update()),
      // ~/.aws/config may have changed while the user was away (aws configure, an editor)
      vscode.window.onDidChangeWindowState((s) => s.focused && this.update()),
    );
    this.update();
  }

  update(): void {
    const settings = this.sources.settings();
    const env = this.sources.env();
    const problem = this.listing.credentialsProblem;
    const anyAwsProblem = this.listing.problems.some((p) => p.backend === 'sagemaker');
    // a user of local jobs only, with no AWS setup at all, gets no AWS item
    const relevant =
      settings.profile !== '' || settings.region !== '' || !!env.AWS_PROFILE || anyAwsProblem || this.sources.hasFiles();
    if (!relevant) {
      this.item.hide();
      return;
    }
    const aws = effectiveAws(settings, env, this.sources.profiles());
    this.item.text = statusText(aws, problem !== undefined);
    this.item.tooltip = statusTooltip(aws, problem);
    this.item.backgroundColor = problem ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    this.item.show();
  }

  dispose(): void {
    this.disposables.splice(0).forEach((d) => d.dispose());
  }
}

/** Keeps remoteDebug.listingProblem in step with the listing (only changes are sent, and never '' first). */
export function trackListingContext(listing: ListingProblems): vscode.Disposable {
  let current = '';
  const update = () => {
    const first = listing.credentialsProblem ?? listing.problems[0];
    const value = first?.problem ?? '';
    if (value !== current) {
      current = value;
      void vscode.commands.executeCommand('setContext', LISTING_PROBLEM_CONTEXT, value);
    }
  };
  update();
  return listing.onDidChange(update);
}

/** Save an AWS setting where it is set now: the workspace if it has its own value, else the user settings. */
async function saveSetting(key: 'aws.profile' | 'aws.region', value: string): Promise<void> {
  const c = vscode.workspace.getConfiguration('remoteDebug');
  const values = c.inspect<string>(key);
  const target = values?.workspaceValue !== undefined ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
  await c.update(key, value === '' ? undefined : value, target);
}

interface ProfileItem extends vscode.QuickPickItem {
  profile?: string; // '' clears the setting
  open?: string; // a file to open
}

export function profileItems(profiles: AwsProfile[], current: EffectiveAws, configFile: string): ProfileItem[] {
  const items: ProfileItem[] = profiles.map((p) => ({
    label: p.name,
    description: [
      p.name === current.profile ? vscode.l10n.t('current') : '',
      p.region ?? '',
      kindLabel(p.kind),
    ]
      .filter(Boolean)
      .join(' · '),
    profile: p.name,
  }));
  items.push(
    { label: '', kind: vscode.QuickPickItemKind.Separator },
    {
      label: vscode.l10n.t('Use the environment\'s profile'),
      description: vscode.l10n.t('AWS_PROFILE, else default'),
      profile: '',
    },
    { label: vscode.l10n.t('Open {0}', configFile), open: configFile },
  );
  return items;
}

/** Pick a profile from ~/.aws/config and ~/.aws/credentials; writes remoteDebug.aws.profile. */
export async function pickProfile(sources: AwsSources = defaultSources): Promise<string | undefined> {
  const profiles = sources.profiles();
  const files = awsFilePaths(sources.env());
  if (profiles.length === 0) {
    const configure = vscode.l10n.t('Run aws configure sso');
    const choice = await vscode.window.showWarningMessage(
      vscode.l10n.t('Remote Debug: no AWS profiles in {0} or {1}. Set one up with the AWS CLI first.', files.config, files.credentials),
      configure,
    );
    if (choice === configure) {
      runInShell('aws configure sso');
    }
    return undefined;
  }
  const current = effectiveAws(sources.settings(), sources.env(), profiles);
  const picked = await vscode.window.showQuickPick(profileItems(profiles, current, files.config), {
    placeHolder: vscode.l10n.t('AWS profile for SageMaker jobs (now: {0})', current.profile),
    matchOnDescription: true,
  });
  if (!picked) {
    return undefined;
  }
  if (picked.open) {
    await vscode.window.showTextDocument(vscode.Uri.file(picked.open));
    return undefined;
  }
  if (picked.profile === undefined) {
    return undefined;
  }
  await saveSetting('aws.profile', picked.profile);
  return picked.profile;
}

interface RegionItem extends vscode.QuickPickItem {
  region?: string; // '' clears the setting
  other?: true;
}

export function regionItems(profileRegion: string | undefined, current: string | undefined): RegionItem[] {
  const items: RegionItem[] = regionChoices(profileRegion).map((r) => ({
    label: r.id,
    description: [r.name, r.fromProfile ? vscode.l10n.t("the profile's region") : '', r.id === current ? vscode.l10n.t('current') : '']
      .filter(Boolean)
      .join(' · '),
    region: r.id,
  }));
  items.push(
    { label: '', kind: vscode.QuickPickItemKind.Separator },
    { label: vscode.l10n.t("Use the profile's or the environment's region"), region: '' },
    { label: vscode.l10n.t('Other region…'), other: true },
  );
  return items;
}

/** Pick a region (the profile's first, then the SageMaker regions); writes remoteDebug.aws.region. */
export async function pickRegion(sources: AwsSources = defaultSources): Promise<string | undefined> {
  const profiles = sources.profiles();
  const current = effectiveAws(sources.settings(), sources.env(), profiles);
  const profileRegion = profiles.find((p) => p.name === current.profile)?.region;
  const picked = await vscode.window.showQuickPick(regionItems(profileRegion, current.region), {
    placeHolder: vscode.l10n.t('AWS region for SageMaker jobs (profile {0})', current.profile),
    matchOnDescription: true,
  });
  if (!picked) {
    return undefined;
  }
  let region = picked.region;
  if (picked.other) {
    region = (
      await vscode.window.showInputBox({
        prompt: vscode.l10n.t('AWS region id, e.g. eu-west-1'),
        validateInput: (v) => (isRegionId(v) ? undefined : vscode.l10n.t('a region id such as eu-west-1 or us-gov-west-1')),
      })
    )?.trim();
  }
  if (region === undefined) {
    return undefined;
  }
  await saveSetting('aws.region', region);
  return region;
}

/** A shell terminal running `commandLine` as if typed (sign-in commands are interactive: browser, device code). */
export function runInShell(commandLine: string, env?: Record<string, string>): vscode.Terminal {
  const terminal = vscode.window.createTerminal({ name: vscode.l10n.t('Remote Debug: AWS'), env });
  terminal.show();
  terminal.sendText(commandLine);
  return terminal;
}

/** The commands behind the warning node, the status bar item and the welcome content. */
export function registerAwsCommands(listing: ListingProblems, refresh: () => Promise<void>, sources: AwsSources = defaultSources): vscode.Disposable[] {
  const fixTerminals = new Set<vscode.Terminal>();
  const runFix = async (fix?: unknown) => {
    const problem = listing.credentialsProblem ?? listing.problems[0];
    const commandLine = typeof fix === 'string' && fix.trim() ? fix.trim() : problem?.fix;
    if (!commandLine) {
      // nothing the CLI knows to run: the pickers are what is left
      const pick = vscode.l10n.t('Pick AWS Profile…');
      const choice = await vscode.window.showInformationMessage(
        problem
          ? vscode.l10n.t('Remote Debug: {0}. Pick another profile or region, or fix it with the AWS CLI.', problem.message)
          : vscode.l10n.t('Remote Debug: the job listing reports no AWS problem right now.'),
        pick,
      );
      if (choice === pick) {
        await pickProfile(sources);
      }
      return;
    }
    const settings = sources.settings();
    // the same profile and region the CLI ran with (the fix usually names the profile already)
    const env = Object.fromEntries(
      Object.entries({ AWS_PROFILE: settings.profile, AWS_REGION: settings.region }).filter(([, v]) => v !== ''),
    );
    fixTerminals.add(runInShell(commandLine, env));
  };
  return [
    vscode.commands.registerCommand('remoteDebug.aws.pickProfile', () => pickProfile(sources)),
    vscode.commands.registerCommand('remoteDebug.aws.pickRegion', () => pickRegion(sources)),
    vscode.commands.registerCommand('remoteDebug.aws.runFix', runFix),
    // signed in (or gave up) and closed the terminal: list again, so the warning goes as soon as it can
    vscode.window.onDidCloseTerminal((t) => {
      if (fixTerminals.delete(t)) {
        void refresh();
      }
    }),
  ];
}

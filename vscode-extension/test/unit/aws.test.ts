// AWS: the config parser, listing problems in the Jobs view, the status bar item, the pickers, the fix terminal.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import * as vscode from 'vscode';

import { awsFilePaths, effectiveAws, isRegionId, listProfiles, parseIni, readProfiles, regionChoices, SAGEMAKER_REGIONS } from '../../src/awsProfiles';
import { AwsSources, AwsStatusBar, pickProfile, pickRegion, readAwsSettings, registerAwsCommands, trackListingContext } from '../../src/awsUi';
import { ListingProblem, ListingProblems, parseListingStderr, parseProblemLine } from '../../src/listingProblems';
import { JobsModel } from '../../src/model';
import { JobsTreeProvider, problemLabel, TreeNode } from '../../src/tree';
import { commandsHarness, fakeScheduler, jobJson, tempDir } from './helpers';
import { mock } from './vscode-mock';

const CONFIG = `
# a comment
[default]
region = us-east-1
output = json

[profile dev]
sso_session = corp
sso_account_id = 111122223333
sso_role_name = MLEngineer
region = eu-west-1

[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = us-east-1

[profile  ml-role ]
role_arn = arn:aws:iam::111122223333:role/ml
source_profile = default
s3 =
  max_concurrent_requests = 20
  region = not-a-key

[services local]
sagemaker =
  endpoint_url = http://localhost:4566

[orphan]
region = ap-south-1
; semicolon comment
[profile legacy-sso]
sso_start_url = https://old.awsapps.com/start
`;

const CREDENTIALS = `[default]
aws_access_key_id = AKIAEXAMPLE
aws_secret_access_key = secret

[ci]
aws_access_key_id = AKIAOTHER
aws_secret_access_key = other
region = us-west-2
`;

const SSO_EXPIRED: ListingProblem = {
  backend: 'sagemaker',
  problem: 'sso-expired',
  message: 'AWS SSO token expired',
  fix: 'aws sso login --profile dev',
  profile: 'dev',
  region: 'eu-west-1',
};

const problemLine = (p: Partial<ListingProblem> & { unlisted?: string } = {}) =>
  JSON.stringify({ unlisted: 'sagemaker', problem: 'sso-expired', message: 'AWS SSO token expired', fix: 'aws sso login --profile dev', profile: 'dev', region: 'eu-west-1', ...p });

describe('~/.aws/config and ~/.aws/credentials', () => {
  test('the INI parser: sections, lower-cased keys, comments, nested blocks are not keys', () => {
    const sections = parseIni(CONFIG);
    assert.deepEqual(sections.map((s) => s.name), ['default', 'profile dev', 'sso-session corp', 'profile  ml-role', 'services local', 'orphan', 'profile legacy-sso']);
    const role = sections.find((s) => s.name === 'profile  ml-role')!;
    assert.deepEqual(role.values, { role_arn: 'arn:aws:iam::111122223333:role/ml', source_profile: 'default', s3: '' }, 'the nested region is no key');
    assert.deepEqual(parseIni('Region = x\n[a]\nREGION=eu-west-1'), [{ name: 'a', values: { region: 'eu-west-1' } }], 'keys before a section are dropped');
  });

  test('profiles: [default] and [profile x] from config, every section of credentials; sso-session, services, bare names are not profiles', () => {
    const profiles = listProfiles(CONFIG, CREDENTIALS);
    assert.deepEqual(
      profiles.map((p) => [p.name, p.region, p.kind, p.sources.join('+')]),
      [
        ['default', 'us-east-1', 'keys', 'config+credentials'],
        ['ci', 'us-west-2', 'keys', 'credentials'],
        ['dev', 'eu-west-1', 'sso', 'config'],
        ['legacy-sso', undefined, 'sso', 'config'],
        ['ml-role', undefined, 'role', 'config'],
      ],
    );
    assert.equal(profiles.find((p) => p.name === 'dev')?.ssoSession, 'corp');
    assert.ok(!profiles.some((p) => p.name === 'corp' || p.name === 'orphan' || p.name === 'local'));
    assert.deepEqual(listProfiles('', ''), []);
  });

  test('AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE move the files', () => {
    assert.deepEqual(awsFilePaths({}, '/home/u'), { config: '/home/u/.aws/config', credentials: '/home/u/.aws/credentials' });
    assert.deepEqual(awsFilePaths({ AWS_CONFIG_FILE: '~/cfg/aws', AWS_SHARED_CREDENTIALS_FILE: '/etc/creds' }, '/home/u'), {
      config: '/home/u/cfg/aws',
      credentials: '/etc/creds',
    });
    const dir = tempDir('rd-aws');
    fs.writeFileSync(path.join(dir, 'config'), '[profile from-env]\nregion = ca-central-1\n');
    assert.deepEqual(
      readProfiles({ AWS_CONFIG_FILE: path.join(dir, 'config'), AWS_SHARED_CREDENTIALS_FILE: path.join(dir, 'missing') }, dir).map((p) => p.name),
      ['from-env'],
    );
  });

  test("regions: the profile's first, then the SageMaker regions, no duplicate", () => {
    const ids = regionChoices('eu-west-1').map((r) => r.id);
    assert.equal(ids[0], 'eu-west-1');
    assert.equal(ids.filter((id) => id === 'eu-west-1').length, 1);
    assert.equal(ids.length, SAGEMAKER_REGIONS.length);
    assert.deepEqual(regionChoices('us-gov-west-1').slice(0, 2).map((r) => [r.id, r.fromProfile]), [['us-gov-west-1', true], ['us-east-1', false]]);
    assert.equal(regionChoices(undefined)[0].id, 'us-east-1');
    assert.ok(isRegionId('ap-southeast-4') && isRegionId('us-gov-west-1') && !isRegionId('Europe') && !isRegionId('eu-west'));
  });

  test('effective profile and region: settings, then environment, then default and the profile region', () => {
    const profiles = listProfiles(CONFIG, CREDENTIALS);
    assert.deepEqual(effectiveAws({ profile: 'dev', region: '' }, { AWS_REGION: 'us-west-2' }, profiles), {
      profile: 'dev', profileFrom: 'setting', region: 'us-west-2', regionFrom: 'environment',
    });
    assert.deepEqual(effectiveAws({ profile: '', region: '' }, { AWS_PROFILE: 'dev' }, profiles), {
      profile: 'dev', profileFrom: 'environment', region: 'eu-west-1', regionFrom: 'profile',
    });
    assert.deepEqual(effectiveAws({ profile: '', region: 'sa-east-1' }, {}, profiles), {
      profile: 'default', profileFrom: 'default', region: 'sa-east-1', regionFrom: 'setting',
    });
    assert.equal(effectiveAws({ profile: 'ml-role', region: '' }, {}, profiles).region, undefined);
  });
});

describe('why jobs were not listed', () => {
  test("the CLI's JSON lines become problems; plain lines of older CLIs stay lines", () => {
    const { problems, otherLines } = parseListingStderr(
      `${problemLine()}\nsagemaker jobs not listed: no AWS credentials\n\n${problemLine({ problem: 'weird' as never, fix: null as never, profile: null as never })}\n`,
    );
    assert.deepEqual(problems[0], SSO_EXPIRED);
    assert.deepEqual([problems[1].problem, problems[1].fix, problems[1].profile], ['error', undefined, undefined], 'unknown kinds: error');
    assert.deepEqual(otherLines, ['sagemaker jobs not listed: no AWS credentials']);
    assert.equal(parseProblemLine('{"event": "x"}'), undefined);
    assert.equal(parseProblemLine('{not json'), undefined);
  });

  test('the warning label says what and for which profile', () => {
    assert.equal(problemLabel(SSO_EXPIRED), 'SageMaker jobs not listed: AWS SSO token expired (profile dev)');
    assert.equal(problemLabel({ ...SSO_EXPIRED, message: 'profile dev not found' }), 'SageMaker jobs not listed: profile dev not found');
  });
});

function render(p: JobsTreeProvider, node?: TreeNode): Array<{ label: string; icon?: string; command?: unknown; children: unknown[] }> {
  return p.getChildren(node).map((child) => {
    const item = p.getTreeItem(child) as vscode.TreeItem & { iconPath?: { id: string } };
    return { label: String(item.label), icon: item.iconPath?.id, command: item.command, children: render(p, child) };
  });
}

describe('the Jobs view and the listing problems', () => {
  beforeEach(() => mock.reset());

  test('with jobs: a warning node on top, its fix, the pickers and Refresh under it', () => {
    const model = new JobsModel();
    const listing = new ListingProblems();
    const clock = fakeScheduler();
    const tree = new JobsTreeProvider(model, clock, 80, listing);
    let fired = 0;
    tree.onDidChangeTreeData(() => fired++);
    model.setJobs([jobJson()]);
    listing.set([SSO_EXPIRED]);
    clock.advance(100);
    assert.equal(fired, 1, 'a problem refreshes the view (batched with the jobs)');
    const rows = render(tree);
    assert.deepEqual(rows.map((r) => r.label), ['SageMaker jobs not listed: AWS SSO token expired (profile dev)', 'local-1']);
    assert.equal(rows[0].icon, 'warning');
    const actions = rows[0].children as Array<{ label: string; command: { command: string; arguments?: unknown[] } }>;
    assert.deepEqual(actions.map((a) => [a.label, a.command.command, a.command.arguments]), [
      ['Run aws sso login --profile dev', 'remoteDebug.aws.runFix', ['aws sso login --profile dev']],
      ['Pick AWS Profile…', 'remoteDebug.aws.pickProfile', undefined],
      ['Pick AWS Region…', 'remoteDebug.aws.pickRegion', undefined],
      ['Refresh', 'remoteDebug.refresh', undefined],
    ]);
    const item = tree.getTreeItem(tree.getChildren()[0]);
    assert.equal(item.collapsibleState, vscode.TreeItemCollapsibleState.Expanded);
    assert.equal(item.command, undefined, 'clicking the warning itself runs nothing');

    // an unreachable endpoint is no credentials problem: no pickers, no fix
    listing.set([{ ...SSO_EXPIRED, problem: 'unreachable', fix: undefined, message: 'cannot reach sagemaker.eu-west-1' }]);
    assert.deepEqual((render(tree)[0].children as Array<{ label: string }>).map((a) => a.label), ['Refresh']);
    tree.dispose();
  });

  test('without jobs: the tree stays empty so the welcome content (which names the problem) shows', () => {
    const model = new JobsModel();
    const listing = new ListingProblems();
    const tree = new JobsTreeProvider(model, fakeScheduler(), 80, listing);
    model.setJobs([]);
    listing.set([SSO_EXPIRED]);
    assert.deepEqual(render(tree), []);
  });

  test('the CLI not installed: the error view offers to install it', () => {
    const model = new JobsModel();
    const tree = new JobsTreeProvider(model, fakeScheduler());
    model.setError('cannot run remote-debug: not found. Install the CLI ...');
    assert.deepEqual(render(tree).map((r) => r.label), [
      'Cannot list jobs',
      'Set the remote-debug CLI path…',
      'Install the remote-debug CLI (pip install remote-debug-training)…',
    ]);
    model.setError('AWS credentials expired');
    assert.equal(render(tree).length, 2, 'other errors: no install offer');
  });

  test('Refresh: a structured stderr line becomes the problem, and goes when the listing works again', async () => {
    const { run, commands, log } = commandsHarness({ jobs: { stdout: JSON.stringify([jobJson()]), stderr: `${problemLine()}\n` } });
    await run('remoteDebug.refresh');
    assert.deepEqual(commands.listing.problems, [SSO_EXPIRED]);
    assert.deepEqual(log, ['jobs: sagemaker not listed (sso-expired): AWS SSO token expired (fix: aws sso login --profile dev)']);
    await run('remoteDebug.refresh');
    assert.equal(log.length, 1, 'the same problem is logged once');

    mock.reset();
    const ok = commandsHarness({ jobs: { stdout: '[]', stderr: 'sagemaker jobs not listed: no AWS credentials\n' } });
    await ok.run('remoteDebug.refresh');
    assert.deepEqual(ok.commands.listing.problems, [], 'an older CLI: no structured problem');
    assert.deepEqual(ok.log, ['jobs: sagemaker jobs not listed: no AWS credentials'], 'but its line is logged');
  });

  test('the welcome content context key follows the first credentials problem; never "" first', () => {
    const listing = new ListingProblems();
    const sub = trackListingContext(listing);
    const contexts = () => mock.executed.filter((e) => e.command === 'setContext').map((e) => e.args);
    assert.deepEqual(contexts(), []);
    listing.set([{ ...SSO_EXPIRED, problem: 'unreachable' }, { ...SSO_EXPIRED, backend: 'other' }]);
    listing.set([{ ...SSO_EXPIRED, problem: 'unreachable' }, { ...SSO_EXPIRED, backend: 'other' }]);
    listing.set([]);
    assert.deepEqual(contexts(), [['remoteDebug.listingProblem', 'sso-expired'], ['remoteDebug.listingProblem', '']]);
    sub.dispose();
  });
});

function sources(over: Partial<AwsSources> = {}): AwsSources {
  return {
    env: () => ({}),
    profiles: () => listProfiles(CONFIG, CREDENTIALS),
    hasFiles: () => true,
    settings: readAwsSettings,
    ...over,
  };
}

describe('the AWS status bar item', () => {
  beforeEach(() => mock.reset());

  test('AWS: <profile> · <region>, a warning background while the listing reports a credentials problem; click picks a profile', () => {
    mock.config['remoteDebug.aws.profile'] = 'dev';
    const listing = new ListingProblems();
    const bar = new AwsStatusBar(listing, sources());
    const item = mock.statusBarItems[0];
    assert.equal(item.text, '$(cloud) AWS: dev · eu-west-1');
    assert.equal(item.visible, true);
    assert.equal(item.command, 'remoteDebug.aws.pickProfile');
    assert.equal(item.backgroundColor, undefined);
    assert.match(item.tooltip, /profile dev \(from the remoteDebug settings\)[\s\S]*region eu-west-1 \(the profile's\)/);

    listing.set([SSO_EXPIRED]);
    assert.equal(item.text, '$(warning) AWS: dev · eu-west-1');
    assert.equal(item.backgroundColor?.id, 'statusBarItem.warningBackground');
    assert.match(item.tooltip, /SageMaker jobs not listed: AWS SSO token expired/);

    listing.set([{ ...SSO_EXPIRED, problem: 'unreachable' }]);
    assert.equal(item.backgroundColor, undefined, 'unreachable is no credentials problem');

    mock.config['remoteDebug.aws.region'] = 'us-west-2';
    mock.changeConfig('remoteDebug.aws.region');
    assert.equal(item.text, '$(cloud) AWS: dev · us-west-2');
    bar.dispose();
  });

  test('no region anywhere says so; no AWS setup at all hides the item', () => {
    mock.config['remoteDebug.aws.profile'] = 'ml-role';
    const bar = new AwsStatusBar(new ListingProblems(), sources());
    assert.equal(mock.statusBarItems[0].text, '$(cloud) AWS: ml-role · no region');
    bar.dispose();

    mock.reset();
    const none = new AwsStatusBar(new ListingProblems(), sources({ hasFiles: () => false, profiles: () => [] }));
    assert.equal(mock.statusBarItems[0].visible, false);
    none.dispose();
  });
});

describe('the AWS pickers and the fix', () => {
  beforeEach(() => mock.reset());

  test('Pick AWS Profile… lists the profiles and writes remoteDebug.aws.profile', async () => {
    mock.quickPicks.push((items) => items.find((i: { label: string }) => i.label === 'dev'));
    assert.equal(await pickProfile(sources()), 'dev');
    const items = mock.calls.find((c) => c.fn === 'showQuickPick')!.args[0] as Array<{ label: string; description?: string }>;
    assert.deepEqual(items.slice(0, 5).map((i) => i.label), ['default', 'ci', 'dev', 'legacy-sso', 'ml-role']);
    assert.equal(items[0].description, 'current · us-east-1 · access keys');
    assert.equal(items[2].description, 'eu-west-1 · IAM Identity Center (SSO)');
    assert.deepEqual(mock.configUpdates.map((u) => [u.section, u.key, u.value, u.target]), [['remoteDebug', 'aws.profile', 'dev', vscode.ConfigurationTarget.Global]]);
  });

  test("the environment's profile clears the setting; a workspace value is updated where it is", async () => {
    mock.workspaceConfig['remoteDebug.aws.profile'] = 'ci';
    mock.quickPicks.push((items) => items.find((i: { profile?: string }) => i.profile === ''));
    await pickProfile(sources());
    assert.deepEqual(mock.configUpdates.map((u) => [u.key, u.value, u.target]), [['aws.profile', undefined, vscode.ConfigurationTarget.Workspace]]);
  });

  test('no profiles at all: says where it looked and offers aws configure sso in a terminal', async () => {
    mock.messageAnswers.push('Run aws configure sso');
    assert.equal(await pickProfile(sources({ profiles: () => [], env: () => ({ AWS_CONFIG_FILE: '/x/config' }) })), undefined);
    assert.match(mock.messages('showWarningMessage')[0], /no AWS profiles in \/x\/config or/);
    assert.deepEqual(mock.terminals.map((t) => t.sent), [['aws configure sso']]);
  });

  test("Pick AWS Region… puts the profile's region first and writes remoteDebug.aws.region; Other… validates", async () => {
    mock.config['remoteDebug.aws.profile'] = 'dev';
    mock.quickPicks.push((items) => items[0]);
    assert.equal(await pickRegion(sources()), 'eu-west-1');
    const items = mock.calls.find((c) => c.fn === 'showQuickPick')!.args[0] as Array<{ label: string; description?: string }>;
    assert.match(items[0].description!, /Europe \(Ireland\) · the profile's region · current/);
    mock.quickPicks.push((list) => list.find((i: { other?: boolean }) => i.other));
    mock.inputBoxes.push(' ap-southeast-7 ');
    assert.equal(await pickRegion(sources()), 'ap-southeast-7');
    const validate = mock.calls.filter((c) => c.fn === 'showInputBox')[0].args[0].validateInput;
    assert.match(validate('Ireland'), /a region id such as eu-west-1/);
    assert.equal(validate('eu-west-1'), undefined);
    assert.deepEqual(mock.configUpdates.map((u) => [u.key, u.value]), [['aws.region', 'eu-west-1'], ['aws.region', 'ap-southeast-7']]);
  });

  test("the fix runs in a shell terminal with the settings' profile; closing that terminal lists the jobs again", async () => {
    mock.config['remoteDebug.aws.profile'] = 'dev';
    const listing = new ListingProblems();
    listing.set([SSO_EXPIRED]);
    let refreshed = 0;
    const disposables = registerAwsCommands(listing, async () => void refreshed++, sources());
    await mock.commands.get('remoteDebug.aws.runFix')!(); // the welcome content's button: no argument
    assert.deepEqual(mock.terminals.map((t) => [t.sent, t.options.env]), [[['aws sso login --profile dev'], { AWS_PROFILE: 'dev' }]]);
    mock.closeTerminal({ name: 'someone else' });
    assert.equal(refreshed, 0);
    mock.closeTerminal(mock.terminals[0], 0);
    assert.equal(refreshed, 1);

    listing.set([{ ...SSO_EXPIRED, problem: 'no-region', fix: undefined }]);
    mock.messageAnswers.push(undefined);
    await mock.commands.get('remoteDebug.aws.runFix')!();
    assert.match(mock.messages('showInformationMessage')[0], /AWS SSO token expired\. Pick another profile or region/);
    assert.equal(mock.terminals.length, 1, 'nothing to run');
    disposables.forEach((d) => d.dispose());
  });
});

// package.json as the Marketplace and VS Code read it: trust, remote, icons, walkthrough, localised strings.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, describe, test } from 'node:test';

import { CliSetup } from '../../src/cliSetup';
import { readSettings } from '../../src/commands';
import { RESTRICTED_SETTINGS, trustedValue } from '../../src/trust';
import { fakeCli } from './helpers';
import { mock } from './vscode-mock';

const root = path.resolve(__dirname, '../../..');
const read = (f: string) => fs.readFileSync(path.join(root, f), 'utf8');
const manifest = JSON.parse(read('package.json'));
const nls: Record<string, string> = fs.existsSync(path.join(root, 'package.nls.json')) ? JSON.parse(read('package.nls.json')) : {};

/** A manifest string as VS Code shows it: `%key%` looked up in package.nls.json. */
function shown(value: string): string {
  const m = /^%(.+)%$/.exec(value);
  return m ? nls[m[1]] : value;
}

describe('package.json: workspace trust and remote windows', () => {
  test('runs on the workspace side; limited in Restricted Mode; no virtual workspaces', () => {
    assert.deepEqual(manifest.extensionKind, ['workspace']);
    const trust = manifest.capabilities.untrustedWorkspaces;
    assert.equal(trust.supported, 'limited');
    assert.ok(shown(trust.description).length > 20);
    assert.deepEqual(trust.restrictedConfigurations, RESTRICTED_SETTINGS.map((k) => `remoteDebug.${k}`));
    for (const key of trust.restrictedConfigurations) {
      assert.ok(manifest.contributes.configuration.properties[key], `${key} is a contributed setting`);
    }
    assert.equal(manifest.capabilities.virtualWorkspaces.supported, false);
    assert.ok(shown(manifest.capabilities.virtualWorkspaces.description));
  });
});

describe('Restricted Mode: executables only from user settings', () => {
  beforeEach(() => mock.reset());

  test("a workspace's cliPath / pythonPath are ignored until the workspace is trusted", () => {
    mock.config['remoteDebug.cliPath'] = '/usr/local/bin/remote-debug';
    mock.workspaceConfig['remoteDebug.cliPath'] = './evil/remote-debug';
    mock.workspaceConfig['remoteDebug.pythonPath'] = './evil/python';
    mock.trusted = false;
    assert.deepEqual([readSettings().cliPath, readSettings().pythonPath], ['/usr/local/bin/remote-debug', '']);
    mock.trusted = true;
    assert.deepEqual([readSettings().cliPath, readSettings().pythonPath], ['./evil/remote-debug', './evil/python']);
  });

  test('no user value: the default, never the workspace one', () => {
    assert.equal(trustedValue({ workspaceValue: '/ws/x', defaultValue: 'remote-debug' }, '/ws/x', 'fallback', false), 'remote-debug');
    assert.equal(trustedValue({ workspaceValue: '/ws/x' }, '/ws/x', 'fallback', false), 'fallback');
    assert.equal(trustedValue(undefined, '/ws/x', 'fallback', true), '/ws/x');
  });

  test('the CLI check says in the log which workspace setting it ignores', async () => {
    mock.workspaceConfig['remoteDebug.pythonPath'] = './evil/python';
    mock.trusted = false;
    const { cli } = fakeCli({ version: { stdout: '{"version": "0.1.0"}' } });
    const log: string[] = [];
    const setup = new CliSetup({ cli, settings: readSettings, log: { appendLine: (l) => log.push(l), show: () => undefined }, refresh: async () => undefined });
    await setup.check();
    assert.ok(log.some((l) => /Restricted Mode: ignoring the workspace setting remoteDebug\.pythonPath \(\.\/evil\/python\)/.test(l)), log.join('\n'));
  });
});

describe('package.json: Marketplace', () => {
  test('icon: a 128x128 PNG; repository, bugs, homepage; LICENSE and CHANGELOG ship', () => {
    const png = fs.readFileSync(path.join(root, manifest.icon));
    assert.equal(png.subarray(1, 4).toString(), 'PNG');
    assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [128, 128]);
    assert.match(manifest.repository.url, /^https:\/\/github\.com\//);
    assert.match(manifest.bugs.url, /\/issues$/);
    assert.match(manifest.homepage, /^https:\/\//);
    assert.match(read('LICENSE'), /Apache License\s+Version 2\.0/);
    assert.match(read('CHANGELOG.md'), /^# Changelog/);
    const ignore = read('.vscodeignore');
    for (const f of ['!LICENSE', '!CHANGELOG.md', '!package.nls.json', '!media/**']) {
      assert.ok(ignore.includes(f), `${f} is packaged`);
    }
    assert.doesNotMatch(manifest.scripts.package, /--skip-license|--allow-missing-repository/);
  });

  test('its own activity bar icon: a 24x24 monochrome SVG in currentColor', () => {
    const container = manifest.contributes.viewsContainers.activitybar[0];
    assert.match(container.icon, /^media\/.+\.svg$/);
    const svg = read(container.icon);
    assert.match(svg, /width="24" height="24" viewBox="0 0 24 24"/);
    assert.ok(svg.includes('currentColor'));
    assert.doesNotMatch(svg, /#[0-9a-f]{3,6}\b/i, 'no fixed colours');
  });

  test('walkthrough: install, launch, attach, breakpoint, Remote-SSH; each step completes on an event, its media ships', () => {
    const [walkthrough] = manifest.contributes.walkthroughs;
    assert.equal(shown(walkthrough.title), 'Attach to your first job');
    assert.deepEqual(walkthrough.steps.map((s: { id: string }) => s.id), ['installCli', 'launchLocalJob', 'attachAllRanks', 'setBreakpoint', 'openRemoteSsh']);
    const ours = new Set(manifest.contributes.commands.map((c: { command: string }) => c.command));
    for (const step of walkthrough.steps) {
      assert.ok(step.completionEvents.length > 0, step.id);
      for (const event of step.completionEvents as string[]) {
        assert.match(event, /^(onCommand|onContext):/);
        const [kind, what] = event.split(':');
        if (kind === 'onCommand' && what.startsWith('remoteDebug.')) {
          assert.ok(ours.has(what), `${what} is contributed`);
        }
      }
      assert.ok(fs.existsSync(path.join(root, step.media.markdown)), step.media.markdown);
    }
    assert.deepEqual(walkthrough.steps[0].completionEvents, ['onContext:remoteDebug.cliReady'], 'done when a supported CLI answers');
  });

  test('welcome content: "No debuggable jobs yet" only without a listing problem; each problem kind has its own text', () => {
    const welcome = manifest.contributes.viewsWelcome as Array<{ when?: string; contents: string }>;
    assert.equal(welcome.find((w) => /No debuggable jobs yet/.test(shown(w.contents)))?.when, '!remoteDebug.listingProblem');
    for (const kind of ['sso-expired', 'no-credentials', 'profile-not-found', 'no-region', 'access-denied', 'unreachable', 'error']) {
      const entry = welcome.find((w) => w.when?.includes(`remoteDebug.listingProblem == ${kind}`));
      assert.ok(entry, kind);
      assert.match(shown(entry.contents), /SageMaker jobs (are not|could not be) listed/);
    }
    const sso = shown(welcome.find((w) => w.when === 'remoteDebug.listingProblem == sso-expired')!.contents);
    assert.match(sso, /\(command:remoteDebug\.aws\.runFix\)/);
    assert.match(sso, /\(command:remoteDebug\.aws\.pickProfile\)/);
    assert.match(sso, /\(command:remoteDebug\.aws\.pickRegion\)/);
  });

  test('every %key% in package.json is in package.nls.json, and every nls key is used', () => {
    const text = read('package.json');
    const used = new Set([...text.matchAll(/"%([^%"]+)%"/g)].map((m) => m[1]));
    for (const key of used) {
      assert.ok(typeof nls[key] === 'string' && nls[key] !== '', `${key} has a text`);
    }
    for (const key of Object.keys(nls)) {
      assert.ok(used.has(key), `${key} is used`);
    }
  });

  test('the install name is remote-debug-training everywhere the user reads it', () => {
    const src = path.join(root, 'src');
    const files = [
      'README.md',
      'package.json',
      'package.nls.json',
      ...(fs.readdirSync(src, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts')).map((f) => path.join('src', f)),
    ].filter((f) => fs.existsSync(path.join(root, f)));
    for (const f of files) {
      const bad = read(f).match(/pip install (-U |--upgrade )?['"]?remote-debug(?!-training)\b/);
      assert.equal(bad, null, `${f}: ${bad?.[0]}`);
    }
  });
});

// Shared test helpers: a scripted stand-in CLI and sample CLI output.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { Cli } from '../../src/cli';
import { JobInfo } from '../../src/events';

// bundled tests run from out/test/unit/; the fixture stays in the source tree
export const FAKE_CLI = path.resolve(__dirname, '../../../test/unit/fixtures/fake-remote-debug.js');

const made: string[] = [];
process.on('exit', () => made.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

/** A fresh temporary directory, removed when the test process exits. */
export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  made.push(dir);
  return dir;
}

export interface ScenarioStep {
  stdout?: string;
  stderr?: string;
  exit?: number;
  lines?: Array<{ line: string; after?: number }>;
  hold?: boolean;
}

export function fakeCli(scenario: Record<string, ScenarioStep>): { cli: Cli; invocations: () => Array<{ args: string[]; cwd: string }> } {
  fs.chmodSync(FAKE_CLI, 0o755); // in case a checkout lost the executable bit
  const dir = tempDir('rd-unit');
  const file = path.join(dir, 'scenario.json');
  const log = path.join(dir, 'log.jsonl');
  fs.writeFileSync(file, JSON.stringify(scenario));
  process.env.FAKE_RD_SCENARIO = file;
  process.env.FAKE_RD_LOG = log;
  const cli = new Cli(() => ({ cliPath: FAKE_CLI, pythonPath: '' }));
  return {
    cli,
    invocations: () =>
      fs.existsSync(log)
        ? fs
            .readFileSync(log, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [],
  };
}

export function jobJson(overrides: Partial<JobInfo> = {}): JobInfo {
  return {
    name: 'local-1',
    backend: 'local',
    status: 'InProgress',
    secondary_status: 'Training',
    nodes: ['algo-1'],
    nproc_per_node: 2,
    created: 1000,
    ended: null,
    exit_code: null,
    failure_reason: null,
    debuggable: true,
    source_dir: '/ws',
    why_not_debuggable: null,
    status_message: '',
    provisioning: false,
    code_dirs: { 'algo-1': '/jobs/local-1/nodes/algo-1/code' },
    logs: {},
    machine: null,
    sagemaker: null,
    held_ranks: [],
    ...overrides,
  };
}

/** The JSON lines `remote-debug attach local-1 --json` prints for a 2-rank job. */
export function attachLines(job = 'local-1', ranks = [0, 1]): Array<{ line: string; after?: number }> {
  const ev = (o: object, after?: number) => ({ line: JSON.stringify(o), after });
  return [
    ev({ event: 'waiting', what: 'nodes', nodes: ['algo-1'] }),
    ev({ event: 'ssh-config', aliases: [`algo-1.${job}`], config: '/h/.remote-debug/ssh/config' }, 10),
    ev({ event: 'node-connected', node: 'algo-1', alias: `algo-1.${job}` }, 10),
    ...ranks.map((rank) =>
      ev(
        {
          event: 'rank-ready',
          v: 1,
          rank,
          node: 'algo-1',
          local_port: 40000 + rank,
          remote_port: 50000 + rank,
          state: 'waiting',
          ide: 'vscode',
          code_dir: '/jobs/local-1/nodes/algo-1/code',
        },
        10,
      ),
    ),
    ev({ event: 'launch-json', path: '/ws/.vscode/launch.json', compound: `remote-debug: ${job} all ranks`, configurations: [] }),
    ev({ event: 'ready', ranks }),
  ];
}

export async function until<T>(what: string, fn: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Shared test helpers: a scripted stand-in CLI and sample CLI output.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import * as vscode from 'vscode';

import { AttachManager, AttachRequest } from '../../src/attach';
import { Cli } from '../../src/cli';
import { Commands } from '../../src/commands';
import { JobInfo } from '../../src/events';
import { JobsModel } from '../../src/model';
import { RunManager } from '../../src/rerun';
import { SshConfigConsent } from '../../src/sshConsent';
import { mock } from './vscode-mock';

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
  onInterrupt?: string[];
}

export interface Invocation {
  args: string[];
  cwd: string;
}

/**
 * The stand-in CLI for `scenario`; `invocations()`: every run's argv and cwd, in order; `events()`: the same with
 * the interrupts in between (`signal: 'SIGINT'`: that run got Ctrl-C).
 */
export function fakeCli(scenario: Record<string, ScenarioStep>): {
  cli: Cli;
  invocations: () => Invocation[];
  events: () => Array<Invocation & { signal?: string }>;
} {
  fs.chmodSync(FAKE_CLI, 0o755); // in case a checkout lost the executable bit
  const dir = tempDir('rd-unit');
  const file = path.join(dir, 'scenario.json');
  const log = path.join(dir, 'log.jsonl');
  fs.writeFileSync(file, JSON.stringify(scenario));
  process.env.FAKE_RD_SCENARIO = file;
  process.env.FAKE_RD_LOG = log;
  const cli = new Cli(() => ({ cliPath: FAKE_CLI, pythonPath: '' }));
  const events = (): Array<Invocation & { signal?: string }> =>
    fs.existsSync(log)
      ? fs
          .readFileSync(log, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];
  return { cli, events, invocations: () => events().filter((e) => !e.signal) };
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
    kept_alive_seconds_left: null,
    run: 0,
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

/**
 * The commands over a stand-in CLI (`jobs` lists `jobs`), a stand-in AttachManager that records what it is asked
 * (`attached`: the jobs it says it is attached to), and a real RunManager.
 */
export function commandsHarness(scenario: Record<string, ScenarioStep>, jobs = [jobJson()], attached: string[] = []) {
  const ws = tempDir('rd-ws');
  const folder = mock.folder(ws) as unknown as vscode.WorkspaceFolder;
  const { cli, invocations, events } = fakeCli({ jobs: { stdout: JSON.stringify(jobs) }, ...scenario });
  const model = new JobsModel();
  const requests: AttachRequest[] = [];
  const detached: string[] = [];
  const attacher = {
    attach: async (r: AttachRequest) => {
      requests.push(r);
      attached.push(r.job);
    },
    detach: async (job: string) => void detached.push(job),
    detachRank: async (job: string, rank: number) => void detached.push(`${job}#${rank}`),
    activeJobs: () => [...attached],
    isAttached: (job: string) => attached.includes(job),
    sessionFor: () => undefined,
  } as unknown as AttachManager;
  const log: string[] = [];
  const output: string[] = [];
  let outputShown = 0;
  let commands: Commands | undefined = undefined;
  const runs = new RunManager(
    cli,
    model,
    attacher,
    { appendLine: (l) => log.push(l) },
    { appendLine: (l) => output.push(l), show: () => void outputShown++ },
    () => commands!.refresh(),
  );
  commands = new Commands(cli, model, attacher, { appendLine: (l) => log.push(l), show: () => undefined }, memento() as unknown as vscode.Memento, runs);
  // the ask-once for ~/.ssh/config, over its own store: the test machine's ~/.ssh/config must not decide it
  commands.sshConsent = new SshConfigConsent(memento(), () => false);
  commands.register();
  const run = (name: string, ...args: unknown[]) => mock.commands.get(name)!(...args);
  return { ws, folder, model, commands, runs, requests, detached, invocations, events, run, log, output, outputShown: () => outputShown };
}

function memento() {
  const store = new Map<string, unknown>();
  return { get: (k: string) => store.get(k), update: async (k: string, v: unknown) => void store.set(k, v), keys: () => [...store.keys()] };
}

/** A clock the test moves by hand, for JobsTreeProvider's refresh timer: `advance(ms)` runs the timers that fall due. */
export function fakeScheduler() {
  let now = 0;
  let nextId = 1;
  let timers: Array<{ id: number; at: number; fn: () => void }> = [];
  return {
    setTimeout(fn: () => void, ms: number): unknown {
      const id = nextId++;
      timers.push({ id, at: now + ms, fn });
      return id;
    },
    clearTimeout(handle: unknown): void {
      timers = timers.filter((t) => t.id !== handle);
    },
    advance(ms: number): void {
      const until = now + ms;
      for (;;) {
        const due = timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) {
          break;
        }
        timers = timers.filter((t) => t !== due);
        now = due.at;
        due.fn();
      }
      now = until;
    },
    pending: () => timers.length,
  };
}

/** A running job of `nodes` nodes x `perNode` ranks (algo-1 .. algo-N), as `jobs --json` lists it. */
export function scaleJob(nodes = 8, perNode = 8, overrides: Partial<JobInfo> = {}): JobInfo {
  const names = Array.from({ length: nodes }, (_, i) => `algo-${i + 1}`);
  return jobJson({
    name: 'big',
    backend: 'sagemaker',
    nodes: names,
    nproc_per_node: perNode,
    code_dirs: Object.fromEntries(names.map((n) => [n, '/opt/ml/code'])),
    ...overrides,
  });
}

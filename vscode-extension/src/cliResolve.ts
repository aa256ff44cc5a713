// Which file a command name runs, decided here while the workspace is not trusted.
//
// Restricted Mode already keeps the workspace's own cliPath / pythonPath out (src/trust.ts), but the value that is
// left, `remote-debug` or `python`, is a bare name, and the operating system's lookup of a bare name can land in the
// workspace folder: on Windows, CreateProcess (and libuv's search for child_process.spawn) looks in the current
// directory before PATH, and the CLI runs with the workspace folder as its cwd; on every platform a PATH entry that is
// empty or relative (".", "node_modules/.bin", "venv/Scripts") means "the cwd".  So untrusted, we resolve the name
// ourselves, to an absolute path, from absolute PATH entries only, and refuse any file inside a workspace folder (a
// user-level cliPath pointing into the folder included: the untrusted folder controls what is in it).  Trusted
// workspaces keep the platform's own lookup.  No vscode import: unit-tested with Windows simulated (platform, isFile).

import * as fs from 'node:fs';
import * as path from 'node:path';

export interface ResolveContext {
  /** Workspace folders the user has not trusted; empty (or absent) when the workspace is trusted. */
  untrustedRoots?: readonly string[];
  platform?: NodeJS.Platform;
  /** The environment the child gets (its PATH and PATHEXT). */
  env?: NodeJS.ProcessEnv;
  isFile?: (p: string) => boolean;
  /** Follows symbolic links, so a link outside the folder to a file inside it is seen as inside. */
  realpath?: (p: string) => string;
}

export type Resolved = { command: string; error?: undefined } | { command?: undefined; error: string; notFound: boolean };

function realIsFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

function realRealpath(p: string): string {
  try {
    return fs.realpathSync.native(p);
  } catch {
    return p;
  }
}

/** The variable named `name` in `env`; Windows names are case-insensitive ("Path" is common there). */
function envValue(env: NodeJS.ProcessEnv, name: string, win: boolean): string | undefined {
  if (!win) {
    return env[name];
  }
  const key = Object.keys(env).find((k) => k.toUpperCase() === name);
  return key === undefined ? undefined : env[key];
}

/** Whether `file` is `root` or below it (case-insensitively on Windows). */
export function isInside(file: string, root: string, platform: NodeJS.Platform = process.platform): boolean {
  const p = platform === 'win32' ? path.win32 : path.posix;
  const norm = (s: string) => (platform === 'win32' ? p.resolve(s).toLowerCase() : p.resolve(s));
  const rel = p.relative(norm(root), norm(file));
  return rel === '' || (!rel.startsWith('..') && !p.isAbsolute(rel));
}

/**
 * The absolute file to spawn for `command`, or why there is none.  Trusted (no untrusted roots): `command` as given.
 */
export function resolveCommand(command: string, ctx: ResolveContext = {}): Resolved {
  const roots = (ctx.untrustedRoots ?? []).filter((r) => r !== '');
  if (roots.length === 0) {
    return { command };
  }
  const platform = ctx.platform ?? process.platform;
  const win = platform === 'win32';
  const p = win ? path.win32 : path.posix;
  const env = ctx.env ?? process.env;
  const isFile = ctx.isFile ?? realIsFile;
  const realpath = ctx.realpath ?? realRealpath;
  const inWorkspace = (file: string) =>
    roots.some((root) => isInside(file, root, platform) || isInside(realpath(file), realpath(root), platform));
  const refuse = (file: string): Resolved => ({
    error:
      `not running ${file}: it is inside the workspace folder, which is not trusted (Restricted Mode). ` +
      'Trust the workspace, or install remote-debug outside it',
    notFound: false,
  });

  // Only .com and .exe: those are what spawn runs without a shell (a .cmd / .bat needs one, and PATHEXT's others are
  // scripts for an interpreter); a name that has its extension already is looked up as it is.
  const exts = win && !/\.(com|exe)$/i.test(command) ? pathExtExecutables(envValue(env, 'PATHEXT', win)) : [''];
  const hasDir = win ? /[\\/]/.test(command) : command.includes('/');
  if (hasDir || p.isAbsolute(command)) {
    if (!p.isAbsolute(command)) {
      // ./bin/remote-debug, venv\Scripts\remote-debug: relative to the cwd, which is the workspace folder
      return refuse(command);
    }
    for (const file of [command, ...exts.filter((e) => e !== '').map((e) => command + e)]) {
      if (inWorkspace(file)) {
        return refuse(file);
      }
    }
    return { command };
  }
  const dirs = (envValue(env, 'PATH', win) ?? '')
    .split(win ? ';' : ':')
    .map((d) => (win ? d.replace(/^"(.*)"$/, '$1') : d))
    // empty and relative entries mean the cwd (the workspace folder); entries inside the folder are its files too
    .filter((d) => d !== '' && p.isAbsolute(d) && !(win && /^[\\/](?![\\/])/.test(d)) && !inWorkspace(d));
  for (const dir of dirs) {
    for (const ext of exts) {
      const file = p.join(dir, command + ext);
      if (isFile(file) && !inWorkspace(file)) {
        return { command: file };
      }
    }
  }
  return { error: `${command}: not found on PATH (outside the untrusted workspace folder)`, notFound: true };
}

/** The extensions of PATHEXT that spawn can run directly (.com, .exe), in PATHEXT's order. */
function pathExtExecutables(pathext: string | undefined): string[] {
  const listed = (pathext ?? '.COM;.EXE;.BAT;.CMD').split(';').map((e) => e.trim().toLowerCase());
  const runnable = listed.filter((e) => e === '.com' || e === '.exe');
  return runnable.length > 0 ? runnable : ['.com', '.exe'];
}

// Which Python to install the CLI into: the one the user picked in the Python extension, if any.
//
// The Python extension (ms-python.python) is optional, its API has changed over the years, and activating it can
// be slow or fail; every step is guarded and a failure just means "no selected interpreter".

import * as vscode from 'vscode';

export const PYTHON_EXTENSION = 'ms-python.python';

/** The part of the Python extension's `environments` API we use. */
interface EnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): { id?: string; path?: string } | undefined;
  resolveEnvironment(env: unknown): Promise<{ executable?: { uri?: { fsPath?: string } } } | undefined>;
}

function withTimeout<T>(p: Promise<T> | T, ms: number): Promise<T | undefined> {
  return Promise.race([Promise.resolve(p), new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), ms).unref?.())]);
}

/**
 * The executable of the Python extension's active interpreter for `folder` (or the window), or undefined when the
 * extension is absent, too old, slow (timeoutMs), or has none selected.
 */
export async function selectedInterpreter(folder?: vscode.Uri, timeoutMs = 5000): Promise<string | undefined> {
  try {
    const ext = vscode.extensions.getExtension(PYTHON_EXTENSION);
    if (!ext) {
      return undefined;
    }
    const exports = (ext.isActive ? ext.exports : await withTimeout(ext.activate(), timeoutMs)) as
      | { environments?: Partial<EnvironmentsApi> }
      | undefined;
    const environments = exports?.environments;
    if (typeof environments?.getActiveEnvironmentPath !== 'function' || typeof environments.resolveEnvironment !== 'function') {
      return undefined;
    }
    const active = environments.getActiveEnvironmentPath(folder);
    if (!active) {
      return undefined;
    }
    const resolved = await withTimeout(environments.resolveEnvironment(active), timeoutMs);
    const executable = resolved?.executable?.uri?.fsPath;
    return typeof executable === 'string' && executable !== '' ? executable : undefined;
  } catch {
    return undefined;
  }
}

/** `python3` where that is the name (Linux, macOS), `python` on Windows (where `python3` is often a Store stub). */
export function defaultPython(platform: NodeJS.Platform = process.platform): string {
  return platform === 'win32' ? 'python' : 'python3';
}

export interface InstallPython {
  python: string;
  from: 'python-extension' | 'setting' | 'default';
}

/**
 * The interpreter for `pip install`: the Python extension's selection, else remoteDebug.pythonPath, else python3.
 * In Restricted Mode the Python extension's pick is skipped: it is often the workspace's own .venv, an executable the
 * untrusted folder controls (the pythonPath passed in is already the user-level one then).
 */
export async function installPython(options: { pythonPath: string; folder?: vscode.Uri; trusted: boolean }): Promise<InstallPython> {
  if (options.trusted) {
    const selected = await selectedInterpreter(options.folder);
    if (selected) {
      return { python: selected, from: 'python-extension' };
    }
  }
  if (options.pythonPath.trim()) {
    return { python: options.pythonPath.trim(), from: 'setting' };
  }
  return { python: defaultPython(), from: 'default' };
}

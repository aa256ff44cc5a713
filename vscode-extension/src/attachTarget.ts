// Where a job's code is on this machine: the `localRoot` of the rank sessions' path mappings (the folder whose
// contents are the job's code dir), and the workspace folder the sessions belong to (the one holding localRoot).
//
//   a local job      `jobs --json` says source_dir: the folder `launch --source-dir` copied into the code dir.
//                    With `--source-dir <ws>/training` the code dir holds the contents of training/, so the
//                    mapping is <ws>/training <-> code dir (mapping <ws> would put every breakpoint one folder off).
//   a SageMaker job  source_dir is null or an s3:// URI: the user picks the folder once per job (a pick that
//                    starts at the workspace folder), kept in workspaceState; Change Local Source Folder… re-picks.
//   the setting      remoteDebug.pathMappings (of that workspace folder) wins over both: nothing is asked then.
//
// Several workspace folders and nothing to tell which holds the job: a workspace folder pick.

import * as fs from 'node:fs';
import * as path from 'node:path';

import * as vscode from 'vscode';

import { DEFAULT_REMOTE_ROOT, validMappings } from './debugConfig';
import { JobInfo } from './events';

export const LOCAL_ROOTS_KEY = 'remoteDebug.localRoots';

export interface AttachTarget {
  folder: vscode.WorkspaceFolder;
  /** undefined: the remoteDebug.pathMappings setting decides, or the workspace folder is the local root. */
  localRoot: string | undefined;
}

export type IsDirectory = (p: string) => boolean;

const isDirectory: IsDirectory = (p) => {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
};

function within(child: string, parent: string): boolean {
  const c = path.resolve(child);
  const p = path.resolve(parent);
  return c === p || c.startsWith(p.endsWith(path.sep) ? p : p + path.sep);
}

/** A source_dir that names a path on this machine (a local job's); not an s3:// (or any other) URI. */
export function isLocalPath(sourceDir: string | null | undefined): sourceDir is string {
  return !!sourceDir && !/^[a-z][a-z0-9+.-]*:\/\//i.test(sourceDir) && path.isAbsolute(sourceDir);
}

/** The workspace folder holding `p` (the deepest when folders nest), else one inside `p`, else undefined. */
export function folderFor<T extends { uri: { fsPath: string } }>(folders: readonly T[], p: string): T | undefined {
  const holding = folders.filter((f) => within(p, f.uri.fsPath)).sort((a, b) => b.uri.fsPath.length - a.uri.fsPath.length);
  return holding[0] ?? folders.find((f) => within(f.uri.fsPath, p));
}

/** Subfolders worth offering as a SageMaker job's local root: not hidden, not environments or caches. */
export function candidateSubfolders(root: string, list: (dir: string) => string[] = defaultList, isDir: IsDirectory = isDirectory): string[] {
  const skip = new Set(['node_modules', '__pycache__', 'venv', 'env', 'site-packages', 'dist', 'build', 'out']);
  return list(root)
    .filter((name) => !name.startsWith('.') && !skip.has(name) && isDir(path.join(root, name)))
    .sort((a, b) => a.localeCompare(b))
    .slice(0, 30)
    .map((name) => path.join(root, name));
}

function defaultList(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

interface RootPickItem extends vscode.QuickPickItem {
  value?: string;
  browse?: boolean;
}

function memory(): Pick<vscode.Memento, 'get' | 'update'> {
  const store = new Map<string, unknown>();
  return { get: ((k: string) => store.get(k)) as vscode.Memento['get'], update: async (k: string, v: unknown) => void store.set(k, v) };
}

export class AttachTargets {
  constructor(
    private readonly state: Pick<vscode.Memento, 'get' | 'update'> = memory(),
    private readonly isDir: IsDirectory = isDirectory,
  ) {}

  /** The local root picked for a job (SageMaker), if any. */
  picked(job: string): string | undefined {
    const all = this.state.get<Record<string, string>>(LOCAL_ROOTS_KEY) ?? {};
    return typeof all[job] === 'string' ? all[job] : undefined;
  }

  async remember(job: string, localRoot: string): Promise<void> {
    const all = { ...(this.state.get<Record<string, string>>(LOCAL_ROOTS_KEY) ?? {}) };
    all[job] = localRoot;
    await this.state.update(LOCAL_ROOTS_KEY, all);
  }

  /**
   * The local root without asking: the job's source dir when it is a folder here, else the folder picked for it.
   * (An attach that comes without one - a re-run's, a re-attach after a reload - uses this.)
   */
  known(info: Pick<JobInfo, 'name' | 'source_dir'>): string | undefined {
    if (isLocalPath(info.source_dir) && this.isDir(info.source_dir)) {
      return path.resolve(info.source_dir);
    }
    const picked = this.picked(info.name);
    return picked && this.isDir(picked) ? picked : undefined;
  }

  /**
   * Where to attach the job from.  `preferred`: the workspace folder the request came from (a launch.json's).
   * Throws when no folder is open; undefined when the user dismissed a pick.
   */
  async resolve(info: JobInfo, preferred?: vscode.WorkspaceFolder): Promise<AttachTarget | undefined> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    if (folders.length === 0) {
      throw new Error(
        vscode.l10n.t('open the folder with your training code first (File > Open Folder): breakpoints there map to the code in the job'),
      );
    }
    if (isLocalPath(info.source_dir)) {
      // a local job: the folder its source was copied from (when it is gone, the workspace folder as before)
      const local = this.isDir(info.source_dir) ? path.resolve(info.source_dir) : undefined;
      const folder = folderFor(folders, info.source_dir) ?? preferred ?? (await this.pickFolder(folders, info));
      return folder && { folder, localRoot: local };
    }
    const picked = this.picked(info.name);
    if (picked && this.isDir(picked)) {
      const folder = folderFor(folders, picked) ?? preferred ?? (await this.pickFolder(folders, info));
      return folder && { folder, localRoot: picked };
    }
    const folder = preferred ?? (await this.pickFolder(folders, info));
    if (!folder) {
      return undefined;
    }
    if (validMappings(vscode.workspace.getConfiguration('remoteDebug', folder.uri).get('pathMappings')).length) {
      return { folder, localRoot: undefined }; // the user's mappings say it all
    }
    const localRoot = await this.askLocalRoot(info, folder.uri.fsPath);
    if (!localRoot) {
      return undefined;
    }
    await this.remember(info.name, localRoot);
    return { folder: folderFor(folders, localRoot) ?? folder, localRoot };
  }

  /** Pick the job's local root again (Change Local Source Folder…); undefined when dismissed. */
  async change(info: JobInfo): Promise<string | undefined> {
    const folders = vscode.workspace.workspaceFolders ?? [];
    const current = this.known(info);
    const start = current ?? (await this.pickFolder(folders, info))?.uri.fsPath;
    if (!start) {
      return undefined;
    }
    const localRoot = await this.askLocalRoot(info, current ? folderFor(folders, current)?.uri.fsPath ?? start : start, current);
    if (localRoot) {
      await this.remember(info.name, localRoot);
    }
    return localRoot;
  }

  /** The only folder, or the user's pick among several (undefined: dismissed). */
  private async pickFolder(folders: readonly vscode.WorkspaceFolder[], info: JobInfo): Promise<vscode.WorkspaceFolder | undefined> {
    if (folders.length <= 1) {
      return folders[0];
    }
    return vscode.window.showWorkspaceFolderPick({
      placeHolder: vscode.l10n.t('Which workspace folder holds the code of job {0}?', info.name),
      ignoreFocusOut: true,
    });
  }

  /** A quick pick: the workspace folder first (Enter takes it), its subfolders, or any folder (Browse…). */
  private async askLocalRoot(info: JobInfo, root: string, current?: string): Promise<string | undefined> {
    const codeDir = Object.values(info.code_dirs ?? {})[0] ?? DEFAULT_REMOTE_ROOT;
    const items: RootPickItem[] = [];
    if (current) {
      items.push({ label: `$(check) ${path.basename(current)}`, description: vscode.l10n.t('current'), detail: current, value: current });
    }
    items.push({
      label: `$(root-folder) ${path.basename(root)}`,
      description: vscode.l10n.t('the workspace folder'),
      detail: root,
      value: root,
    });
    for (const sub of candidateSubfolders(root, defaultList, this.isDir)) {
      if (sub !== current) {
        items.push({ label: `$(folder) ${path.relative(root, sub)}`, detail: sub, value: sub });
      }
    }
    items.push({ label: `$(folder-opened) ${vscode.l10n.t('Browse…')}`, browse: true });
    const choice = await vscode.window.showQuickPick(items, {
      placeHolder: vscode.l10n.t('Which local folder holds the code of {0} (what the job has in {1})?', info.name, codeDir),
      ignoreFocusOut: true,
      matchOnDetail: true,
    });
    if (!choice) {
      return undefined;
    }
    if (!choice.browse) {
      return choice.value;
    }
    const uris = await vscode.window.showOpenDialog({
      canSelectFolders: true,
      canSelectFiles: false,
      canSelectMany: false,
      defaultUri: vscode.Uri.file(current ?? root),
      openLabel: vscode.l10n.t('Use as the Job’s Code'),
      title: vscode.l10n.t('The local folder whose contents are {0} in job {1}', codeDir, info.name),
    });
    return uris?.[0]?.fsPath;
  }
}

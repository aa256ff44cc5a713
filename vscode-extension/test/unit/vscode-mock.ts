// A small stand-in for the `vscode` module (esbuild aliases `vscode` to this file in unit tests).
// It implements what the extension uses, records calls, and lets a test script the user's
// answers (quick picks, input boxes, message buttons).

/* eslint-disable @typescript-eslint/no-explicit-any */

type Listener<T> = (e: T) => unknown;

export class Disposable {
  constructor(private readonly fn: () => void = () => undefined) {}
  dispose(): void {
    this.fn();
  }
  static from(...items: Array<{ dispose(): unknown }>): Disposable {
    return new Disposable(() => items.forEach((i) => i.dispose()));
  }
}

export class EventEmitter<T> {
  private listeners: Array<Listener<T>> = [];
  event = (listener: Listener<T>): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  };
  fire(e: T): void {
    [...this.listeners].forEach((l) => l(e));
  }
  dispose(): void {
    this.listeners = [];
  }
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export enum QuickPickItemKind {
  Separator = -1,
  Default = 0,
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class ThemeIcon {
  constructor(
    readonly id: string,
    readonly color?: ThemeColor,
  ) {}
}

export class TreeItem {
  id?: string;
  description?: string;
  tooltip?: string;
  iconPath?: ThemeIcon;
  contextValue?: string;
  command?: { command: string; title: string; arguments?: unknown[] };
  constructor(
    readonly label: string,
    readonly collapsibleState: TreeItemCollapsibleState = TreeItemCollapsibleState.None,
  ) {}
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly authority: string,
    readonly path: string,
  ) {}
  static file(p: string): Uri {
    return new Uri('file', '', p);
  }
  static parse(value: string): Uri {
    const m = /^([a-z][a-z0-9+.-]*):\/\/([^/]*)(\/.*)?$/i.exec(value);
    if (!m) {
      throw new Error(`bad uri ${value}`);
    }
    return new Uri(m[1], m[2], decodeURIComponent(m[3] ?? '/'));
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return `${this.scheme}://${this.authority}${this.path}`;
  }
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

/** vscode.l10n: no translations in tests; `{0}` / `{name}` placeholders are filled in as VS Code does. */
export const l10n = {
  t(message: string, ...args: any[]): string {
    const named = args.length === 1 && typeof args[0] === 'object' && args[0] !== null ? args[0] : undefined;
    return message.replace(/\{([^}]+)\}/g, (whole, key: string) => {
      const value = named ? named[key] : args[Number(key)];
      return value === undefined ? whole : String(value);
    });
  },
};

export enum ConfigurationTarget {
  Global = 1,
  Workspace = 2,
  WorkspaceFolder = 3,
}

export class DebugAdapterServer {
  constructor(
    readonly port: number,
    readonly host?: string,
  ) {}
}

export class DebugAdapterInlineImplementation {
  constructor(readonly implementation: any) {}
}

export enum DebugConfigurationProviderTriggerKind {
  Initial = 1,
  Dynamic = 2,
}

// --- scripted UI ----------------------------------------------------------------------------------

export interface Call {
  fn: string;
  args: any[];
}

class CancellationTokenSource {
  private readonly emitter = new EventEmitter<void>();
  isCancellationRequested = false;
  token = {
    isCancellationRequested: false,
    onCancellationRequested: this.emitter.event,
  };
  cancel(): void {
    this.isCancellationRequested = true;
    this.token.isCancellationRequested = true;
    this.emitter.fire();
  }
}

export const mock = {
  calls: [] as Call[],
  /** Answers for showQuickPick, in order: a function picks from the items, a value is returned as is. */
  quickPicks: [] as Array<((items: any[]) => any) | undefined>,
  inputBoxes: [] as Array<string | undefined>,
  /** Answers for show{Information,Warning,Error}Message, in order (undefined: dismissed). */
  messageAnswers: [] as Array<string | undefined>,
  config: {} as Record<string, any>,
  configUpdates: [] as Array<{ section: string; key: string; value: any; target: any }>,
  workspaceFolders: undefined as Array<{ uri: Uri; name: string; index: number }> | undefined,
  extensions: [] as string[],
  commands: new Map<string, (...args: any[]) => any>(),
  executed: [] as Array<{ command: string; args: any[] }>,
  progressTokens: [] as CancellationTokenSource[],
  startDebugging: (async () => true) as (folder: any, config: any, options?: any) => Promise<boolean>,
  /** Per workspace folder (its fsPath), settings that win over the others when read with that folder as scope. */
  folderConfig: {} as Record<string, Record<string, any>>,
  /** Answers for showWorkspaceFolderPick / showOpenDialog, in order (a function picks from the folders). */
  folderPicks: [] as Array<((folders: any[]) => any) | undefined>,
  openDialogs: [] as Array<Uri[] | undefined>,
  /** OutputChannels created with `{ log: true }` (LogOutputChannels), by name. */
  logChannels: new Map<string, any>(),
  opened: [] as string[],
  sessions: [] as any[],
  trackerFactories: [] as Array<{ type: string; factory: any }>,
  documents: [] as Array<{ content: string; language: string }>,
  terminals: [] as Array<{ name: string; sent: string[]; options?: any; output?: string }>,
  clipboard: '',
  findFiles: [] as Uri[],
  /** Open text documents (workspace.textDocuments); `document()` adds one. */
  textDocuments: [] as Array<{ uri: Uri; isDirty: boolean; isUntitled: boolean; save(): Promise<boolean> }>,
  saved: [] as string[],
  /** Workspace-level values (mock.config holds the user-level ones); get() prefers these, as VS Code merges them. */
  workspaceConfig: {} as Record<string, any>,
  trusted: true,
  remoteName: undefined as string | undefined,
  /** extension id -> its `exports` (getExtension(id).exports after activate()). */
  extensionExports: {} as Record<string, any>,
  statusBarItems: [] as any[],
  /** vscode.debug.activeDebugSession (the focused session); `focusSession()` changes it and fires the event. */
  activeDebugSession: undefined as any,
  focusSession(session: any): void {
    this.activeDebugSession = session;
    activeSessionChange.fire(session);
  },
  /** Simulate a settings change: fires onDidChangeConfiguration for `key` (and the sections above it). */
  changeConfig(key: string): void {
    configChange.fire({ affectsConfiguration: (section: string) => key === section || key.startsWith(`${section}.`) });
  },
  grantTrust(): void {
    this.trusted = true;
    trustGranted.fire();
  },
  /** The user (or the process) closes a terminal: onDidCloseTerminal fires. */
  closeTerminal(t: any, code?: number): void {
    t.exitStatus = code === undefined ? undefined : { code };
    terminalClosed.fire(t);
  },
  reset(): void {
    this.calls = [];
    this.quickPicks = [];
    this.inputBoxes = [];
    this.messageAnswers = [];
    this.config = {};
    this.configUpdates = [];
    this.workspaceFolders = undefined;
    this.extensions = [];
    this.commands.clear();
    this.executed = [];
    this.progressTokens = [];
    this.startDebugging = async () => true;
    this.sessions = [];
    this.trackerFactories = [];
    this.documents = [];
    this.terminals = [];
    this.clipboard = '';
    this.folderConfig = {};
    this.folderPicks = [];
    this.openDialogs = [];
    this.logChannels = new Map();
    this.opened = [];
    this.findFiles = [];
    this.textDocuments = [];
    this.saved = [];
    this.workspaceConfig = {};
    this.trusted = true;
    this.remoteName = undefined;
    this.extensionExports = {};
    this.statusBarItems = [];
    this.activeDebugSession = undefined;
    activeSessionChange.dispose();
    terminalClosed.dispose();
    trustGranted.dispose();
    debugStart.dispose();
    debugEnd.dispose();
    configChange.dispose();
  },
  messages(fn?: string): string[] {
    return this.calls.filter((c) => (fn ? c.fn === fn : /Message$/.test(c.fn))).map((c) => String(c.args[0]));
  },
  folder(path: string): { uri: Uri; name: string; index: number } {
    const f = { uri: Uri.file(path), name: path.split('/').pop() ?? path, index: 0 };
    this.workspaceFolders = [f];
    return f;
  },
  /** An open document; `save` answers what `saves` says (a read-only file: false). */
  document(path: string, options: { dirty?: boolean; untitled?: boolean; saves?: boolean } = {}) {
    const doc = {
      uri: options.untitled ? Uri.parse(`untitled://${path}`) : Uri.file(path),
      isDirty: options.dirty ?? true,
      isUntitled: options.untitled ?? false,
      save: async () => {
        if (options.saves === false) {
          return false;
        }
        doc.isDirty = false;
        mock.saved.push(path);
        return true;
      },
    };
    this.textDocuments.push(doc);
    return doc;
  },
  /** Simulate VS Code starting / ending a debug session for a configuration. */
  startSession(config: any, options?: any): any {
    const session = {
      id: `s${this.sessions.length}-${Math.random().toString(36).slice(2, 8)}`,
      name: config.name,
      type: config.type,
      configuration: config,
      parentSession: options?.parentSession,
      options,
    };
    this.sessions.push(session);
    debugStart.fire(session);
    return session;
  },
  endSession(session: any): void {
    this.sessions = this.sessions.filter((s) => s !== session);
    debugEnd.fire(session);
  },
  tracker(session: any): any {
    for (const { factory } of this.trackerFactories) {
      const t = factory.createDebugAdapterTracker(session);
      if (t) {
        return t;
      }
    }
    return undefined;
  },
};

const debugStart = new EventEmitter<any>();
const debugEnd = new EventEmitter<any>();
const activeSessionChange = new EventEmitter<any>();
const configChange = new EventEmitter<any>();
const terminalClosed = new EventEmitter<any>();
const trustGranted = new EventEmitter<void>();

function record(fn: string, args: any[]): void {
  mock.calls.push({ fn, args });
}

function message(fn: string) {
  return async (text: string, ...rest: any[]): Promise<string | undefined> => {
    record(fn, [text, ...rest]);
    return mock.messageAnswers.shift();
  };
}

export const window = {
  createOutputChannel(name: string, options?: any) {
    const lines: string[] = [];
    const channel = {
      name,
      lines,
      appendLine: (l: string) => lines.push(l),
      append: (l: string) => lines.push(l),
      clear: () => void lines.splice(0),
      replace: (text: string) => void lines.splice(0, lines.length, text),
      // a LogOutputChannel's levels (`{ log: true }`): the level is kept in the line
      info: (l: string) => lines.push(`[info] ${l}`),
      warn: (l: string) => lines.push(`[warning] ${l}`),
      error: (l: string | Error) => lines.push(`[error] ${String(l instanceof Error ? l.message : l)}`),
      debug: (l: string) => lines.push(`[debug] ${l}`),
      trace: (l: string) => lines.push(`[trace] ${l}`),
      show: () => record('output.show', [name]),
      dispose: () => undefined,
    };
    if (options?.log) {
      mock.logChannels.set(name, channel);
    }
    return channel;
  },
  async showWorkspaceFolderPick(options?: any): Promise<any> {
    record('showWorkspaceFolderPick', [options]);
    const answer = mock.folderPicks.shift();
    return typeof answer === 'function' ? answer(mock.workspaceFolders ?? []) : answer;
  },
  async showOpenDialog(options?: any): Promise<Uri[] | undefined> {
    record('showOpenDialog', [options]);
    return mock.openDialogs.shift();
  },
  showInformationMessage: message('showInformationMessage'),
  showWarningMessage: message('showWarningMessage'),
  showErrorMessage: message('showErrorMessage'),
  async showQuickPick(items: any[] | Promise<any[]>, options?: any): Promise<any> {
    const list = await items;
    record('showQuickPick', [list, options]);
    const answer = mock.quickPicks.shift();
    return typeof answer === 'function' ? answer(list) : answer;
  },
  async showInputBox(options?: any): Promise<string | undefined> {
    record('showInputBox', [options]);
    return mock.inputBoxes.shift();
  },
  async withProgress<T>(options: any, task: (progress: any, token: any) => Promise<T>): Promise<T> {
    record('withProgress', [options]);
    const source = new CancellationTokenSource();
    mock.progressTokens.push(source);
    const reports: any[] = [];
    return task({ report: (r: any) => reports.push(r) }, source.token);
  },
  createTreeView(id: string, options: any) {
    record('createTreeView', [id, options]);
    const visibility = new EventEmitter<any>();
    return { visible: false, badge: undefined, onDidChangeVisibility: visibility.event, dispose: () => undefined };
  },
  createTerminal(options: any) {
    const t: any = {
      name: options.name,
      options,
      sent: [] as string[],
      /** What an extension terminal's pty wrote. */
      output: '',
      show: () => undefined,
      sendText: (s: string) => t.sent.push(s),
      dispose: () => mock.closeTerminal(t),
    };
    mock.terminals.push(t);
    if (options.pty) {
      // VS Code opens an extension terminal's pty once the terminal is up; closing the pty closes the terminal
      options.pty.onDidWrite((data: string) => (t.output += data));
      options.pty.onDidClose?.((code?: number) => mock.closeTerminal(t, typeof code === 'number' ? code : undefined));
      queueMicrotask(() => options.pty.open(undefined));
    }
    return t;
  },
  onDidCloseTerminal: terminalClosed.event,
  onDidChangeWindowState: new EventEmitter<{ focused: boolean }>().event,
  createStatusBarItem(id?: string, alignment?: StatusBarAlignment, priority?: number) {
    const item = {
      id,
      alignment,
      priority,
      text: '',
      tooltip: undefined as any,
      command: undefined as any,
      name: undefined as string | undefined,
      backgroundColor: undefined as ThemeColor | undefined,
      visible: false,
      show: () => void (item.visible = true),
      hide: () => void (item.visible = false),
      dispose: () => void (item.visible = false),
    };
    mock.statusBarItems.push(item);
    return item;
  },
  activeTextEditor: undefined as any,
  setStatusBarMessage(text: string, timeout?: number) {
    record('setStatusBarMessage', [text, timeout]);
    return new Disposable();
  },
  async showTextDocument(doc: any, options?: any) {
    record('showTextDocument', [doc, options]);
    return {};
  },
};

export const workspace = {
  get workspaceFolders() {
    return mock.workspaceFolders;
  },
  get textDocuments() {
    return mock.textDocuments;
  },
  getConfiguration(section?: string, scope?: Uri) {
    const prefix = section ? `${section}.` : '';
    // a workspace folder's own values win when read with a scope inside it (as VS Code merges them)
    const folder = scope && mock.workspaceFolders?.find((f) => scope.fsPath === f.uri.fsPath || scope.fsPath.startsWith(`${f.uri.fsPath}/`));
    const folderValues = folder ? mock.folderConfig[folder.uri.fsPath] ?? {} : {};
    return {
      get<T>(key: string, fallback?: T): T {
        const full = prefix + key;
        if (full in folderValues) {
          return folderValues[full] as T;
        }
        if (full in mock.workspaceConfig) {
          return mock.workspaceConfig[full] as T;
        }
        return (full in mock.config ? mock.config[full] : fallback) as T;
      },
      inspect<T>(key: string) {
        const full = prefix + key;
        return {
          key: full,
          globalValue: mock.config[full] as T | undefined,
          workspaceValue: mock.workspaceConfig[full] as T | undefined,
          workspaceFolderValue: undefined as T | undefined,
        };
      },
      async update(key: string, value: any, target: any) {
        mock.configUpdates.push({ section: section ?? '', key, value, target });
        mock.config[prefix + key] = value;
      },
    };
  },
  onDidChangeConfiguration: configChange.event,
  get isTrusted() {
    return mock.trusted;
  },
  onDidGrantWorkspaceTrust: trustGranted.event,
  async findFiles(): Promise<Uri[]> {
    return mock.findFiles;
  },
  asRelativePath(uri: Uri): string {
    const root = mock.workspaceFolders?.[0]?.uri.fsPath;
    return root && uri.fsPath.startsWith(`${root}/`) ? uri.fsPath.slice(root.length + 1) : uri.fsPath;
  },
  getWorkspaceFolder(uri: Uri) {
    return mock.workspaceFolders?.find((f) => uri.fsPath.startsWith(`${f.uri.fsPath}/`));
  },
  async openTextDocument(options: { content: string; language: string }) {
    mock.documents.push(options);
    return options;
  },
};

export const debug = {
  get activeDebugSession() {
    return mock.activeDebugSession;
  },
  onDidChangeActiveDebugSession: activeSessionChange.event,
  onDidStartDebugSession: debugStart.event,
  onDidTerminateDebugSession: debugEnd.event,
  registerDebugAdapterTrackerFactory(type: string, factory: any) {
    mock.trackerFactories.push({ type, factory });
    return new Disposable(() => (mock.trackerFactories = mock.trackerFactories.filter((f) => f.factory !== factory)));
  },
  registerDebugAdapterDescriptorFactory(type: string, factory: any) {
    record('registerDebugAdapterDescriptorFactory', [type, factory]);
    return new Disposable();
  },
  registerDebugConfigurationProvider(type: string, provider: any, triggerKind?: DebugConfigurationProviderTriggerKind) {
    record('registerDebugConfigurationProvider', [type, provider, triggerKind]);
    return new Disposable();
  },
  async startDebugging(folder: any, config: any, options?: any): Promise<boolean> {
    record('startDebugging', [folder, config, options]);
    return mock.startDebugging(folder, config, options);
  },
  async stopDebugging(session: any): Promise<void> {
    record('stopDebugging', [session]);
  },
};

export const commands = {
  registerCommand(name: string, fn: (...args: any[]) => any) {
    mock.commands.set(name, fn);
    return new Disposable(() => mock.commands.delete(name));
  },
  async executeCommand(command: string, ...args: any[]) {
    mock.executed.push({ command, args });
    const fn = mock.commands.get(command);
    return fn ? fn(...args) : undefined;
  },
};

export const extensions = {
  get all() {
    return mock.extensions.map((id) => ({ id }));
  },
  getExtension(id: string) {
    if (!mock.extensions.includes(id)) {
      return undefined;
    }
    const exports = mock.extensionExports[id];
    return { id, isActive: exports !== undefined, exports, activate: async () => exports };
  },
};

export const env = {
  get remoteName() {
    return mock.remoteName;
  },
  clipboard: {
    async writeText(text: string) {
      mock.clipboard = text;
    },
  },
  async openExternal(uri: Uri): Promise<boolean> {
    mock.opened.push(uri.toString());
    return true;
  },
};

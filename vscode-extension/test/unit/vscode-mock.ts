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

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

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
  startDebugging: (async () => true) as (folder: any, config: any) => Promise<boolean>,
  sessions: [] as any[],
  trackerFactories: [] as Array<{ type: string; factory: any }>,
  documents: [] as Array<{ content: string; language: string }>,
  terminals: [] as Array<{ name: string; sent: string[] }>,
  clipboard: '',
  findFiles: [] as Uri[],
  /** Open text documents (workspace.textDocuments); `document()` adds one. */
  textDocuments: [] as Array<{ uri: Uri; isDirty: boolean; isUntitled: boolean; save(): Promise<boolean> }>,
  saved: [] as string[],
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
    this.findFiles = [];
    this.textDocuments = [];
    this.saved = [];
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
  startSession(config: any): any {
    const session = { id: `s${this.sessions.length}`, name: config.name, type: config.type, configuration: config };
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
const configChange = new EventEmitter<any>();

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
  createOutputChannel(name: string) {
    const lines: string[] = [];
    return {
      name,
      lines,
      appendLine: (l: string) => lines.push(l),
      append: (l: string) => lines.push(l),
      show: () => record('output.show', [name]),
      dispose: () => undefined,
    };
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
    const t = { name: options.name, sent: [] as string[], show: () => undefined, sendText: (s: string) => t.sent.push(s) };
    mock.terminals.push(t);
    return t;
  },
  activeTextEditor: undefined as any,
  async showTextDocument(doc: any) {
    record('showTextDocument', [doc]);
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
  getConfiguration(section?: string) {
    const prefix = section ? `${section}.` : '';
    return {
      get<T>(key: string, fallback?: T): T {
        const full = prefix + key;
        return (full in mock.config ? mock.config[full] : fallback) as T;
      },
      async update(key: string, value: any, target: any) {
        mock.configUpdates.push({ section: section ?? '', key, value, target });
        mock.config[prefix + key] = value;
      },
    };
  },
  onDidChangeConfiguration: configChange.event,
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
  registerDebugConfigurationProvider(type: string, provider: any) {
    record('registerDebugConfigurationProvider', [type, provider]);
    return new Disposable();
  },
  async startDebugging(folder: any, config: any): Promise<boolean> {
    record('startDebugging', [folder, config]);
    return mock.startDebugging(folder, config);
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
    return mock.extensions.includes(id) ? { id } : undefined;
  },
};

export const env = {
  clipboard: {
    async writeText(text: string) {
      mock.clipboard = text;
    },
  },
};

// The extension's log: a LogOutputChannel ("Remote Debug", `{ log: true }`), so lines carry a time and a level
// and the user can filter them (Developer: Set Log Level).  Code that only needs lines takes any `appendLine` sink
// (the tests pass arrays); `logger()` gives it levels either way.

export interface LineSink {
  appendLine(line: string): void;
}

export interface LevelSink extends LineSink {
  info(message: string): void;
  warn(message: string): void;
  error(message: string | Error): void;
}

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

function hasLevels(sink: LineSink): sink is LevelSink {
  const s = sink as Partial<LevelSink>;
  return typeof s.info === 'function' && typeof s.warn === 'function' && typeof s.error === 'function';
}

/** Levels on a LogOutputChannel; on a plain sink, warnings and errors are marked in the line itself. */
export function logger(sink: LineSink): Logger {
  if (hasLevels(sink)) {
    return { info: (m) => sink.info(m), warn: (m) => sink.warn(m), error: (m) => sink.error(m) };
  }
  return {
    info: (m) => sink.appendLine(m),
    warn: (m) => sink.appendLine(`warning: ${m}`),
    error: (m) => sink.appendLine(`error: ${m}`),
  };
}

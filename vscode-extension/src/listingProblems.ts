// Why a backend's jobs were not listed (expired SSO token, no credentials, no region, ...).
//
// `remote-debug jobs --json` keeps stdout the JSON array of the jobs it could list; for each backend it could not,
// stderr gets one JSON object per line: {"unlisted", "problem", "message", "fix", "profile", "region"}.  Older CLIs
// print a plain line instead ("sagemaker jobs not listed: ...").  Without this, an expired token looked exactly like
// "No debuggable jobs yet".  No vscode import: parsed and tested on strings.

import { jsonObjectLine, type ListingProblem as ProblemDocument, type ListingProblemKind } from './events';

/** The CLI's ListingProblemKind (generated); every one has a welcome view in package.json. */
export type ProblemKind = ListingProblemKind;

// every kind, listed here so that a new kind in the CLI is a type error until it is handled
const ALL_KINDS: { [K in ProblemKind]: true } = {
  'no-credentials': true,
  'sso-expired': true,
  'profile-not-found': true,
  'no-region': true,
  'access-denied': true,
  unreachable: true,
  error: true,
};
const KINDS: ReadonlySet<string> = new Set(Object.keys(ALL_KINDS));


export interface ListingProblem {
  backend: string; // "sagemaker"
  problem: ProblemKind;
  message: string; // one line, from the CLI
  fix: string | undefined; // a command line to run, e.g. "aws sso login --profile dev"
  profile: string | undefined;
  region: string | undefined;
}

/** Problems the user fixes with credentials, a profile or a region (the status bar turns to a warning for these). */
export function isCredentialsProblem(p: ListingProblem): boolean {
  return p.problem !== 'unreachable' && p.problem !== 'error';
}

function optionalString(v: unknown): string | undefined {
  return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
}

/** One stderr line as a problem, or undefined when it is not one of the CLI's structured lines. */
export function parseProblemLine(line: string): ListingProblem | undefined {
  const o = jsonObjectLine(line) as Partial<Record<keyof ProblemDocument, unknown>> | undefined;
  if (!o) {
    return undefined;
  }
  const backend = optionalString(o.unlisted);
  if (!backend) {
    return undefined;
  }
  const kind = typeof o.problem === 'string' && KINDS.has(o.problem) ? (o.problem as ProblemKind) : 'error';
  return {
    backend,
    problem: kind,
    message: optionalString(o.message) ?? `${backend} jobs could not be listed`,
    fix: optionalString(o.fix),
    profile: optionalString(o.profile),
    region: optionalString(o.region),
  };
}

/** stderr of `jobs --json`: the structured problems, and every other non-empty line (older CLIs, warnings). */
export function parseListingStderr(stderr: string): { problems: ListingProblem[]; otherLines: string[] } {
  const problems: ListingProblem[] = [];
  const otherLines: string[] = [];
  for (const line of stderr.split(/\r?\n/)) {
    if (!line.trim()) {
      continue;
    }
    const p = parseProblemLine(line);
    if (p) {
      problems.push(p);
    } else {
      otherLines.push(line.trim());
    }
  }
  return { problems, otherLines };
}

/** "SageMaker" for "sagemaker": how the user knows the service. */
export function backendTitle(backend: string): string {
  return backend === 'sagemaker' ? 'SageMaker' : backend.charAt(0).toUpperCase() + backend.slice(1);
}

type Listener = () => void;

/** The latest listing's problems; listeners hear when they change (not on every identical refresh). */
export class ListingProblems {
  private current: ListingProblem[] = [];
  private listeners: Listener[] = [];

  get problems(): readonly ListingProblem[] {
    return this.current;
  }

  /** The first problem that credentials, a profile or a region would fix. */
  get credentialsProblem(): ListingProblem | undefined {
    return this.current.find(isCredentialsProblem);
  }

  set(problems: ListingProblem[]): void {
    if (JSON.stringify(problems) === JSON.stringify(this.current)) {
      return;
    }
    this.current = problems;
    [...this.listeners].forEach((l) => l());
  }

  onDidChange(listener: Listener): { dispose(): void } {
    this.listeners.push(listener);
    return { dispose: () => (this.listeners = this.listeners.filter((l) => l !== listener)) };
  }
}

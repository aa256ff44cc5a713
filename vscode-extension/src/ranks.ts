// The one rank grammar and the one way to write ranks short, the CLI's (remote_debug/contract/spec.py
// parse_ranks, format_rank_ranges).  Both test suites check the cases in test/unit/fixtures/wire-vectors.json.
//
//   "all", "*" (any case) or nothing   every rank (undefined)
//   "0,2", "0-3, 8"                    these ranks: comma-separated ranks and a-b ranges, sorted, no repeats
//
// Pure TypeScript (no vscode import): the messages are the callers'.

/** A range stands for this many ranks at most: "0-99999999999" must not build them all. */
export const RANK_RANGE_LIMIT = 100000;

const ALL_RANKS = new Set(['', 'all', '*']);
const RANK_PART = /^([0-9]+)(?:\s*-\s*([0-9]+))?$/;

/** Why a rank list was refused: `syntax` (not the grammar), `range` (a range going down, or too long). */
export class RankListError extends Error {
  constructor(
    readonly text: string,
    readonly why: 'syntax' | 'range',
  ) {
    super(
      why === 'syntax'
        ? `bad rank list ${JSON.stringify(text)}: use "all" or comma-separated ranks and ranges like 0,2 or 0-3,8`
        : `bad rank list ${JSON.stringify(text)}: a range must go up, and over at most ${RANK_RANGE_LIMIT} ranks`,
    );
  }
}

function addPart(part: string, text: string, into: Set<number>): void {
  const m = RANK_PART.exec(part.trim());
  if (!m) {
    throw new RankListError(text, 'syntax');
  }
  const first = Number(m[1]);
  const last = m[2] === undefined ? first : Number(m[2]);
  if (last < first || last - first >= RANK_RANGE_LIMIT) {
    throw new RankListError(text, 'range');
  }
  for (let r = first; r <= last; r++) {
    into.add(r);
  }
}

function sorted(ranks: Set<number>): number[] {
  return [...ranks].sort((a, b) => a - b);
}

/** The ranks a text selects (undefined: every rank); throws RankListError. */
export function parseRankText(text: string): number[] | undefined {
  const t = text.trim();
  if (ALL_RANKS.has(t.toLowerCase())) {
    return undefined;
  }
  const out = new Set<number>();
  for (const part of t.split(',')) {
    addPart(part, text, out);
  }
  return sorted(out);
}

/**
 * The ranks a JSON setting selects: a text as above, a rank number, or an array of ranks (numbers, or texts of
 * one rank or range each).  Undefined/null: every rank.  Throws RankListError.
 */
export function parseRankValue(value: unknown): number[] | undefined {
  if (value === undefined || value === null) {
    return undefined;
  }
  if (typeof value === 'string') {
    return parseRankText(value);
  }
  const shown = JSON.stringify(value) ?? String(value);
  const items = Array.isArray(value) ? value : [value];
  const out = new Set<number>();
  for (const item of items) {
    if (typeof item === 'number') {
      if (!Number.isInteger(item) || item < 0) {
        throw new RankListError(shown, 'syntax');
      }
      out.add(item);
    } else if (typeof item === 'string') {
      addPart(item, shown, out);
    } else {
      throw new RankListError(shown, 'syntax');
    }
  }
  if (out.size === 0) {
    throw new RankListError(shown, 'syntax');
  }
  return sorted(out);
}

/** `0-7`, `0, 2-4, 9`: ranks short (each run of two or more consecutive ranks as a range; sorted, no repeats). */
export function formatRankRanges(ranks: Iterable<number>): string {
  const ordered = sorted(new Set(ranks));
  const out: string[] = [];
  for (let i = 0; i < ordered.length; ) {
    let j = i;
    while (j + 1 < ordered.length && ordered[j + 1] === ordered[j] + 1) {
      j++;
    }
    out.push(j === i ? `${ordered[i]}` : `${ordered[i]}-${ordered[j]}`);
    i = j + 1;
  }
  return out.join(', ');
}

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';

import { describeEvent, formatCompoundName, formatConfigName, formatSshAlias, parseEventLine } from '../../src/events';
import { parseRanksValue } from '../../src/jobConfig';
import { parseRanks } from '../../src/model';
import { rankRanges } from '../../src/rankPicker';
import { formatRankRanges, parseRankText, parseRankValue, RankListError } from '../../src/ranks';
import { parseProblemLine } from '../../src/listingProblems';

// bundled tests run from out/test/unit/; the vectors stay in the source tree (the pytest reads the same file)
const VECTORS = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../test/unit/fixtures/wire-vectors.json'), 'utf8'));
const MANIFEST = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.json'), 'utf8'));

type RankVector = { ranks?: number[] | null; error?: 'syntax' | 'range' };

/** What a parser made of a vector's input: the ranks (null: every rank), or the kind of error it threw. */
function outcome(parse: () => number[] | undefined): RankVector {
  try {
    return { ranks: parse() ?? null };
  } catch (e) {
    assert.ok(e instanceof RankListError, String(e));
    return { error: e.why };
  }
}

function expected(v: RankVector): RankVector {
  return v.error ? { error: v.error } : { ranks: v.ranks ?? null };
}

describe('formats shared with the CLI (test vectors both test suites check)', () => {
  test('ssh aliases', () => {
    for (const v of VECTORS.ssh_alias) {
      assert.equal(formatSshAlias(v.job, v.node), v.alias);
    }
  });

  test('configuration names', () => {
    for (const v of VECTORS.config_name) {
      assert.equal(formatConfigName(v.job, v.rank, v.node), v.name);
    }
    for (const v of VECTORS.compound_name) {
      assert.equal(formatCompoundName(v.job), v.name);
    }
  });
});

describe('ranks: one grammar and one short form, the CLI\'s (test vectors both test suites check)', () => {
  test('rank lists typed as text: the settings, launch.json, the CLI\'s --ranks', () => {
    for (const v of VECTORS.rank_text) {
      assert.deepEqual(outcome(() => parseRankText(v.text)), expected(v), JSON.stringify(v.text));
      // the settings' parser says so in one line; launch.json's in its own words
      if (v.error) {
        assert.throws(() => parseRanks(v.text), /^Error: bad rank list/);
        const r = parseRanksValue(v.text);
        assert.ok(r && !Array.isArray(r) && /"ranks" must be/.test(r.error));
      } else {
        assert.deepEqual(parseRanks(v.text) ?? null, v.ranks);
      }
    }
  });

  test('launch.json and settings values: texts, numbers and arrays of ranks', () => {
    for (const v of VECTORS.rank_value) {
      assert.deepEqual(outcome(() => parseRankValue(v.value)), expected(v), JSON.stringify(v.value));
      const r = parseRanksValue(v.value);
      assert.deepEqual(r !== undefined && !Array.isArray(r) ? 'error' : (r ?? null), v.error ? 'error' : v.ranks);
    }
  });

  test("package.json's patterns take what the grammar takes (a range's bounds aside)", () => {
    const debuggers = MANIFEST.contributes.debuggers as Array<{ configurationAttributes?: { attach?: { properties?: Record<string, { anyOf?: Array<{ pattern?: string }> }> } } }>;
    const launchRanks = debuggers.flatMap((d) => d.configurationAttributes?.attach?.properties?.ranks?.anyOf ?? []).find((s) => s.pattern);
    const patterns = [MANIFEST.contributes.configuration.properties['remoteDebug.defaultRanks'].pattern, launchRanks?.pattern];
    for (const pattern of patterns) {
      assert.ok(pattern, 'a ranks pattern is missing');
      for (const v of VECTORS.rank_text) {
        assert.equal(new RegExp(pattern).test(v.text), v.error !== 'syntax', `${pattern} vs ${JSON.stringify(v.text)}`);
      }
    }
  });

  test('ranks written short, and they parse back', () => {
    for (const v of VECTORS.rank_ranges) {
      assert.equal(formatRankRanges(v.ranks), v.text);
      assert.equal(rankRanges(v.ranks), v.text);
      if (v.ranks.length) {
        assert.deepEqual(parseRankText(v.text), [...new Set(v.ranks as number[])].sort((a, b) => a - b));
      }
    }
  });
});

describe("events' human lines", () => {
  test("the CLI's text wins; an older CLI's event without one is still worded", () => {
    const ready = { event: 'rank-ready', v: 1, rank: 0, node: 'algo-1', local_port: 4000, remote_port: 5000, state: 'listening', ide: 'vscode', code_dir: '/c' };
    assert.equal(describeEvent(parseEventLine(JSON.stringify({ ...ready, text: 'the CLI says so' }))!), 'the CLI says so');
    assert.equal(describeEvent(parseEventLine(JSON.stringify(ready))!), 'rank 0 on algo-1: debugger at 127.0.0.1:4000 (listening)');
    const newer = { event: 'from-the-future', v: 1, text: 'something new happened' };
    assert.equal(describeEvent(parseEventLine(JSON.stringify(newer))!), 'something new happened');
  });
});

describe('listing problems', () => {
  test("every kind the CLI's ListingProblemKind has is kept; an unknown one reads as error", () => {
    const line = (problem: string) => JSON.stringify({ unlisted: 'sagemaker', problem, message: 'm', fix: null, profile: null, region: null });
    assert.equal(parseProblemLine(line('sso-expired'))?.problem, 'sso-expired');
    assert.equal(parseProblemLine(line('no-region'))?.problem, 'no-region');
    assert.equal(parseProblemLine(line('from-the-future'))?.problem, 'error');
  });
});

// Bundles the extension (dist/extension.js) or, with --tests, each unit test file
// (out/test/unit/*.test.js) with `vscode` resolved to the mock in test/unit/vscode-mock.ts.
import { build } from 'esbuild';
import { readdirSync } from 'node:fs';

const production = process.argv.includes('--production');
const tests = process.argv.includes('--tests');

const common = { bundle: true, platform: 'node', target: 'node18', format: 'cjs', sourcemap: !production, logLevel: 'warning' };

if (tests) {
  const entryPoints = readdirSync('test/unit')
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `test/unit/${f}`);
  await build({ ...common, entryPoints, outdir: 'out/test/unit', alias: { vscode: './test/unit/vscode-mock.ts' } });
} else {
  await build({
    ...common,
    entryPoints: ['src/extension.ts'],
    outfile: 'dist/extension.js',
    external: ['vscode'],
    minify: production,
  });
}

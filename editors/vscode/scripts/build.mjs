// Bundles the extension with esbuild into dist/extension.js (vscode stays external), or with
// --unit the unit tests into out/unit/ (plain Node, no VS Code). No type checking here: tsc does it.
import { build } from 'esbuild';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (process.argv.includes('--unit')) {
  const dir = join(root, 'test', 'unit');
  await build({
    entryPoints: readdirSync(dir).filter((f) => f.endsWith('.test.ts')).map((f) => join(dir, f)),
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    outdir: join(root, 'out', 'unit'),
    external: ['vscode'],
    logLevel: 'warning',
  });
} else {
  await build({
    entryPoints: [join(root, 'src', 'extension.ts')],
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    outfile: join(root, 'dist', 'extension.js'),
    external: ['vscode'],
    sourcemap: false,
    minify: true,
    keepNames: true,
    logLevel: 'warning',
  });
}

// Writes contributes.languageModelTools in package.json from ../../schemas/tools/*.json.
// With --check it writes nothing and exits 1 when package.json is stale (--package FILE checks
// another copy, for the unit test).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { contributions } from './tools.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const flag = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const pkgPath = flag('--package', join(here, '..', 'package.json'));
const schemas = join(here, '..', '..', '..', 'schemas', 'tools');
const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'));
const wanted = contributions(schemas);
const stale = JSON.stringify(pkg.contributes.languageModelTools) !== JSON.stringify(wanted);
if (process.argv.includes('--check')) {
  if (stale) {
    console.error('package.json: languageModelTools is stale; run `npm run gen` in editors/vscode');
    process.exit(1);
  }
} else if (stale) {
  pkg.contributes.languageModelTools = wanted;
  writeFileSync(pkgPath, JSON.stringify(pkg, null, 2) + '\n');
  console.error(`package.json: ${wanted.length} tools written`);
}

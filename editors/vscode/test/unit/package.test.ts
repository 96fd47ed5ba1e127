// Unit tests of the generated parts of package.json: languageModelTools must match
// schemas/tools/*.json (run `npm run gen` when this fails), and the manifest must declare
// what the code registers.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const root = join(__dirname, '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

test('languageModelTools is what gen-tools makes from schemas/tools', () => {
  execFileSync(process.execPath, [join(root, 'scripts', 'gen-tools.mjs'), '--check'], { stdio: 'pipe' });
  const schemaDir = join(root, '..', '..', 'schemas', 'tools');
  const read = JSON.parse(readFileSync(join(schemaDir, 'read.json'), 'utf8'));
  const tool = pkg.contributes.languageModelTools.find((t: { name: string }) => t.name === 'ctxfs_read');
  assert.deepEqual(tool.inputSchema, read.input_schema);
  assert.equal(tool.modelDescription, read.description);
});

test('a stale package.json fails the check', () => {
  const run = (file: string, packageJson: string) => {
    try {
      execFileSync(process.execPath, [file, '--check', '--package', packageJson], { stdio: 'pipe' });
      return 0;
    } catch (e) {
      return (e as { status: number }).status;
    }
  };
  const script = join(root, 'scripts', 'gen-tools.mjs');
  const dir = mkdtempSync(join(tmpdir(), 'ctxfs-pkg-'));
  const copy = join(dir, 'package.json');
  const stale = structuredClone(pkg);
  stale.contributes.languageModelTools[0].modelDescription += ' (an older text)';
  writeFileSync(copy, JSON.stringify(stale));
  assert.equal(run(script, copy), 1);
  const missing = structuredClone(pkg);
  missing.contributes.languageModelTools.pop();
  writeFileSync(copy, JSON.stringify(missing));
  assert.equal(run(script, copy), 1);
  writeFileSync(copy, JSON.stringify(pkg));
  assert.equal(run(script, copy), 0);
  rmSync(dir, { recursive: true });
});

test('the manifest declares the views, the MCP provider and every tool once', () => {
  const names = pkg.contributes.languageModelTools.map((t: { name: string }) => t.name);
  assert.equal(new Set(names).size, names.length);
  assert.ok(names.includes('ctxfs_edit') && names.includes('ctxfs_apply_patch'));
  assert.deepEqual(pkg.contributes.views.ctxfs.map((v: { id: string }) => v.id), ['ctxfs.results', 'ctxfs.changes', 'ctxfs.instructions']);
  assert.deepEqual(pkg.contributes.mcpServerDefinitionProviders, [{ id: 'ctxfs.mcp', label: 'ctxfs' }]);
  for (const key of ['ctxfs.path', 'ctxfs.embedder']) assert.equal(pkg.contributes.configuration.properties[key].scope, 'machine', key);
});

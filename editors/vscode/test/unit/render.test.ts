// Unit tests of how results, changes and the instruction chain are labelled (src/render.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chainFilePath, chainLabel, changeLabel, commonAncestor, diffStat, formatSize, orderedChain, resultDocument, resultLabel, shortPath } from '../../src/render';

test('sizes and paths', () => {
  assert.equal(formatSize(0), '0 B');
  assert.equal(formatSize(1023), '1023 B');
  assert.equal(formatSize(3277), '3.2 KB');
  assert.equal(formatSize(5 * 1024 * 1024), '5.0 MB');
  assert.equal(formatSize(200 * 1024 * 1024), '200 MB');
  assert.equal(shortPath('/w/p/src/a.rs', ['/w/q', '/w/p']), 'src/a.rs');
  assert.equal(shortPath('/w/p', ['/w/p/']), '.');
  assert.equal(shortPath('/elsewhere/x', ['/w/p']), '/elsewhere/x');
  assert.equal(shortPath('/w/pp/x', ['/w/p']), '/w/pp/x');
});

test('a result row says tool, path, lines, size, stub and capped', () => {
  const row = resultLabel(
    { id: '#000c', tool: 'read', path: '/w/src/a.rs', lines: 12, size: 1300, stub: true, capped: false, isError: false, title: '[#000c read src/a.rs …]' },
    ['/w'],
  );
  assert.deepEqual(row, { label: '#000c', description: 'read · src/a.rs · 12 lines · 1.3 KB · stub', tooltip: '[#000c read src/a.rs …]' });
  const grep = resultLabel({ id: '#1a2b', tool: 'grep', size: 10, stub: false, capped: true, isError: true, title: 't' }, []);
  assert.equal(grep.description, 'grep · 10 B · capped · error');
  assert.equal(resultLabel({ id: '#0001', tool: 'read', lines: 1, size: 1, stub: false, capped: false, isError: false, title: '' }, []).description, 'read · 1 line · 1 B');
});

test('a change row says tool, path, kind and +/- counts', () => {
  const diff = '--- a/n.md\n+++ b/n.md\n@@ -1 +1,2 @@\n-old\n+new\n+more\n';
  assert.equal(diffStat(diff), '+2 −1');
  assert.equal(diffStat(''), '');
  assert.equal(changeLabel({ id: '#0003', tool: 'edit', path: '/w/n.md', kind: 'modified', diff }, ['/w']).description, 'edit · n.md (modified) +2 −1');
  assert.equal(changeLabel({ id: '#0004', tool: 'mv', path: '/w/b.md', from: '/w/a.md', kind: 'moved', diff: '' }, ['/w']).description, 'mv · b.md (moved from a.md)');
});

test('the chain keeps ctxfs order and says each origin', () => {
  const files = [
    { path: '/w/sub/AGENTS.md', text: '', origin: 'chain', order: 2 },
    { path: '/home/u/.config/ctxfs/AGENTS.md', text: '', origin: 'global', order: 0 },
    { path: '/w/AGENTS.md', text: '', origin: 'chain', order: 1 },
  ];
  const ordered = orderedChain(files);
  assert.deepEqual(ordered.map((f) => f.path), ['/home/u/.config/ctxfs/AGENTS.md', '/w/AGENTS.md', '/w/sub/AGENTS.md']);
  assert.deepEqual(chainLabel(ordered[2], 2, ['/w']), { label: '3. AGENTS.md', description: 'chain · sub', tooltip: '/w/sub/AGENTS.md\norigin: chain (root to start), order 2' });
  assert.equal(chainLabel(ordered[0], 0, ['/w']).description, 'global · /home/u/.config/ctxfs');
});

test('a stored result document keeps the text the model read', () => {
  const doc = resultDocument({ id: '#000c', tool: 'read', path: '/w/a.rs' }, '#000c', '[#000c read a.rs]\n1: x');
  assert.equal(doc, 'ctxfs result #000c (read /w/a.rs), as stored; ids like #000c are links.\n\n[#000c read a.rs]\n1: x\n');
  const recalled = resultDocument(undefined, '#0001', '[#0007 recall #0001 lines 1-4 of 4]\n1: # Todo\n');
  assert.equal(recalled, 'ctxfs result #0001 (result, lines 1-4 of 4), as stored; ids like #0001 are links.\n\n1: # Todo\n');
});

test('chain entries resolve to the files they name', () => {
  assert.equal(chainFilePath('AGENTS.md', ['/w/p'], '/home/u'), '/w/p/AGENTS.md');
  assert.equal(chainFilePath('sub/AGENTS.md', ['/w/p/'], '/home/u'), '/w/p/sub/AGENTS.md');
  assert.equal(chainFilePath('p/AGENTS.md', ['/w/p', '/w/q'], '/home/u'), '/w/p/AGENTS.md');
  assert.equal(chainFilePath('~/.config/ctxfs/AGENTS.md (global)', ['/w'], '/home/u/'), '/home/u/.config/ctxfs/AGENTS.md');
  assert.equal(chainFilePath('/etc/team.md (configured)', ['/w'], '/home/u'), '/etc/team.md');
  assert.equal(chainFilePath('/w/p/AGENTS.md', ['/w/p'], '/home/u'), '/w/p/AGENTS.md');
  assert.equal(chainFilePath('AGENTS.md', [], '/home/u'), undefined);
  assert.equal(commonAncestor(['/a/b/c', '/a/b/d', '/a/bx']), '/a');
  assert.equal(commonAncestor(['/x', '/y']), '/');
});

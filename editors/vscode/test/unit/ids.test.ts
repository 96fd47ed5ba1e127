// Unit tests of result id detection (src/ids.ts), under plain Node.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { findIds, idAt, isId } from '../../src/ids';

test('ids in a result bracket and in prose are found with their offsets', () => {
  const text = '[#000c read src/a.rs: lines 1-3 of 3] see #1a2b and #10000.';
  assert.deepEqual(findIds(text), [
    { id: '#000c', start: 1, end: 6 },
    { id: '#1a2b', start: 42, end: 47 },
    { id: '#10000', start: 52, end: 58 },
  ]);
});

test('too short, uppercase, inside words, entities and colours with a suffix are not ids', () => {
  for (const text of ['#abc', '#ABCD', 'x#000c', '&#0041;', '##000c', '#000c-x', '#000cg', 'issue#1234']) {
    assert.deepEqual(findIds(text), [], text);
  }
});

test('isId and idAt', () => {
  assert.equal(isId('#000c'), true);
  assert.equal(isId('#000'), false);
  assert.equal(isId(' #000c'), false);
  assert.equal(idAt('open #0012 now', 7)?.id, '#0012');
  assert.equal(idAt('open #0012 now', 2), undefined);
});

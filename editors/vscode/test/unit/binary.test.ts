// Unit tests of finding the ctxfs binary (src/binary.ts) on a scratch directory.
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { findBinary } from '../../src/binary';

test('the setting wins, then PATH, else a sentence with what to do', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ctxfs-bin-'));
  try {
    const bin = join(dir, 'ctxfs');
    writeFileSync(bin, '#!/bin/sh\n');
    chmodSync(bin, 0o755);
    const plain = join(dir, 'plain');
    writeFileSync(plain, '');
    assert.deepEqual(findBinary(bin, '/nowhere'), { path: bin, from: 'setting' });
    assert.deepEqual(findBinary('', `/nowhere:${dir}`), { path: bin, from: 'PATH' });
    assert.deepEqual(findBinary(undefined, `${dir}`), { path: bin, from: 'PATH' });
    assert.match((findBinary(plain, dir) as { problem: string }).problem, /no executable file is there/);
    assert.match((findBinary('bin/ctxfs', dir) as { problem: string }).problem, /not an absolute path/);
    assert.match((findBinary(undefined, '/nowhere') as { problem: string }).problem, /ctxfs was not found: ctxfs.path is not set and no ctxfs is on PATH/);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

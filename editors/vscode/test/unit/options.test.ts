// Unit tests of settings → initializationOptions and the protocol check (src/options.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initializationOptions, protocolProblem } from '../../src/options';

test('set values map to their options; unset and empty ones are left out', () => {
  assert.deepEqual(initializationOptions({}), { options: {}, problems: [] });
  assert.deepEqual(
    initializationOptions({ mode: 'trust', embedder: 'http://127.0.0.1:8080/v1', embedderModel: ' m ', host: 'fresh', approvalTimeout: 30.5, data: '/d', config: '' }),
    { options: { mode: 'trust', embedder: 'http://127.0.0.1:8080/v1', embedderModel: 'm', host: 'fresh', approvalTimeout: 31, data: '/d' }, problems: [] },
  );
  assert.deepEqual(initializationOptions({ embedder: 'minilm', mode: '' }).options, { embedder: 'minilm' });
});

test('bad values are left out, each with a sentence', () => {
  const { options, problems } = initializationOptions({ mode: 'yolo', embedder: 'ftp://x', host: 'both', approvalTimeout: 0 });
  assert.deepEqual(options, {});
  assert.equal(problems.length, 4);
  assert.match(problems[0], /ctxfs\.mode "yolo" is none of read-only, ask, accept-edits, trust/);
  assert.match(problems[3], /approvalTimeout must be a number of seconds above 0/);
});

test('a server older than protocol 2, or not ctxfs, is refused with a way out', () => {
  assert.equal(protocolProblem({ ctxfs: { protocol: 2, version: '0.3.0' } }, '/b/ctxfs'), undefined);
  assert.equal(protocolProblem({ ctxfs: { protocol: 3 } }, '/b/ctxfs'), undefined);
  assert.match(protocolProblem({ ctxfs: { protocol: 1 } }, '/b/ctxfs') ?? '', /\/b\/ctxfs is an older ctxfs speaking protocol 1; this extension needs protocol 2 or newer. Install a newer ctxfs/);
  assert.match(protocolProblem({ ctxfs: { protocol: 1, version: '0.1.0' } }, 'x') ?? '', /x is ctxfs 0\.1\.0 speaking protocol 1/);
  assert.match(protocolProblem(undefined, '/bin/cat') ?? '', /did not answer as ctxfs/);
});

// Unit tests of how a stored result's text is fetched (src/resultText.ts): ctxfs/resultText first,
// ctxfs/recall only when ctxfs answers MethodNotFound. The request function is a stand-in here;
// the end-to-end test drives the real server.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { METHOD_NOT_FOUND, storedResultText, type Request } from '../../src/resultText';

function fake(answers: Record<string, () => unknown>): { request: Request; sent: [string, unknown][] } {
  const sent: [string, unknown][] = [];
  const request = (async (method: string, params: unknown) => {
    sent.push([method, params]);
    const answer = answers[method];
    if (!answer) throw Object.assign(new Error('Method not found'), { code: METHOD_NOT_FOUND });
    return answer();
  }) as Request;
  return { request, sent };
}

test('a result is shown through ctxfs/resultText, and recall is not sent', async () => {
  const { request, sent } = fake({ 'ctxfs/resultText': () => ({ id: '#000c', text: '1: alpha\n' }) });
  assert.deepEqual(await storedResultText(request, 's1', '#000c'), { text: '1: alpha\n', recalled: false });
  assert.deepEqual(sent, [['ctxfs/resultText', { session: 's1', id: '#000c' }]]);
});

test('an older ctxfs without ctxfs/resultText is asked to recall', async () => {
  const { request, sent } = fake({ 'ctxfs/recall': () => ({ id: '#000d', text: '[#000d recall #000c lines 1-1 of 1]\n1: alpha\n' }) });
  const stored = await storedResultText(request, 's1', '#000c');
  assert.equal(stored.recalled, true);
  assert.match(stored.text, /^\[#000d recall #000c/);
  assert.deepEqual(sent.map(([m]) => m), ['ctxfs/resultText', 'ctxfs/recall']);
});

test('other errors (an unknown id) are not retried with recall', async () => {
  const { request, sent } = fake({
    'ctxfs/resultText': () => {
      throw Object.assign(new Error('no result #0fff in this session'), { code: -32602 });
    },
    'ctxfs/recall': () => ({ text: 'should not be asked' }),
  });
  await assert.rejects(storedResultText(request, 's1', '#0fff'), /no result #0fff/);
  assert.deepEqual(sent.map(([m]) => m), ['ctxfs/resultText']);
});

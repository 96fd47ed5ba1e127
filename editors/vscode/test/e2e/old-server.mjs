#!/usr/bin/env node
// A stand-in for a ctxfs older than protocol 2, for the end-to-end test of the extension's
// refusal: it answers `initialize` as such a ctxfs would (experimental.ctxfs.protocol 1) and
// `shutdown`, and exits on `exit` or when stdin closes. It is no ctxfs and does nothing else.
let buffer = Buffer.alloc(0);
const send = (msg) => {
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...msg }));
  process.stdout.write(`Content-Length: ${body.length}\r\n\r\n`);
  process.stdout.write(body);
};
process.stdin.on('data', (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  for (;;) {
    const end = buffer.indexOf('\r\n\r\n');
    if (end < 0) return;
    const length = Number(/Content-Length: (\d+)/i.exec(buffer.subarray(0, end).toString())?.[1]);
    if (buffer.length < end + 4 + length) return;
    const msg = JSON.parse(buffer.subarray(end + 4, end + 4 + length).toString());
    buffer = buffer.subarray(end + 4 + length);
    if (msg.method === 'initialize') {
      send({ id: msg.id, result: { capabilities: { experimental: { ctxfs: { protocol: 1, methods: ['ctxfs/call'] } } }, serverInfo: { name: 'ctxfs', version: '0.0.1' } } });
    } else if (msg.method === 'shutdown') {
      send({ id: msg.id, result: null });
    } else if (msg.method === 'exit') {
      process.exit(0);
    } else if (msg.id !== undefined) {
      send({ id: msg.id, error: { code: -32601, message: 'Method not found' } });
    }
  }
});
process.stdin.on('end', () => process.exit(0));

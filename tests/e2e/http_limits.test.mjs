// The HTTP layer at its limits, over raw sockets where a client library would hide the bytes: the
// API key and every limit checked before any body is read (chunked bodies too), heads bounded in
// size and time, slowloris unable to starve /health, connection caps, pipelining, Range ignored,
// JSON whatever the content type, work cancelled when nobody waits, and a graceful SIGTERM.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { metrics, modelId, request, sseEvents, startServer, waitForMetrics } from './harness.mjs';

const apiKey = 'test-key';
const auth = { authorization: `Bearer ${apiKey}` };

// A raw connection: write, read everything until the server closes (or the timeout), say whether it closed.
function rawSocket(port, { localAddress } = {}) {
  const socket = net.connect({ port, host: '127.0.0.1', localAddress });
  const state = { socket, data: '', closed: false, error: null };
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => { state.data += chunk; });
  socket.on('error', (error) => { state.error = error; });
  socket.on('close', () => { state.closed = true; });
  state.connected = new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  state.waitFor = async (predicate, timeoutMs = 5_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!predicate(state) && Date.now() < deadline) await sleep(10);
    return predicate(state);
  };
  return state;
}

const statusOf = (text) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
const jsonOf = (text) => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
const hasWholeReply = (state) => {
  const head = state.data.indexOf('\r\n\r\n');
  const length = /content-length: (\d+)/i.exec(state.data)?.[1];
  return head >= 0 && length !== undefined && state.data.length >= head + 4 + Number(length);
};

function rssKiB(pid) {
  return Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
}

describe('the HTTP layer at its limits', () => {
  let server;
  const headers = () => ({ ...auth });
  before(async () => {
    server = await startServer(['--api-key', apiKey, '--parallel', '2', '--max-body-bytes', '65536',
      '--head-timeout', '2', '--idle-timeout', '2', '--max-connections-per-client', '90',
      '--default-max-tokens', '5']);
    server.headers = auth;
  });
  after(async () => { await server?.stop(); });

  test('a chunked body without the key is answered 401 before any body byte is sent', { timeout: 20_000 }, async () => {
    const raw = rawSocket(server.port);
    await raw.connected;
    raw.socket.write('POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
    assert.ok(await raw.waitFor(hasWholeReply, 3_000), `no reply to the head alone: ${raw.data}`);
    assert.equal(statusOf(raw.data), 401);
    assert.equal(jsonOf(raw.data).error.code, 'invalid_api_key');
    raw.socket.destroy();
  });

  test('300 MB of chunked body without the key: 401, and the server does not grow', { timeout: 60_000 }, async () => {
    const before = rssKiB(server.child.pid);
    let peak = before;
    const sampler = setInterval(() => { peak = Math.max(peak, rssKiB(server.child.pid)); }, 20);
    const raw = rawSocket(server.port);
    await raw.connected;
    raw.socket.write('POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
    const piece = Buffer.alloc(1 << 20, 'a');
    const chunk = Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]);
    for (let sent = 0; sent < 300 && !raw.closed && !raw.error; ++sent) {
      if (!raw.socket.write(chunk)) await Promise.race([new Promise((r) => raw.socket.once('drain', r)), sleep(2_000)]);
    }
    await raw.waitFor((s) => s.closed || s.error, 5_000);
    clearInterval(sampler);
    assert.equal(statusOf(raw.data), 401, raw.data.slice(0, 300));
    assert.ok(peak - before < 32 * 1024, `the server grew by ${(peak - before) >> 10} MiB`);
    raw.socket.destroy();
  });

  test('a body over the limit is 413 whether chunked or with Content-Length (a limit checked before the key)', { timeout: 20_000 }, async () => {
    const body = JSON.stringify({ content: 'x'.repeat(100_000) });
    const chunked = rawSocket(server.port);
    await chunked.connected;
    chunked.socket.write(`POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\n` +
      `Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`);
    assert.ok(await chunked.waitFor(hasWholeReply));
    assert.equal(statusOf(chunked.data), 413, chunked.data.slice(0, 300));
    assert.match(jsonOf(chunked.data).error.message, /limit of 65536 bytes/);
    const sized = rawSocket(server.port);
    await sized.connected;
    sized.socket.write('POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\n');  // no key
    assert.ok(await sized.waitFor(hasWholeReply));
    assert.equal(statusOf(sized.data), 413);
    assert.equal(jsonOf(sized.data).error.code, 'request_too_large');
  });

  test('a request line without an end, and too many or too long header lines: 4xx and closed', { timeout: 20_000 }, async () => {
    const cases = [
      ['GET /' + 'a'.repeat(1 << 20), [414, 431]],
      ['GET /health HTTP/1.1\r\n' + 'X-A: b\r\n'.repeat(2_000), [431]],
      ['GET /health HTTP/1.1\r\nX-Long: ' + 'b'.repeat(10_000) + '\r\n\r\n', [431]],
    ];
    for (const [bytes, statuses] of cases) {
      const raw = rawSocket(server.port);
      await raw.connected;
      raw.socket.write(bytes);
      assert.ok(await raw.waitFor((s) => s.closed, 5_000), 'the connection stays open');
      assert.ok(statuses.includes(statusOf(raw.data)), raw.data.slice(0, 200));
      assert.equal(typeof jsonOf(raw.data).error.message, 'string');
    }
  });

  test('slowloris: 80 connections trickling headers never keep /health from answering, and are closed at the head deadline', { timeout: 30_000 }, async () => {
    const slow = [];
    for (let i = 0; i < 80; ++i) {
      const raw = rawSocket(server.port);
      slow.push(raw);
    }
    await Promise.all(slow.map((s) => s.connected));
    for (const s of slow) s.socket.write('POST /v1/chat/completions HTTP/1.1\r\n');
    const trickle = setInterval(() => { for (const s of slow) if (!s.closed) s.socket.write('X-Slow: 1\r\n'); }, 300);
    try {
      for (let i = 0; i < 5; ++i) {
        const started = Date.now();
        const reply = await request(server, '/health', { method: 'GET' });
        assert.equal(reply.status, 200);
        assert.ok(Date.now() - started < 1_000, `/health took ${Date.now() - started} ms`);
        await sleep(200);
      }
      const allClosed = await Promise.all(slow.map((s) => s.waitFor((x) => x.closed, 6_000)));
      assert.ok(allClosed.every(Boolean), 'a slowloris connection outlived the head deadline');
    } finally {
      clearInterval(trickle);
      for (const s of slow) s.socket.destroy();
    }
  });

  test('connections over the per-client cap get 503; other clients are still served', { timeout: 20_000 }, async () => {
    const held = [];
    for (let i = 0; i < 90; ++i) held.push(rawSocket(server.port, { localAddress: '127.0.0.2' }));
    await Promise.all(held.map((s) => s.connected));
    await sleep(100);
    const over = rawSocket(server.port, { localAddress: '127.0.0.2' });
    await over.connected;
    over.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.ok(await over.waitFor(hasWholeReply, 2_000));
    assert.equal(statusOf(over.data), 503);
    assert.equal(jsonOf(over.data).error.code, 'too_many_connections');
    assert.equal((await request(server, '/health', { method: 'GET' })).status, 200);
    for (const s of [...held, over]) s.socket.destroy();
  });

  test('another host (DNS rebinding) or another site\'s page (a cross-site form) is refused 403; this server\'s names and page pass', { timeout: 20_000 }, async () => {
    const send = async (text) => {
      const socket = rawSocket(server.port);
      await socket.connected;
      socket.socket.write(text);
      await socket.waitFor(hasWholeReply);
      socket.socket.destroy();
      return socket.data;
    };
    const port = server.port;
    // A browser's request (Sec-Fetch-*, Origin) under a rebound name; curl may name any host.
    const evilHost = await send(`GET /v1/models HTTP/1.1\r\nHost: rebind.attacker.example:${port}\r\n` +
      `Sec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\nAuthorization: Bearer ${apiKey}\r\n\r\n`);
    assert.equal(statusOf(evilHost), 403, evilHost);
    assert.equal(jsonOf(evilHost).error.code, 'host_not_allowed');
    assert.equal(statusOf(await send(`GET /health HTTP/1.1\r\nHost: x\r\n\r\n`)), 200);
    const body = JSON.stringify({ prompt: 'a', max_tokens: 1 });
    const form = (origin) => `POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nOrigin: ${origin}\r\n` +
      `Authorization: Bearer ${apiKey}\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    for (const origin of ['https://attacker.example', 'null', 'http://127.0.0.1.attacker.example']) {
      const crossSite = await send(form(origin));
      assert.equal(statusOf(crossSite), 403, `${origin}: ${crossSite}`);
      assert.equal(jsonOf(crossSite).error.code, 'origin_not_allowed');
    }
    assert.equal(statusOf(await send(form(`http://127.0.0.1:${port}`))), 200, 'the server\'s own page');
    for (const name of [`localhost:${port}`, `[::1]:${port}`, `127.0.0.1:${port}`])
      assert.equal(statusOf(await send(`GET /health HTTP/1.1\r\nHost: ${name}\r\nSec-Fetch-Mode: navigate\r\n\r\n`)), 200, name);
  });

  test('a request without the key is 401 with WWW-Authenticate: Bearer (RFC 9110)', { timeout: 10_000 }, async () => {
    const refused = await request(server, '/v1/models', { method: 'GET' });
    assert.equal(refused.status, 401, refused.text);
    assert.equal(refused.headers.get('www-authenticate'), 'Bearer');
  });

  test('pipelined requests are all answered, in order, on one connection', { timeout: 10_000 }, async () => {
    const raw = rawSocket(server.port);
    await raw.connected;
    const started = Date.now();
    raw.socket.write(`GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${apiKey}\r\n\r\n` +
      'GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n' +
      'GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.ok(await raw.waitFor((s) => (s.data.match(/HTTP\/1\.1 /g) ?? []).length === 3 && s.data.endsWith('}'), 3_000),
      raw.data);
    assert.ok(Date.now() - started < 2_000);
    const statuses = [...raw.data.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.deepEqual(statuses, [200, 404, 200]);
    assert.match(raw.data, /"object":"list"[\s\S]*not_found[\s\S]*"status":"ok"/);
    raw.socket.destroy();
  });

  test('an idle kept-alive connection is closed at the idle deadline', { timeout: 10_000 }, async () => {
    const raw = rawSocket(server.port);
    await raw.connected;
    raw.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.ok(await raw.waitFor(hasWholeReply));
    assert.match(raw.data, /Connection: keep-alive/i);
    assert.ok(await raw.waitFor((s) => s.closed, 4_000), 'still open after the idle deadline');
  });

  test('64 simultaneous connects are all answered promptly (the listen backlog holds a burst)', { timeout: 20_000 }, async () => {
    const times = await Promise.all(Array.from({ length: 64 }, async () => {
      const started = Date.now();
      const reply = await fetch(`${server.baseUrl}/health`);
      await reply.text();
      return Date.now() - started;
    }));
    assert.ok(Math.max(...times) < 900, `slowest connect: ${Math.max(...times)} ms`);
  });

  test('Range is ignored on API replies', { timeout: 10_000 }, async () => {
    const models = await request(server, '/v1/models', { method: 'GET', headers: { ...headers(), range: 'bytes=0-9' } });
    assert.equal(models.status, 200);
    assert.equal(models.headers.get('content-range'), null);
    assert.equal(models.json.object, 'list');
    const ranges = Array.from({ length: 400 }, (_, i) => `${i}-${i + 1000}`).join(',');
    const plain = await request(server, '/detokenize', { body: { tokens: [1, 2, 3, 4] }, headers: headers() });
    const ranged = await request(server, '/detokenize', { body: { tokens: [1, 2, 3, 4] },
      headers: { ...headers(), range: `bytes=${ranges}` } });
    assert.equal(ranged.status, 200);
    assert.equal(ranged.text, plain.text);
  });

  test('a form-urlencoded body over 8 KB is read as JSON like any other', { timeout: 10_000 }, async () => {
    const content = 'hello '.repeat(3_000);
    const reply = await request(server, '/tokenize', { body: JSON.stringify({ content }),
      headers: { ...headers(), 'content-type': 'application/x-www-form-urlencoded' } });
    assert.equal(reply.status, 200, reply.text);
    assert.ok(reply.json.tokens.length > 1_000);
  });

  test('the developer role is the system turn', { timeout: 20_000 }, async () => {
    const ask = (role) => request(server, '/v1/chat/completions', { headers: headers(), body: {
      model: modelId, temperature: 0, max_tokens: 4,
      messages: [{ role, content: 'Answer briefly.' }, { role: 'user', content: 'hi' }] } });
    const [developer, system] = await Promise.all([ask('developer'), ask('system')]);
    assert.equal(developer.status, 200, developer.text);
    assert.equal(developer.json.token_sha, system.json.token_sha);
    assert.equal(developer.json.usage.prompt_tokens, system.json.usage.prompt_tokens);
  });

  test('a chat without max_tokens stops at the server default (--default-max-tokens)', { timeout: 20_000 }, async () => {
    const reply = await request(server, '/v1/chat/completions', { headers: headers(), body: {
      model: modelId, temperature: 0, messages: [{ role: 'user', content: 'Tell me a long story.' }] } });
    assert.equal(reply.status, 200, reply.text);
    assert.ok(reply.json.usage.completion_tokens <= 5);
    if (reply.json.usage.completion_tokens === 5) assert.equal(reply.json.choices[0].finish_reason, 'length');
  });

  test('non-streaming clients that leave free their lanes within a round', { timeout: 60_000 }, async () => {
    const long = { model: modelId, max_tokens: 3_000, messages: [{ role: 'user', content: 'Write a novel.' }] };
    const aborts = Array.from({ length: 6 }, () => new AbortController());
    const pending = aborts.map((controller) => request(server, '/v1/chat/completions',
      { body: long, headers: headers(), signal: controller.signal }).catch(() => 'aborted'));
    await waitForMetrics(server, (m) => m.tensorfold_lanes_live === 2, 20_000);
    await sleep(500);
    for (const controller of aborts) controller.abort();
    assert.deepEqual(await Promise.all(pending), Array(6).fill('aborted'));
    const atAbort = await metrics(server);
    const freed = await waitForMetrics(server, (m) => m.tensorfold_lanes_live === 0, 5_000);
    assert.equal(freed.tensorfold_lanes_live, 0, 'lanes kept generating for clients that left');
    // The engine cancels at the start of the round after the server notices; a few rounds of slack
    // cover the moment between the client's abort and the server's read of the FIN on a busy machine
    // (the old layer ran all 3,000 tokens).
    assert.ok(freed.tensorfold_rounds_total - atAbort.tensorfold_rounds_total <= 10,
      `${freed.tensorfold_rounds_total - atAbort.tensorfold_rounds_total} rounds ran after the clients left`);
    const started = Date.now();
    const short = await request(server, '/v1/chat/completions', { headers: headers(),
      body: { ...long, max_tokens: 8 } });
    assert.equal(short.status, 200);
    assert.ok(Date.now() - started < 10_000, `an 8-token request took ${Date.now() - started} ms`);
  });
});

// Sends SIGTERM and waits for the exit: its code and how long it took.
async function terminate(server) {
  const exited = new Promise((resolve) => server.child.once('exit', (code) => resolve(code)));
  const signalled = Date.now();
  server.child.kill('SIGTERM');
  const code = await exited;
  return { code, exitMs: Date.now() - signalled };
}

test('--allowed-host lets a reverse proxy\'s name through, Host and Origin alike', { timeout: 60_000 }, async () => {
  const server = await startServer(['--allowed-host', 'llm.internal.example']);
  try {
    const ask = (headers) => new Promise((resolve, reject) => {
      const socket = net.connect({ port: server.port, host: '127.0.0.1' });
      let data = '';
      socket.setEncoding('latin1');
      socket.on('data', (chunk) => { data += chunk; if (/\r\n\r\n/.test(data)) { socket.destroy(); resolve(data); } });
      socket.on('error', reject);
      socket.write(`GET /v1/models HTTP/1.1\r\n${headers}\r\n`);
    });
    assert.match(await ask('Host: llm.internal.example\r\nOrigin: https://llm.internal.example\r\n'), /^HTTP\/1\.1 200/);
    assert.match(await ask('Host: other.example\r\nSec-Fetch-Mode: cors\r\n'), /^HTTP\/1\.1 403/);
  } finally {
    await server.stop();
  }
});

describe('graceful shutdown', () => {
  test('SIGTERM ends a stream with a shutting_down error and [DONE], answers running and queued requests 503, and exits in time', { timeout: 90_000 }, async () => {
    const server = await startServer(['--parallel', '2', '--shutdown-timeout', '5']);
    try {
      const long = { model: modelId, max_tokens: 3_000, messages: [{ role: 'user', content: 'Write a novel.' }] };
      const stream = fetch(`${server.baseUrl}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...long, stream: true }) })
        .then((r) => r.text());
      const whole = request(server, '/v1/chat/completions', { body: long });
      await waitForMetrics(server, (m) => m.tensorfold_lanes_live === 2 && m.tensorfold_generated_tokens_total > 2, 20_000);
      const queued = request(server, '/v1/chat/completions', { body: long });  // both lanes are taken
      await waitForMetrics(server, (m) => m.tensorfold_queue_depth === 1, 20_000);
      const { code, exitMs } = await terminate(server);
      assert.equal(code, 0, server.log());
      assert.ok(exitMs < 5_000, `exit took ${exitMs} ms`);
      // A reply cut short never looks complete: the stream's text so far, then an error event.
      const events = sseEvents(await stream);
      assert.equal(events.at(-1), '[DONE]');
      assert.equal(events.at(-2).error?.code, 'shutting_down', JSON.stringify(events.at(-2)));
      assert.ok(events.slice(0, -2).some((event) => event.choices?.[0]?.delta?.content), 'the text so far came first');
      for (const reply of [await whole, await queued]) {
        assert.equal(reply.status, 503, reply.text);
        assert.equal(reply.json.error.code, 'shutting_down');
      }
    } finally {
      await server.stop();
    }
  });

  test('SIGTERM while the model is still loading exits in time', { timeout: 90_000 }, async () => {
    // Random weights of a 1.7B shape take seconds to make and report no progress: the slow case.
    const server = await startServer(['--synthetic', 'qwen3-1.7b', '--shutdown-timeout', '1'], { waitUntilReady: false });
    try {
      const health = await request(server, '/health', { method: 'GET' });
      assert.equal(health.status, 503, health.text);
      assert.equal(health.json.status, 'loading');
      const { code, exitMs } = await terminate(server);
      assert.equal(code, 0, server.log());
      assert.ok(exitMs < 4_000, `exit took ${exitMs} ms`);
      assert.match(server.log(), /still loading|loading stopped/);
    } finally {
      await server.stop();
    }
  });
});

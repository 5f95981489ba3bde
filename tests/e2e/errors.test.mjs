// Every bad input answers an OpenAI-style JSON error with a 4xx status (raw HTTP), and the server
// keeps serving; a second instance checks the API key and a full queue.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { modelId, request, startServer, waitForMetrics } from './harness.mjs';

const chat = (extra = {}) => ({
  model: modelId, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra,
});
// Inputs whose walk would recurse once per level, or multiply: each must be a 400, never a crash.
const nestedSchema = (depth) => {
  let schema = { type: 'string' };
  for (let i = 0; i < depth; ++i) schema = { type: 'array', items: schema };
  return schema;
};
const doublingGrammar = (levels) => ['root ::= d0',
  ...Array.from({ length: levels }, (_, i) => `d${i} ::= d${i + 1} d${i + 1}`), `d${levels} ::= "" | "a"`].join('\n');

function assertApiError(reply, status, param) {
  assert.equal(reply.status, status, reply.text);
  assert.equal(typeof reply.json?.error?.message, 'string', reply.text);
  assert.ok(reply.json.error.message.length > 0);
  assert.equal(typeof reply.json.error.type, 'string');
  assert.ok('param' in reply.json.error && 'code' in reply.json.error);
  if (param !== undefined) assert.equal(reply.json.error.param, param, reply.text);
}

describe('bad input', () => {
  let server;
  before(async () => { server = await startServer(['--parallel', '2', '--max-body-bytes', '65536']); });
  after(async () => { await server?.stop(); });

  const chatCases = [
    ['wrong type for temperature', chat({ temperature: 'hot' }), 'temperature'],
    ['wrong type for max_tokens', chat({ max_tokens: '8' }), 'max_tokens'],
    ['wrong type for stream', chat({ stream: 'yes' }), 'stream'],
    ['wrong type for skip_special_tokens', chat({ skip_special_tokens: 'false' }), 'skip_special_tokens'],
    ['negative max_tokens', chat({ max_tokens: -1 }), 'max_tokens'],
    ['zero max_tokens', chat({ max_tokens: 0 }), 'max_tokens'],
    ['zero max_completion_tokens', chat({ max_completion_tokens: 0 }), 'max_completion_tokens'],
    ['zero n', chat({ n: 0 }), 'n'],
    ['absurd max_tokens', chat({ max_tokens: 1e12 }), 'max_tokens'],
    ['absurd max_completion_tokens', chat({ max_completion_tokens: 10_000_000 }),
      'max_completion_tokens'],
    ['top_p above 1', chat({ top_p: 1.5 }), 'top_p'],
    ['top_p below 0', chat({ top_p: -0.5 }), 'top_p'],
    ['temperature above 2', chat({ temperature: 3 }), 'temperature'],
    ['top_logprobs above 20', chat({ logprobs: true, top_logprobs: 21 }), 'top_logprobs'],
    ['n above 16', chat({ n: 17 }), 'n'],
    ['five stop strings', chat({ stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop'],
    ['missing messages', { model: modelId, max_tokens: 4 }, 'messages'],
    ['empty messages', chat({ messages: [] }), 'messages'],
    ['unknown role', chat({ messages: [{ role: 'wizard', content: 'x' }] }), 'messages[0].role'],
    ['image content part', chat({
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
    }), 'messages[0].content[0]'],
    ['a schema nested 1,000 deep', chat({
      response_format: { type: 'json_schema', json_schema: { name: 'deep', schema: nestedSchema(1000) } },
    }), undefined],
    ['a grammar with groups 20,000 deep', chat({ grammar: `root ::= ${'('.repeat(20000)}"a"${')'.repeat(20000)}` }),
      'grammar'],
    ['a grammar with 2^30 parses at its start', chat({ grammar: doublingGrammar(30), stream: true }), 'grammar'],
  ];
  for (const [name, body, param] of chatCases) {
    test(`chat: ${name} -> 400`, { timeout: 10_000 }, async () => {
      assertApiError(await request(server, '/v1/chat/completions', { body }), 400, param);
    });
  }

  const completionCases = [
    ['missing prompt', { model: modelId }, 'prompt'],
    ['empty prompt', { model: modelId, prompt: '' }, 'prompt'],
    ['empty token array', { model: modelId, prompt: [] }, 'prompt'],
    ['negative token id', { model: modelId, prompt: [1, -2] }, 'prompt'],
    ['token id outside the vocabulary', { model: modelId, prompt: [1, 999999999] }, 'prompt'],
    ['logprobs above 5', { model: modelId, prompt: 'x', logprobs: 6 }, 'logprobs'],
    ['wrong type for skip_special_tokens', { model: modelId, prompt: 'x', skip_special_tokens: 0 }, 'skip_special_tokens'],
  ];
  for (const [name, body, param] of completionCases) {
    test(`completions: ${name} -> 400`, { timeout: 10_000 }, async () => {
      assertApiError(await request(server, '/v1/completions', { body }), 400, param);
    });
  }

  test('unknown model -> 404 model_not_found', { timeout: 10_000 }, async () => {
    const reply = await request(server, '/v1/chat/completions', { body: chat({ model: 'gpt-9' }) });
    assertApiError(reply, 404, 'model');
    assert.equal(reply.json.error.code, 'model_not_found');
  });

  test('malformed JSON -> 400', { timeout: 10_000 }, async () => {
    assertApiError(await request(server, '/v1/chat/completions', { body: '{"messages": [' }), 400);
    assertApiError(await request(server, '/v1/completions', { body: '[1, 2, 3]' }), 400);
    assertApiError(await request(server, '/v1/completions', { body: '' }), 400);
  });

  test('invalid UTF-8 -> 400', { timeout: 10_000 }, async () => {
    const bytes = new TextEncoder().encode('{"model": "x", "prompt": "AB"}');
    bytes[bytes.length - 4] = 0xff;  // the "A"
    bytes[bytes.length - 3] = 0xc3;  // the "B": a lead byte with no continuation
    const reply = await request(server, '/v1/completions', { body: bytes });
    assertApiError(reply, 400);
    assert.match(reply.json.error.message, /UTF-8/);
  });

  test('body over the limit -> 413', { timeout: 10_000 }, async () => {
    const body = chat({ messages: [{ role: 'user', content: 'x'.repeat(100_000) }] });
    assertApiError(await request(server, '/v1/chat/completions', { body }), 413);
  });

  test('prompt plus max_tokens over the context -> 400 with the reason', { timeout: 10_000 },
    async () => {
      const reply = await request(server, '/v1/completions', {
        body: { model: modelId, prompt: 'hello there', max_tokens: 4095 },
      });
      assertApiError(reply, 400);
      assert.equal(reply.json.error.code, 'context_length_exceeded');
      assert.equal(reply.json.error.param, 'max_tokens');
      assert.match(reply.json.error.message, /context/);
    });

  test('HEAD answers a GET route with its head alone', { timeout: 10_000 }, async () => {
    for (const path of ['/health', '/v1/models']) {
      const get = await fetch(`${server.baseUrl}${path}`);
      const head = await fetch(`${server.baseUrl}${path}`, { method: 'HEAD' });
      assert.equal(head.status, get.status, path);
      assert.equal(head.headers.get('content-type'), get.headers.get('content-type'), path);
      assert.equal(await head.text(), '', path);
    }
    const post = await fetch(`${server.baseUrl}/v1/chat/completions`, { method: 'HEAD' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'POST');
  });

  test('unknown route -> 404, wrong method -> 405', { timeout: 10_000 }, async () => {
    assertApiError(await request(server, '/v1/nothing-here', { method: 'GET' }), 404);
    assertApiError(await request(server, '/v1/nothing-here', { body: {} }), 404);
    const wrongMethod = await request(server, '/v1/chat/completions', { method: 'GET' });
    assertApiError(wrongMethod, 405);
    assert.match(wrongMethod.headers.get('allow'), /POST/);
    assertApiError(await request(server, '/health', { body: {} }), 405);
  });

  test('unknown fields are ignored', { timeout: 30_000 }, async () => {
    const reply = await request(server, '/v1/chat/completions', {
      body: chat({ frobnicate: { deeply: [1, 2] }, user: 'someone' }),
    });
    assert.equal(reply.status, 200, reply.text);
  });

  test('the server still serves after all of the above', { timeout: 30_000 }, async () => {
    const reply = await request(server, '/v1/chat/completions', { body: chat() });
    assert.equal(reply.status, 200, reply.text);
    assert.match(reply.json.token_sha, /^[0-9a-f]{64}$/);
  });
});

describe('API key and admission', () => {
  let server;
  const apiKey = 'sk-test-key';
  const auth = { authorization: `Bearer ${apiKey}` };
  before(async () => {
    server = await startServer(['--api-key', apiKey, '--parallel', '1', '--max-queue', '1']);
    server.headers = auth;
  });
  after(async () => { await server?.stop(); });

  test('a missing or wrong key -> 401; /health needs none', { timeout: 10_000 }, async () => {
    assertApiError(await request(server, '/v1/chat/completions', { body: chat() }), 401);
    assertApiError(await request(server, '/v1/models', { method: 'GET' }), 401);
    assertApiError(await request(server, '/v1/models', {
      method: 'GET', headers: { authorization: 'Bearer wrong' },
    }), 401);
    assert.equal((await request(server, '/health', { method: 'GET' })).status, 200);
    assert.equal((await request(server, '/v1/models', { method: 'GET', headers: auth })).status, 200);
    // The scheme is case-insensitive; the key is not.
    assert.equal((await request(server, '/v1/models', {
      method: 'GET', headers: { authorization: auth.authorization.replace('Bearer', 'bearer') },
    })).status, 200);
    assertApiError(await request(server, '/v1/models', {
      method: 'GET', headers: { authorization: auth.authorization.toUpperCase() },
    }), 401);
  });

  test('n choices are queued together: an idle server serves as many as it holds, more is a 400',
    { timeout: 60_000 }, async () => {
      const body = (n) => ({ prompt: 'def f(', max_tokens: 3, n, temperature: 1, seed: 5 });
      const two = await request(server, '/v1/completions', { body: body(2), headers: auth });
      assert.equal(two.status, 200, two.text);
      assert.equal(two.json.choices.length, 2);
      assertApiError(await request(server, '/v1/completions', { body: body(3), headers: auth }), 400, 'n');
    });

  test('a full queue -> 503 with Retry-After', { timeout: 60_000 }, async () => {
    // One lane and one queue slot: of four long streams at once, at least two are turned away.
    const controllers = [];
    const replies = await Promise.all([0, 1, 2, 3].map(async (i) => {
      const controller = new AbortController();
      controllers.push(controller);
      const response = await fetch(`${server.baseUrl}/v1/completions`, {
        method: 'POST',
        signal: controller.signal,
        headers: { 'content-type': 'application/json', ...auth },
        body: JSON.stringify({ prompt: `story ${i}`, max_tokens: 4000, stream: true }),
      });
      if (response.status !== 200) return { status: response.status, headers: response.headers,
        json: await response.json() };
      return { status: 200 };
    }));
    for (const controller of controllers) controller.abort();
    const busy = replies.filter((reply) => reply.status === 503);
    assert.ok(busy.length >= 2, JSON.stringify(replies.map((reply) => reply.status)));
    for (const reply of busy) {
      assert.ok(Number(reply.headers.get('retry-after')) >= 1);
      assert.equal(typeof reply.json.error.message, 'string');
    }
    assert.ok(replies.every((reply) => reply.status === 200 || reply.status === 503));
    const settled = await waitForMetrics(server,
      (values) => values.tensorfold_lanes_live === 0 && values.tensorfold_queue_depth === 0, 20_000);
    assert.equal(settled.tensorfold_lanes_live, 0);
    await sleep(50);
    const after = await request(server, '/v1/completions', {
      body: { prompt: 'after', max_tokens: 3 }, headers: auth,
    });
    assert.equal(after.status, 200, after.text);
  });
});

describe('model ids in paths', () => {
  let server;
  before(async () => { server = await startServer(['--served-model-name', 'org/my model']); });
  after(async () => { await server?.stop(); });

  test('/v1/models/{id} decodes %XX escapes', { timeout: 10_000 }, async () => {
    for (const path of ['org%2Fmy%20model', 'org/my%20model']) {
      const reply = await request(server, `/v1/models/${path}`, { method: 'GET' });
      assert.equal(reply.status, 200, `${path}: ${reply.text}`);
      assert.equal(reply.json.id, 'org/my model');
    }
    assertApiError(await request(server, '/v1/models/org%2Fmy%20modeI', { method: 'GET' }), 404, 'model');
    assertApiError(await request(server, '/v1/models/%ZZ', { method: 'GET' }), 404, 'model');
    assertApiError(await request(server, '/v1/models/%FF', { method: 'GET' }), 404, 'model');
  });
});

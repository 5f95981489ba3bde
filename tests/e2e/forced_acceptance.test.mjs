// Benchmarks force acceptance lengths through the server: a reply's ids come back with
// "return_token_ids", and a server started with --bench-extensions replays them as drafts, L a
// round. The tokens stay the target's; a server without the flag refuses "replay".
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { modelId, openaiClient, request, startServer } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--bench-extensions']);
  client = openaiClient(server);
});
after(async () => { await server?.stop(); });

const body = {
  model: modelId, messages: [{ role: 'user', content: 'Count slowly from one to twenty.' }],
  max_tokens: 48, temperature: 0,
};

test('a replayed reply is accepted L tokens a round and gives the same tokens', async () => {
  const plain = await client.chat.completions.create({ ...body, draft: false, return_token_ids: true });
  const ids = plain.completion_token_ids;
  assert.equal(ids.length, plain.usage.completion_tokens);
  for (const accept of [1, 4, 16]) {
    const replayed = await client.chat.completions.create(
      { ...body, replay: { token_ids: ids, accept }, return_token_ids: true });
    assert.equal(replayed.token_sha, plain.token_sha);
    assert.deepEqual(replayed.completion_token_ids, ids);
    const t = replayed.timings;
    // The prompt's round gives the first token; every later round accepts `accept` drafts (fewer
    // only where the budget ends) and adds its own.
    assert.equal(t.rounds, 1 + Math.ceil((t.predicted_n - 1) / (accept + 1)), JSON.stringify(t));
    assert.equal(t.draft_accepted_n, t.predicted_n - t.rounds, JSON.stringify(t));
  }
});

test('without --bench-extensions a replay is a 400 naming "replay"', async () => {
  const plain = await startServer([]);
  try {
    const reply = await request(plain, '/v1/chat/completions',
      { body: { ...body, replay: { token_ids: [1, 2, 3], accept: 2 } } });
    assert.equal(reply.status, 400, reply.text);
    assert.equal(reply.json.error.param, 'replay');
    assert.match(reply.json.error.message, /--bench-extensions/);
  } finally {
    await plain.stop();
  }
});

test('a synthetic model of a real shape serves through a checkpoint\'s tokenizer, replay included', async () => {
  const synthetic = await startServer(['--synthetic', 'qwen3-0.6b', '--bench-extensions', '--ctx', '128',
    '--parallel', '1']);
  try {
    const models = await request(synthetic, '/v1/models', { method: 'GET' });
    assert.deepEqual(models.json.data.map((m) => m.id), ['qwen3-0.6b']);
    const small = { model: 'qwen3-0.6b', prompt: 'Hello there', max_tokens: 12, temperature: 0 };
    const plain = await request(synthetic, '/v1/completions',
      { body: { ...small, draft: false, return_token_ids: true } });
    assert.equal(plain.status, 200, plain.text);
    const ids = plain.json.completion_token_ids;
    assert.equal(ids.length, 12);
    const replayed = await request(synthetic, '/v1/completions',
      { body: { ...small, replay: { token_ids: ids, accept: 4 } } });
    assert.equal(replayed.status, 200, replayed.text);
    assert.equal(replayed.json.token_sha, plain.json.token_sha);
    assert.equal(replayed.json.timings.rounds, 1 + Math.ceil(11 / 5), JSON.stringify(replayed.json.timings));
  } finally {
    await synthetic.stop();
  }
});

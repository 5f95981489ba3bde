// A Qwen3.5-class hybrid (Gated DeltaNet + gated attention) served by `tensorfold serve --model DIR`:
// /v1/completions through the `openai` client, with speculation on; replies equal the draft-off
// ones and the solo ones when eight run together; a chat resumed from the prefix cache (the
// recurrent state's checkpoints) and a restored slot equal the cold conversation, and the restored
// slot serves its first question again too.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import {
  assertResumedConversation, converse, hybridChatSources, linkedModelDir, metrics, openaiClient, request, startServer,
} from './harness.mjs';

let server;
let client;
let dir;
let modelId;
before(async () => {
  dir = linkedModelDir(hybridChatSources);
  server = await startServer(['--parallel', '8'], { model: dir });
  client = openaiClient(server);
  modelId = (await request(server, '/v1/models', { method: 'GET' })).json.data[0].id;
});
after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// Copy-heavy prompts, so long copy and n-gram drafts are verified and accepted.
const prompts = [
  'def add(a, b):\n    return a + b\n\ndef add(a, b):\n',
  'the cat sat on the mat. the cat sat on the mat. the cat',
  'one two three four five six one two three four five six one two',
  'x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2,',
];

async function completion(prompt, extra = {}) {
  const reply = await client.completions.create({
    model: modelId, prompt, max_tokens: 40, temperature: 0, return_token_ids: true, ...extra,
  });
  assert.equal(reply.choices.length, 1);
  return reply;
}

test('completions with speculation equal the draft-off replies', { timeout: 120_000 }, async () => {
  let drafted_accepted = 0;
  for (const prompt of prompts) {
    for (const sampling of [{}, { temperature: 0.8, seed: 7 }]) {
      const drafted = await completion(prompt, sampling);
      const plain = await completion(prompt, { ...sampling, draft: false });
      assert.equal(drafted.choices[0].text, plain.choices[0].text, prompt);
      assert.deepEqual(drafted.choices[0].completion_token_ids, plain.choices[0].completion_token_ids);
      assert.equal(drafted.token_sha, plain.token_sha);
      assert.equal(plain.timings.draft_n, 0);
      assert.equal(drafted.usage.completion_tokens, 40);
      drafted_accepted += drafted.timings.draft_accepted_n;
    }
  }
  assert.ok(drafted_accepted > 0, 'some drafts were accepted');
});

test('eight concurrent completions equal their solo replies', { timeout: 120_000 }, async () => {
  const requests = [...prompts, ...prompts].map((prompt, i) => ({ prompt, seed: i, temperature: i % 2 ? 0.7 : 0 }));
  const solo = [];
  for (const r of requests) solo.push(await completion(r.prompt, { seed: r.seed, temperature: r.temperature }));
  const together = await Promise.all(
    requests.map((r) => completion(r.prompt, { seed: r.seed, temperature: r.temperature })));
  for (let i = 0; i < requests.length; ++i) assert.equal(together[i].token_sha, solo[i].token_sha, `request ${i}`);
});

test('the model is listed and a bad parameter is a 400 naming it', async () => {
  const models = await request(server, '/v1/models', { method: 'GET' });
  assert.equal(models.status, 200);
  const bad = await request(server, '/v1/completions', { body: { prompt: 'x', max_tokens: -1 } });
  assert.equal(bad.status, 400);
  assert.match(bad.text, /max_tokens/);
});

test('a five-turn chat resumes from the cache and equals the cold conversation', { timeout: 240_000 }, async () => {
  const cold = await startServer(['--no-prompt-cache'], { model: dir });
  try {
    const ask = (c) => (messages) => c.chat.completions.create({
      model: modelId, messages, max_tokens: 32, temperature: 0.7, seed: 5,
    });
    const warm = await converse(ask(client));
    const fresh = await converse(ask(openaiClient(cold)));
    assertResumedConversation(warm, fresh, assert);
    const values = await metrics(server);
    assert.ok(values.tensorfold_recurrent_checkpoints > 0);
    assert.ok(values.tensorfold_recurrent_checkpoint_bytes > 0);
  } finally {
    await cold.stop();
  }
});

test('a saved hybrid slot survives a restart and continues exactly', { timeout: 240_000 }, async () => {
  const slotDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-hybrid-slots-'));
  const messages = [{ role: 'user', content: 'Write a Python class for a stack with push and pop.' }];
  const ask = (s, history) => request(s, '/v1/chat/completions', {
    body: { model: modelId, messages: history, max_tokens: 40, temperature: 0 },
  });
  try {
    const first = await startServer(['--parallel', '1', '--slot-save-path', slotDir], { model: dir });
    let reply;
    try {
      reply = await ask(first, messages);
      assert.equal(reply.status, 200, reply.text);
      const saved = await request(first, '/slots/0?action=save', { body: { name: 'stack' } });
      assert.equal(saved.status, 200, saved.text);
      assert.ok(saved.json.n_saved_kv >= 16, saved.text);
    } finally {
      await first.stop();
    }
    const next = [...messages, { role: 'assistant', content: reply.json.choices[0].message.content },
      { role: 'user', content: 'Add a peek method.' }];
    const cold = await startServer(['--no-prompt-cache'], { model: dir });
    const expected = await ask(cold, next);
    await cold.stop();
    const second = await startServer(['--parallel', '1', '--slot-save-path', slotDir], { model: dir });
    try {
      const restored = await request(second, '/slots/0?action=restore', { body: { name: 'stack' } });
      assert.equal(restored.status, 200, restored.text);
      assert.ok(restored.json.n_restored_kv >= 16, restored.text);
      const resumed = await ask(second, next);
      assert.equal(resumed.json.token_sha, expected.json.token_sha);
      assert.equal(resumed.json.choices[0].message.content, expected.json.choices[0].message.content);
      assert.ok(resumed.json.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(resumed.json.usage));
      // The first question again (a retry): its state lies in the prompt, not at the reply's end,
      // and the slot kept it, so it is served as a dense model's would be (all full blocks before
      // the prompt's last token).
      const retried = await ask(second, messages);
      assert.equal(retried.json.token_sha, reply.json.token_sha);
      const { prompt_tokens: n, prompt_tokens_details: { cached_tokens: n_cached } } = retried.json.usage;
      assert.equal(n_cached, Math.floor((n - 1) / 16) * 16, JSON.stringify(retried.json.usage));
      assert.ok(n_cached >= 16, JSON.stringify(retried.json.usage));
    } finally {
      await second.stop();
    }
  } finally {
    fs.rmSync(slotDir, { recursive: true, force: true });
  }
});

// A Qwen3.5-class hybrid (Gated DeltaNet + gated attention) served by `tensorfold serve --model DIR`:
// /v1/completions through the `openai` client, with speculation on; replies equal the draft-off
// ones and the solo ones when eight run together.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { hybridChatSources, linkedModelDir, openaiClient, request, startServer } from './harness.mjs';

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

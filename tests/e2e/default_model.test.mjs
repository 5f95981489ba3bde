// With no model flags the server runs the embedded code model with its block drafter and long copy:
// a held-out whole-file rename is drafted by both, and every reply equals its "draft": false reply.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { metrics, openaiClient, sourceDir, startServer } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer([], { embeddedDefault: true });
  client = openaiClient(server);
});
after(async () => { await server?.stop(); });

function smallestHeldOutRename() {
  const lines = fs.readFileSync(path.join(sourceDir, 'bench', 'inputs', 'heldout-eval.jsonl'), 'utf8')
    .split('\n').filter(Boolean).map((line) => JSON.parse(line));
  return lines.filter((c) => c.kind === 'rename').sort((a, b) => a.answer.length - b.answer.length)[0];
}

test('the embedded model, its drafter and long copy serve a rename; drafting changes no token', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['tensorfold-code-target']);
  const rename = smallestHeldOutRename();
  const before = await metrics(server);
  const body = { model: 'tensorfold-code-target', messages: [{ role: 'user', content: rename.prompt }],
    max_tokens: 400, temperature: 0 };
  const drafted = await client.chat.completions.create(body);
  const plain = await client.chat.completions.create({ ...body, draft: false });
  assert.equal(drafted.token_sha, plain.token_sha);
  assert.equal(drafted.choices[0].message.content, plain.choices[0].message.content);
  assert.ok(drafted.timings.tokens_per_round > 2, `tokens per round ${drafted.timings.tokens_per_round}`);
  assert.equal(plain.timings.draft_n, 0);
  const after = await metrics(server);
  for (const proposer of ['drafter', 'long_copy']) {
    const key = `tensorfold_drafted_by_proposer_total{proposer="${proposer}"}`;
    assert.ok(after[key] > (before[key] ?? 0), `${proposer} drafted nothing`);
  }
});

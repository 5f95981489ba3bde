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

// A grammar that grows too ambiguous along a draft (long copy proposes the prompt's run of x's,
// which the bias keeps the model from writing) drops that draft: the reply is the undrafted one,
// not an error blamed on the grammar.
test('a draft the grammar cannot follow is dropped, not the reply', { timeout: 120_000 }, async () => {
  const vocab = JSON.parse(fs.readFileSync(path.join(sourceDir, 'models/tensorfold-code-target/tokenizer.json'))).model.vocab;
  const logitBias = Object.fromEntries(Object.entries(vocab)
    .filter(([piece]) => piece.startsWith('x') || piece.startsWith('\u0120x')).map(([, id]) => [String(id), -100]));
  const body = {
    prompt: 'ab xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.\n'.repeat(6), max_tokens: 40, temperature: 0,
    grammar: 'root ::= "ab " a\na ::= "x" a "y" | "x" a "z" | "."', logit_bias: logitBias, return_token_ids: true,
  };
  const ask = async (extra) => {
    const response = await fetch(`${server.baseUrl}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, ...extra }),
    });
    return { status: response.status, json: await response.json() };
  };
  const plain = await ask({ draft: false });
  assert.equal(plain.status, 200, JSON.stringify(plain.json));
  const drafted = await ask({});
  assert.equal(drafted.status, 200, JSON.stringify(drafted.json));
  assert.equal(drafted.json.token_sha, plain.json.token_sha);
  assert.deepEqual(drafted.json.completion_token_ids, plain.json.completion_token_ids);
});

// The "return_provenance" extension: each token's source (a proposer whose draft was accepted, or
// the target's own token of its round) and round, streamed and not. Its counts add up to the reply's
// tokens, it agrees with the reply's timings, and it changes nothing else.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { modelId, request, sseEvents, startServer } from './harness.mjs';

let server;
// Fixed windows and no proposer gate: the streamed and the whole reply must draft alike, and measured
// windows and the gate follow the clock and what the earlier request accepted.
before(async () => {
  server = await startServer(['--parallel', '4', '--windows', 'fixed', '--proposer-gate', 'off']);
});
after(async () => { await server?.stop(); });

const sources = new Set(['target', 'long_copy', 'drafter', 'ngram', 'replay']);
// A prompt that repeats itself, so long copy and n-gram drafts are accepted now and then.
const line = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu';
const body = {
  model: modelId, max_tokens: 48, temperature: 0,
  messages: [{ role: 'user', content: `${line}\n${line}\n${line}\n${line}` }],
};

function checkProvenance(provenance, reply) {
  assert.equal(provenance.length, reply.usage.completion_tokens, 'one entry per completion token');
  let previousRound = 0;
  for (const entry of provenance) {
    assert.ok(sources.has(entry.source), `known source ${entry.source}`);
    assert.ok(entry.round >= previousRound && entry.round >= 1, 'rounds count up from 1');
    previousRound = entry.round;
  }
  // A reply that ends on EOS ends in a round that may add no token, and an accepted EOS draft is
  // counted as accepted but is no completion token.
  assert.ok(previousRound === reply.timings.rounds || previousRound === reply.timings.rounds - 1,
    'the last token came in the reply\'s last round or the one before its EOS');
  const drafted = provenance.filter((entry) => entry.source !== 'target').length;
  const accepted = reply.timings.draft_accepted_n;
  assert.ok(drafted === accepted || drafted === accepted - 1, 'drafted entries are the accepted drafts');
}

test('not streamed: the provenance adds up and changes no token', { timeout: 60_000 }, async () => {
  const plain = await request(server, '/v1/chat/completions', { body: { ...body, return_token_ids: true } });
  const traced = await request(server, '/v1/chat/completions',
    { body: { ...body, return_token_ids: true, return_provenance: true } });
  assert.equal(plain.status, 200, plain.text);
  assert.equal(traced.status, 200, traced.text);
  assert.equal(plain.json.choices[0].provenance, undefined, 'absent unless asked for');
  assert.equal(traced.json.choices[0].message.content, plain.json.choices[0].message.content);
  assert.deepEqual(traced.json.completion_token_ids, plain.json.completion_token_ids);
  assert.equal(traced.json.token_sha, plain.json.token_sha);
  checkProvenance(traced.json.choices[0].provenance, traced.json);
});

test('streamed: the chunks\' provenance adds up to the same list', { timeout: 60_000 }, async () => {
  const whole = await request(server, '/v1/chat/completions', { body: { ...body, return_provenance: true } });
  const streamed = await request(server, '/v1/chat/completions', {
    body: { ...body, return_provenance: true, stream: true, stream_options: { include_usage: true } },
  });
  assert.equal(streamed.status, 200, streamed.text);
  const events = sseEvents(streamed.text).filter((event) => event !== '[DONE]');
  const provenance = events.flatMap((event) => event.choices?.[0]?.provenance ?? []);
  const final = events.find((event) => event.choices?.[0]?.finish_reason);
  assert.equal(final.token_sha, whole.json.token_sha);
  assert.deepEqual(provenance, whole.json.choices[0].provenance);
  checkProvenance(provenance, events.at(-1));  // the include_usage chunk
  const text = events.map((event) => event.choices?.[0]?.delta?.content ?? '').join('');
  assert.equal(text, whole.json.choices[0].message.content);
});

// Concurrent equals solo: 8 different requests at once each give their solo reply (token_sha),
// greedy and seeded-sampled, and the server's /metrics show that the solo replies ran one lane a
// round while the concurrent ones really shared rounds; a client that leaves mid-stream frees its lane.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { metrics, modelId, openaiClient, request, startServer, waitForMetrics } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--parallel', '8']);
  client = openaiClient(server);
});
after(async () => { await server?.stop(); });

const topics = ['the sea', 'a mountain', 'bread', 'a robot', 'autumn', 'a city at night',
  'prime numbers', 'a lost key'];

// Half chat, half completions, half streamed: the mix must not change anyone's tokens.
function requestFor(i, sampling) {
  const isChat = i % 2 === 0;
  const body = isChat
    ? { messages: [{ role: 'user', content: `Tell me about ${topics[i]}.` }] }
    : { prompt: `A short story about ${topics[i]}:` };
  return { isChat, isStream: i % 4 < 2, body: { model: modelId, max_tokens: 12 + i, ...sampling, ...body } };
}

async function tokenShaOf({ isChat, isStream, body }) {
  const endpoint = isChat ? client.chat.completions : client.completions;
  if (!isStream) return (await endpoint.create(body)).token_sha;
  const stream = await endpoint.create({ ...body, stream: true });
  let sha;
  for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) sha = chunk.token_sha;
  return sha;
}

for (const [name, sampling] of [
  ['greedy', { temperature: 0 }],
  ['seeded sampling at temperature 0.8', { temperature: 0.8, top_p: 0.95, seed: 1234 }],
]) {
  test(`8 concurrent requests equal their solo replies: ${name}`, { timeout: 120_000 },
    async () => {
      const requests = topics.map((_, i) => requestFor(i, { ...sampling, seed: sampling.seed && sampling.seed + i }));
      const beforeSolo = await metrics(server);
      assert.equal(typeof beforeSolo.tensorfold_rounds_with_several_lanes_total, 'number', 'the metric is exported');
      const solo = [];
      for (const each of requests) solo.push(await tokenShaOf({ ...each, isStream: false }));
      for (const sha of solo) assert.match(sha, /^[0-9a-f]{64}$/);
      assert.equal(new Set(solo).size, solo.length, 'different requests give different replies');
      const afterSolo = await metrics(server);
      assert.equal(afterSolo.tensorfold_rounds_with_several_lanes_total,
        beforeSolo.tensorfold_rounds_with_several_lanes_total, 'one request at a time: no round carried two lanes');
      const together = await Promise.all(requests.map(tokenShaOf));
      assert.deepEqual(together, solo);
      const afterTogether = await metrics(server);
      const shared = afterTogether.tensorfold_rounds_with_several_lanes_total -
        afterSolo.tensorfold_rounds_with_several_lanes_total;
      assert.ok(shared > 0, `8 requests at once: some rounds carried several lanes (${shared})`);
      assert.ok(afterTogether.tensorfold_most_lanes_in_a_round >= 2,
        `most lanes in a round: ${afterTogether.tensorfold_most_lanes_in_a_round}`);
    });
}

test('a client that disconnects mid-stream frees its lane', { timeout: 60_000 }, async () => {
  const maxTokens = 3000;
  const before = await metrics(server);
  const controller = new AbortController();
  const response = await fetch(`${server.baseUrl}/v1/completions`, {
    method: 'POST',
    signal: controller.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Count forever:', max_tokens: maxTokens, temperature: 0, stream: true }),
  });
  assert.equal(response.status, 200);
  const reader = response.body.getReader();
  let received = '';
  while ((received.match(/data: /g) ?? []).length < 4) {
    const { value, done } = await reader.read();
    assert.ok(!done, 'the stream ended before the client left');
    received += new TextDecoder().decode(value);
  }
  controller.abort();

  const settled = await waitForMetrics(server, (values) => values.tensorfold_lanes_live === 0);
  assert.equal(settled.tensorfold_lanes_live, 0);
  const generated = settled.tensorfold_generated_tokens_total - before.tensorfold_generated_tokens_total;
  assert.ok(generated < maxTokens, `the abandoned request stopped early (${generated} tokens)`);

  const next = await request(server, '/v1/completions', {
    body: { prompt: 'next', max_tokens: 4, temperature: 0 },
  });
  assert.equal(next.status, 200, next.text);
  assert.equal(next.json.usage.completion_tokens, 4);
});

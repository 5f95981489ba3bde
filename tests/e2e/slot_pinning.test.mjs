// llama.cpp's id_slot through the real server: a completion pinned to slot 1, saved from slot 1,
// erased or lost in a restart, restored, and sent again answers from the cache with the same reply;
// a request pinned to a busy slot waits (later requests pass it, a client that leaves is dropped,
// GET /slots counts the waiters);
// values that name no slot are refused by name.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { metrics, modelId, request, startServer, waitForMetrics } from './harness.mjs';

let slotDir;
before(() => { slotDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-pinned-slots-')); });
after(() => { fs.rmSync(slotDir, { recursive: true, force: true }); });

const prompt = 'def fibonacci(n):\n    """Return the n-th Fibonacci number, computed iteratively."""\n';
const complete = (server, extra = {}) => request(server, '/v1/completions', {
  body: { model: modelId, prompt, max_tokens: 24, temperature: 0.7, seed: 5, ...extra },
});

test('llama.cpp\'s flow: id_slot 1, save slot 1, erase or restart, restore, the same prompt is served from the cache',
  { timeout: 180_000 }, async () => {
    const server = await startServer(['--parallel', '2', '--slot-save-path', slotDir]);
    let first;
    try {
      first = await complete(server, { id_slot: 1 });
      assert.equal(first.status, 200, first.text);
      const slots = (await request(server, '/slots', { method: 'GET' })).json;
      assert.equal(slots[1].state, 'idle');
      assert.equal(slots[1].n_prompt_tokens, first.json.usage.prompt_tokens, 'slot 1 ran the pinned request');
      assert.ok(slots[1].n_tokens > first.json.usage.prompt_tokens);
      assert.equal(slots[0].n_tokens, 0, 'slot 0 was never used');
      const saved = await request(server, '/slots/1?action=save', { body: { name: 'pinned' } });
      assert.equal(saved.status, 200, saved.text);
      assert.ok(saved.json.n_saved_kv >= 16, saved.text);

      const erased = await request(server, '/slots/1?action=erase', {});
      assert.equal(erased.status, 200, erased.text);
      const restored = await request(server, '/slots/1?action=restore', { body: { name: 'pinned' } });
      assert.equal(restored.status, 200, restored.text);
      const again = await complete(server, { id_slot: 1 });
      assert.equal(again.json.choices[0].text, first.json.choices[0].text);
      assert.equal(again.json.token_sha, first.json.token_sha);
      assert.ok(again.json.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(again.json.usage));
    } finally {
      await server.stop();
    }
    const restarted = await startServer(['--parallel', '2', '--slot-save-path', slotDir]);
    try {
      const restored = await request(restarted, '/slots/1?action=restore', { body: { name: 'pinned' } });
      assert.equal(restored.status, 200, restored.text);
      assert.ok(restored.json.n_restored_kv >= 16, restored.text);
      const resumed = await complete(restarted, { id_slot: 1 });
      assert.equal(resumed.status, 200, resumed.text);
      assert.equal(resumed.json.choices[0].text, first.json.choices[0].text);
      assert.equal(resumed.json.token_sha, first.json.token_sha);
      // A fresh server has nothing cached: what this reply adopted came from the restored slot.
      assert.ok(resumed.json.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(resumed.json.usage));
      const unpinned = await complete(restarted, { cache_prompt: false });
      assert.equal(unpinned.json.token_sha, first.json.token_sha, 'pinned or not, cached or not: the same reply');
    } finally {
      await restarted.stop();
    }
  });

test('a request pinned to a busy slot waits for it; others pass; one that leaves is dropped; bad values are refused',
  { timeout: 120_000 }, async () => {
    const server = await startServer(['--parallel', '2']);
    try {
      for (const [extra, why] of [[{ id_slot: 2 }, /this server has 2 slots/], [{ id_slot: -2 }, /this server has 2 slots/],
        [{ id_slot: '1' }, /expected an integer/], [{ id_slot: 0.5 }, /expected an integer/], [{ id_slot: 0, n: 2 }, /n = 2/]]) {
        const refused = await complete(server, extra);
        assert.equal(refused.status, 400, JSON.stringify(extra));
        assert.equal(refused.json.error.param, 'id_slot');
        assert.match(refused.json.error.message, why);
      }
      const chatRefused = await request(server, '/v1/chat/completions', {
        body: { model: modelId, messages: [{ role: 'user', content: 'hi' }], id_slot: 7 },
      });
      assert.equal(chatRefused.status, 400);
      assert.equal(chatRefused.json.error.param, 'id_slot');
      const expected = await complete(server, { id_slot: -1 });

      // A long stream holds slot 0.
      const long = new AbortController();
      const stream = await fetch(`${server.baseUrl}/v1/completions`, {
        method: 'POST', signal: long.signal, headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'Count forever:', max_tokens: 3000, ignore_eos: true, temperature: 0, stream: true, id_slot: 0 }),
      });
      assert.equal(stream.status, 200);
      const reader = stream.body.getReader();
      await reader.read();
      const slots = (await request(server, '/slots', { method: 'GET' })).json;
      assert.equal(slots[0].state, 'processing');

      // One pinned to slot 0 that leaves while it waits, and one that stays.
      const leaving = new AbortController();
      const left = fetch(`${server.baseUrl}/v1/completions`, {
        method: 'POST', signal: leaving.signal, headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: modelId, prompt, max_tokens: 24, id_slot: 0 }),
      }).catch((error) => error);
      const waiting = complete(server, { id_slot: 0 });
      const queued = await waitForMetrics(server, (values) => values.tensorfold_queue_depth === 2);
      assert.equal(queued.tensorfold_queue_depth, 2, 'the pinned requests wait while slot 1 is free');
      const listed = (await request(server, '/slots', { method: 'GET' })).json;
      assert.deepEqual(listed.map((slot) => slot.n_waiting), [2, 0], 'GET /slots shows who waits for which slot');
      const passing = await complete(server, { max_tokens: 4 });
      assert.equal(passing.status, 200, 'an unpinned request passes them into slot 1');
      assert.equal((await metrics(server)).tensorfold_queue_depth, 2);
      leaving.abort();
      await left;
      const dropped = await waitForMetrics(server, (values) => values.tensorfold_queue_depth === 1);
      assert.equal(dropped.tensorfold_queue_depth, 1, 'the client that left is dropped from the queue');
      assert.equal((await request(server, '/slots', { method: 'GET' })).json[0].n_waiting, 1);

      long.abort();
      const waited = await waiting;
      assert.equal(waited.status, 200, waited.text);
      assert.equal(waited.json.token_sha, expected.json.token_sha, 'it ran after the stream, with its unpinned reply');
      const after = (await request(server, '/slots', { method: 'GET' })).json;
      assert.equal(after[0].n_prompt_tokens, waited.json.usage.prompt_tokens, 'in slot 0');
      assert.equal(after[0].n_waiting, 0);
    } finally {
      await server.stop();
    }
  });

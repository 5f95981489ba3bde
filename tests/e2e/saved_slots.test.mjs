// The saved-slot folder's edges through the real server: temporaries a killed save left are removed
// at start (and never count as saved slots), and saves under new names at once never pass
// --slot-save-max together.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { modelId, request, startServer } from './harness.mjs';

const savedSlots = (dir) => fs.readdirSync(dir).filter((name) => name.endsWith('.tfslot')).sort();

test('temporaries of an interrupted save are removed at start, nothing else; they never count as saved slots',
  { timeout: 60_000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-slot-temporaries-'));
    // What a save killed before its rename leaves (NAME.tfslot.tmp-XXXXXX), and look-alikes that are not the server's.
    const stale = ['chat.tfslot.tmp-Ab12Cd', 'x_y-z.tfslot.tmp-000000'];
    const others = ['notes.txt', 'chat.tfslot', 'chat.tfslot.tmp-Ab12C', 'chat.tfslot.tmp-Ab12Cde', 'chat.tmp-Ab12Cd',
      'a.b.tfslot.tmp-Ab12Cd', 'chat.tfslot.tmp-Ab12Cd.keep'];
    for (const name of [...stale, ...others]) fs.writeFileSync(path.join(dir, name), 'x');
    fs.mkdirSync(path.join(dir, 'folder.tfslot.tmp-Ab12Cd'));  // not a file the server wrote
    const server = await startServer(['--parallel', '1', '--slot-save-path', dir, '--slot-save-max', '2']);
    try {
      assert.deepEqual(fs.readdirSync(dir).sort(), [...others, 'folder.tfslot.tmp-Ab12Cd'].sort());
      // One left while it runs (another process's save cut short) is not a saved slot either.
      fs.writeFileSync(path.join(dir, 'late.tfslot.tmp-Zz9Zz9'), 'x');
      const reply = await request(server, '/v1/completions', { body: { model: modelId, prompt: 'def f(x):', max_tokens: 8 } });
      assert.equal(reply.status, 200, reply.text);
      const saved = await request(server, '/slots/0?action=save', { body: { name: 'second' } });
      assert.equal(saved.status, 200, 'chat.tfslot and this one make 2; temporaries do not count');
      assert.deepEqual(savedSlots(dir), ['chat.tfslot', 'second.tfslot']);
    } finally {
      await server.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

test('saves under new names at once never keep more than --slot-save-max', { timeout: 120_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-slot-race-'));
  const server = await startServer(['--parallel', '2', '--slot-save-path', dir, '--slot-save-max', '2']);
  const long = new AbortController();
  try {
    const first = await request(server, '/v1/completions', {
      body: { model: modelId, prompt: 'def fibonacci(n):', max_tokens: 16, id_slot: 0 },
    });
    assert.equal(first.status, 200, first.text);
    // A long reply in slot 1 keeps rounds running, so every save waits for a round's end after its
    // count: the window in which counts done apart from the writes let them all pass.
    const stream = await fetch(`${server.baseUrl}/v1/completions`, {
      method: 'POST', signal: long.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Count forever:', max_tokens: 3000, ignore_eos: true, stream: true, id_slot: 1 }),
    });
    assert.equal(stream.status, 200);
    await stream.body.getReader().read();
    for (let round = 0; round < 5; ++round) {
      for (const name of fs.readdirSync(dir)) fs.rmSync(path.join(dir, name));
      // Three at once: the side-job cap (4) lets each through to the count.
      const answers = await Promise.all([0, 1, 2].map((i) =>
        request(server, '/slots/0?action=save', { body: { name: `r${round}-${i}` } })));
      const statuses = answers.map((answer) => answer.status).sort();
      assert.deepEqual(statuses, [200, 200, 400], answers.map((answer) => answer.text).join('\n'));
      const refused = answers.find((answer) => answer.status === 400);
      assert.equal(refused.json.error.param, 'name');
      assert.match(refused.json.error.message, /at most 2 saved slots/);
      assert.equal(savedSlots(dir).length, 2, `round ${round}: ${savedSlots(dir)}`);
    }
  } finally {
    long.abort();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

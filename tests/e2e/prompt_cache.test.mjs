// Resumed = fresh through the server: a five-turn chat with the official openai client, each turn's
// reply equal to the same conversation sent cold to a fresh server, the cache's figures in usage and
// /metrics; saved slots surviving a restart, and bad slot files refused while the server serves on.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { assertResumedConversation, chatQuestions as questions, converse, metrics, modelId, openaiClient, request, startServer } from './harness.mjs';

const turn = (client, extra = {}) => (messages) => client.chat.completions.create({
  model: modelId, messages, max_tokens: 48, temperature: 0.7, seed: 11, ...extra,
});

let slotDir;
before(() => { slotDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-slots-')); });
after(() => { fs.rmSync(slotDir, { recursive: true, force: true }); });

test('a five-turn chat: each reply equals the cold conversation, and later turns come from the cache',
  { timeout: 240_000 }, async () => {
    const cached = await startServer();
    const cold = await startServer(['--no-prompt-cache']);
    try {
      const warm = await converse(turn(openaiClient(cached)));
      const fresh = await converse(turn(openaiClient(cold)));
      assertResumedConversation(warm, fresh, assert);
      for (const reply of fresh) assert.equal(reply.usage.prompt_tokens_details.cached_tokens, 0, 'the cache is off there');
      const values = await metrics(cached);
      assert.ok(values.tensorfold_prompt_cache_hit_tokens_total > 0);
      assert.ok(values.tensorfold_prompt_cache_miss_tokens_total > 0);
      assert.ok(values.tensorfold_kv_blocks_cached > 0);
      assert.equal(values.tensorfold_kv_blocks_in_use, 0, 'idle: no lane holds a block');
      // Opting out and another tenant's salt both see nothing of it.
      const optOut = await request(cached, '/v1/chat/completions', {
        body: { model: modelId, max_tokens: 4, messages: [{ role: 'user', content: questions[0] }], cache_prompt: false },
      });
      assert.equal(optOut.json.usage.prompt_tokens_details.cached_tokens, 0);
      const salted = await request(cached, '/v1/chat/completions', {
        body: { model: modelId, max_tokens: 4, messages: [{ role: 'system', content: 'You are a helpful assistant that writes Python.' },
          { role: 'user', content: questions[0] }], cache_salt: 'another-tenant' },
      });
      assert.equal(salted.json.usage.prompt_tokens_details.cached_tokens, 0);
      const badSalt = await request(cached, '/v1/chat/completions', {
        body: { model: modelId, max_tokens: 4, messages: [{ role: 'user', content: 'x' }], cache_salt: 7 },
      });
      assert.equal(badSalt.status, 400);
      assert.equal(badSalt.json.error.param, 'cache_salt');
    } finally {
      await cached.stop();
      await cold.stop();
    }
  });

test('a saved slot survives a restart and continues exactly; bad files are refused', { timeout: 240_000 }, async () => {
  const messages = [{ role: 'user', content: 'Write a Python class for a bank account with deposit and withdraw.' }];
  const ask = (server, history) => request(server, '/v1/chat/completions', {
    body: { model: modelId, messages: history, max_tokens: 40, temperature: 0 },
  });
  let first = await startServer(['--parallel', '1', '--slot-save-path', slotDir]);
  let reply;
  try {
    reply = await ask(first, messages);
    assert.equal(reply.status, 200, reply.text);
    const slots = await request(first, '/slots', { method: 'GET' });
    assert.equal(slots.status, 200);
    assert.equal(slots.json[0].state, 'idle');
    assert.ok(slots.json[0].n_tokens > 0);
    const saved = await request(first, '/slots/0?action=save', { body: { name: 'account' } });
    assert.equal(saved.status, 200, saved.text);
    assert.ok(saved.json.n_saved_kv >= 16, saved.text);
  } finally {
    await first.stop();
  }
  const next = [...messages, { role: 'assistant', content: reply.json.choices[0].message.content },
    { role: 'user', content: 'Add a balance method.' }];
  const cold = await startServer(['--no-prompt-cache']);
  const expected = await ask(cold, next);
  await cold.stop();

  const second = await startServer(['--parallel', '1', '--slot-save-path', slotDir]);
  try {
    const restored = await request(second, '/slots/0?action=restore', { body: { name: 'account' } });
    assert.equal(restored.status, 200, restored.text);
    assert.ok(restored.json.n_restored_kv >= 16);
    const resumed = await ask(second, next);
    assert.equal(resumed.json.choices[0].message.content, expected.json.choices[0].message.content);
    assert.equal(resumed.json.token_sha, expected.json.token_sha);
    // A fresh server has nothing cached: what this reply adopted came from the restored slot.
    assert.ok(resumed.json.usage.prompt_tokens_details.cached_tokens >= 16,
      `the restored blocks were used: ${JSON.stringify(resumed.json.usage)}`);

    // Truncated, corrupt, foreign-model, missing and unsafe names: refused, and the server serves on.
    const good = fs.readFileSync(path.join(slotDir, 'account.tfslot'));
    fs.writeFileSync(path.join(slotDir, 'cut.tfslot'), good.subarray(0, good.length - 100));
    const flipped = Buffer.from(good);
    flipped[flipped.length - 200] ^= 0x40;
    fs.writeFileSync(path.join(slotDir, 'flipped.tfslot'), flipped);
    const other = await startServer(['--parallel', '1', '--slot-save-path', slotDir], { embeddedDefault: true });
    try {
      const otherReply = await request(other, '/v1/completions', { body: { prompt: 'def add(a, b):\n    return a + b\n\n\n', max_tokens: 8 } });
      assert.equal(otherReply.status, 200, otherReply.text);
      const savedOther = await request(other, '/slots/0?action=save', { body: { name: 'foreign' } });
      assert.equal(savedOther.status, 200, savedOther.text);
    } finally {
      await other.stop();
    }
    // A header whose sizes multiply past 64 bits, re-checksummed so only the sizes can refuse it
    // (2^60 blocks of the real block size once wrapped to 0 bytes and passed).
    const headerLength = Number(good.readBigUInt64LE(7));
    const header = JSON.parse(good.subarray(15, 15 + headerLength).toString());
    const tokens = good.subarray(15 + headerLength, 15 + headerLength + 4 * header.n_tokens);
    const crafted = Buffer.from(JSON.stringify({ ...header, n_blocks: 2 ** 60, kv_bytes: 0, tap_width: 0 }));
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(crafted.length));
    const craftedFile = Buffer.concat([good.subarray(0, 7), length, crafted, tokens]);
    const digest = crypto.createHash('sha256').update(craftedFile).digest();
    fs.writeFileSync(path.join(slotDir, 'wrapped.tfslot'), Buffer.concat([craftedFile, digest]));
    fs.mkdirSync(path.join(slotDir, 'folder.tfslot'), { recursive: true });
    const refusals = [
      ['cut', /truncated/], ['flipped', /corrupt/], ['foreign', /another model/], ['absent', /no saved slot/],
      ['folder', /is a directory/], ['wrapped', /corrupt header/],
    ];
    for (const [name, why] of refusals) {
      const answer = await request(second, '/slots/0?action=restore', { body: { name } });
      assert.equal(answer.status, 400, `${name}: ${answer.text}`);
      assert.match(answer.json.error.message, why);
      assert.equal(answer.json.error.param, 'name');
      assert.ok(!answer.json.error.message.includes(slotDir), 'the server\'s folder is not shown');
    }
    for (const name of ['../escape', 'a/b', '', 'x'.repeat(65), 7]) {
      const answer = await request(second, '/slots/0?action=save', { body: { name } });
      assert.equal(answer.status, 400, String(name));
      assert.equal(answer.json.error.param, 'name');
    }
    // A name taken by a directory is the client's to change; nothing half-written stays behind.
    const taken = await request(second, '/slots/0?action=save', { body: { name: 'folder' } });
    assert.equal(taken.status, 400, taken.text);
    assert.equal(taken.json.error.param, 'name');
    assert.deepEqual(fs.readdirSync(slotDir).filter((name) => name.includes('.tmp')), []);
    assert.equal((await request(second, '/slots/0?action=fly', { body: { name: 'a' } })).json.error.param, 'action');
    assert.equal((await request(second, '/slots/9?action=save', { body: { name: 'a' } })).json.error.param, 'id_slot');
    assert.ok(!fs.existsSync(path.join(slotDir, '..', 'escape.tfslot')));
    const still = await ask(second, next);
    assert.equal(still.json.choices[0].message.content, expected.json.choices[0].message.content);
    const erased = await request(second, '/slots/0?action=erase', {});
    assert.equal(erased.status, 200, erased.text);
  } finally {
    await second.stop();
  }
  // Without --slot-save-path saving is off, with a clear refusal.
  const plain = await startServer();
  try {
    const answer = await request(plain, '/slots/0?action=save', { body: { name: 'a' } });
    assert.equal(answer.status, 400);
    assert.match(answer.json.error.message, /--slot-save-path/);
  } finally {
    await plain.stop();
  }
});


test('saved slots are bounded in number; a disk that fails is the server\'s 500, not the client\'s 400', { timeout: 120_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-slot-max-'));
  const server = await startServer(['--parallel', '1', '--slot-save-path', dir, '--slot-save-max', '2']);
  try {
    const ask = () => request(server, '/v1/completions', { body: { model: modelId, prompt: 'def f(x):', max_tokens: 8, temperature: 0 } });
    assert.equal((await ask()).status, 200);
    const save = (name) => request(server, '/slots/0?action=save', { body: { name } });
    assert.equal((await save('a')).status, 200);
    assert.equal((await save('b')).status, 200);
    const third = await save('c');
    assert.equal(third.status, 400, third.text);
    assert.equal(third.json.error.param, 'name');
    assert.match(third.json.error.message, /at most 2 saved slots/);
    assert.equal((await save('a')).status, 200, 'saving over a name already used is always allowed');
    assert.deepEqual(fs.readdirSync(dir).sort(), ['a.tfslot', 'b.tfslot']);
    // The folder gone under the server: its fault, logged, and it serves on.
    fs.rmSync(dir, { recursive: true, force: true });
    const failed = await save('d');
    assert.equal(failed.status, 500, failed.text);
    assert.equal(failed.json.error.type, 'server_error');
    assert.ok(!failed.text.includes(dir), 'the server\'s folder is not shown');
    assert.equal((await ask()).status, 200);
  } finally {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// A slot's K/V are the bits of the numerics that computed them: under other CPU numerics (the bf16
// dot product turned off) none are restored, and the reply is the fresh one of that numerics.
test('a slot saved under other CPU numerics is prefilled again, not continued', { timeout: 240_000 }, async () => {
  const messages = [{ role: 'user', content: 'Write a Python function that reverses a string.' }];
  const ask = (server) => request(server, '/v1/chat/completions', {
    body: { model: modelId, messages, max_tokens: 24, temperature: 0 },
  });
  const props = async (server) => (await request(server, '/props', { method: 'GET' })).json.numerics;
  const first = await startServer(['--parallel', '1', '--slot-save-path', slotDir]);
  let numerics;
  try {
    numerics = await props(first);
    assert.equal((await ask(first)).status, 200);
    const saved = await request(first, '/slots/0?action=save', { body: { name: 'numerics' } });
    assert.equal(saved.status, 200, saved.text);
  } finally {
    await first.stop();
  }
  const cold = await startServer(['--no-prompt-cache', '--bf16-dot', 'off']);
  const expected = await ask(cold);
  const coldNumerics = await props(cold);
  await cold.stop();
  if (coldNumerics === numerics) return;  // a machine without the bf16 dot product has one numerics here
  const second = await startServer(['--parallel', '1', '--slot-save-path', slotDir, '--bf16-dot', 'off']);
  try {
    const restored = await request(second, '/slots/0?action=restore', { body: { name: 'numerics' } });
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.json.n_restored_kv, 0, restored.text);
    const resumed = await ask(second);
    assert.equal(resumed.json.token_sha, expected.json.token_sha);
    assert.equal(resumed.json.usage.prompt_tokens_details.cached_tokens, 0);
  } finally {
    await second.stop();
  }
});

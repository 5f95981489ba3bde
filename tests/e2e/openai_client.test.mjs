// The server driven by the official `openai` package: chat and completions, streamed and not,
// plus /v1/models, /metrics, /tokenize and /detokenize.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { metrics, modelDir, modelId, openaiClient, request, startServer } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--parallel', '8']);
  client = openaiClient(server);
});
after(async () => { await server?.stop(); });

const messages = [{ role: 'user', content: 'Write a haiku about the sea.' }];
const timingKeys = ['prompt_n', 'prompt_ms', 'predicted_n', 'predicted_ms', 'rounds', 'draft_n',
  'draft_accepted_n', 'tokens_per_round'];

function assertReplyFigures(reply, maxTokens) {
  assert.ok(reply.usage.prompt_tokens > 0);
  assert.ok(reply.usage.completion_tokens > 0 && reply.usage.completion_tokens <= maxTokens);
  assert.equal(reply.usage.total_tokens, reply.usage.prompt_tokens + reply.usage.completion_tokens);
  for (const key of timingKeys) assert.equal(typeof reply.timings[key], 'number', key);
  assert.match(reply.token_sha, /^[0-9a-f]{64}$/);
}

test('/health answers 503 loading until the model is ready, then 200', () => {
  const answers = server.healthAnswers;
  assert.deepEqual(answers.at(-1), { status: 200, body: { status: 'ok' } });
  for (const answer of answers.slice(0, -1)) {
    assert.equal(answer.status, 503);
    assert.equal(answer.body.status, 'loading');
    assert.ok(answer.body.progress >= 0 && answer.body.progress <= 1, 'load progress is a fraction');
  }
});

test('chat completion, not streamed', { timeout: 60_000 }, async () => {
  const reply = await client.chat.completions.create({
    model: modelId, messages, max_tokens: 12, temperature: 0,
  });
  assert.equal(reply.object, 'chat.completion');
  assert.equal(reply.model, modelId);
  assert.equal(reply.choices.length, 1);
  assert.equal(reply.choices[0].message.role, 'assistant');
  assert.equal(typeof reply.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(reply.choices[0].finish_reason));
  assertReplyFigures(reply, 12);
  assert.equal(typeof reply.seed, 'number', 'a server-drawn seed is reported back');
});

test('chat completion, streamed with include_usage, equals the whole reply', { timeout: 60_000 },
  async () => {
    const params = { model: modelId, messages, max_tokens: 12, temperature: 0.8, seed: 42 };
    const whole = await client.chat.completions.create(params);
    assert.equal(whole.seed, 42);
    const stream = await client.chat.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content);
    const final = chunks.find((chunk) => chunk.choices[0]?.finish_reason);
    assert.ok(final, 'a chunk carries finish_reason');
    assert.equal(final.choices[0].finish_reason, whole.choices[0].finish_reason);
    assert.equal(final.token_sha, whole.token_sha);
    assert.equal(final.seed, 42);
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(usageChunk.usage, whole.usage);
    // Usage comes once, in the include_usage chunk; every other chunk says "usage": null, as OpenAI's do.
    assert.equal(final.usage, null);
    assert.ok(chunks.slice(0, -1).every((chunk) => chunk.usage === null));
    assertReplyFigures({ ...final, usage: usageChunk.usage }, 12);
    assert.equal(usageChunk.token_sha, whole.token_sha);
  });

test('text completion from a string and from token ids', { timeout: 60_000 }, async () => {
  const fromText = await client.completions.create({
    model: modelId, prompt: 'Once upon a time', max_tokens: 10, temperature: 0,
  });
  assert.equal(fromText.object, 'text_completion');
  assert.equal(typeof fromText.choices[0].text, 'string');
  assertReplyFigures(fromText, 10);
  const { json: tokenized } = await request(server, '/tokenize', {
    body: { content: 'Once upon a time' },
  });
  const fromIds = await client.completions.create({
    model: modelId, prompt: tokenized.tokens, max_tokens: 10, temperature: 0,
  });
  assert.equal(fromIds.token_sha, fromText.token_sha);
  assert.equal(fromIds.choices[0].text, fromText.choices[0].text);
});

test('text completion, streamed, equals the whole reply', { timeout: 60_000 }, async () => {
  const params = { model: modelId, prompt: 'def fibonacci(n):', max_tokens: 10, temperature: 0 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let final;
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    if (chunk.choices[0]?.finish_reason) final = chunk;
    if (chunk.choices.length === 0) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(final.token_sha, whole.token_sha);
  assert.deepEqual(usage, whole.usage);
});

test('a stop string across a token boundary ends the reply before it', { timeout: 60_000 },
  async () => {
    const params = { model: modelId, prompt: 'The weather today', max_tokens: 12, temperature: 0 };
    const free = await client.completions.create({ ...params, logprobs: 0 });
    const { tokens } = free.choices[0].logprobs;
    const text = free.choices[0].text;
    // The last character of one token and the first of the next: no token holds this string.
    const at = tokens.findIndex((token, i) => i >= 2 && i + 1 < tokens.length && token.length > 0
      && tokens[i + 1].length > 0 && !(token + tokens[i + 1]).includes('\ufffd'));
    assert.ok(at >= 0, `no two whole tokens to split in ${JSON.stringify(tokens)}`);
    const stop = tokens[at].slice(-1) + tokens[at + 1].slice(0, 1);
    const expected = text.slice(0, text.indexOf(stop));

    const whole = await client.completions.create({ ...params, stop: [stop] });
    assert.equal(whole.choices[0].text, expected);
    assert.equal(whole.choices[0].finish_reason, 'stop');
    const stream = await client.completions.create({ ...params, stop, stream: true });
    let streamed = '';
    for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
    assert.equal(streamed, expected);
  });

test('logprobs for chat and completions', { timeout: 60_000 }, async () => {
  const chat = await client.chat.completions.create({
    model: modelId, messages, max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  assert.equal(content[0].top_logprobs.length, 2);
  assert.ok(content[0].logprob <= 0);
  const completion = await client.completions.create({
    model: modelId, prompt: 'Hello', max_tokens: 4, temperature: 0, logprobs: 3,
  });
  assert.equal(completion.choices[0].logprobs.tokens.length, completion.usage.completion_tokens);
});

test('logprobs stop where a stop string cuts the reply, streamed or not', { timeout: 60_000 }, async () => {
  const params = {
    model: modelId, messages: [{ role: 'user', content: 'def add(a, b):' }], max_tokens: 30, temperature: 0,
    logprobs: true,
  };
  const free = await client.chat.completions.create(params);
  const tokens = free.choices[0].logprobs.content.map((entry) => entry.token);
  assert.equal(tokens.join(''), free.choices[0].message.content);
  assert.ok(tokens.length >= 4, JSON.stringify(tokens));
  // A stop string starting inside the third token: the listed tokens are those whose text begins
  // before the cut, never the ones the cut hides.
  const stop = tokens.slice(2).join('').slice(1, 6);
  const whole = await client.chat.completions.create({ ...params, stop: [stop] });
  const content = whole.choices[0].message.content;
  const listed = whole.choices[0].logprobs.content.map((entry) => entry.token);
  assert.ok(listed.join('').startsWith(content), JSON.stringify({ content, listed }));
  assert.ok(listed.slice(0, -1).join('').length < content.length || listed.join('') === content,
    JSON.stringify({ content, listed }));
  const streamed = [];
  for await (const chunk of await client.chat.completions.create({ ...params, stop: [stop], stream: true }))
    for (const entry of chunk.choices[0]?.logprobs?.content ?? []) streamed.push(entry.token);
  assert.deepEqual(streamed, listed);
});

// A reply's text and logprobs as a client assembles them, whole or streamed.
async function listing(endpoint, params) {
  const create = (body) => (endpoint === 'chat' ? client.chat.completions.create(body) : client.completions.create(body));
  if (!params.stream) {
    const choice = (await create(params)).choices[0];
    return endpoint === 'chat'
      ? { text: choice.message.content, logprobs: choice.logprobs.content }
      : { text: choice.text, logprobs: choice.logprobs };
  }
  const assembled = endpoint === 'chat'
    ? { text: '', logprobs: [] }
    : { text: '', logprobs: { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] } };
  for await (const chunk of await create(params)) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (endpoint === 'chat') {
      assembled.text += choice.delta?.content ?? '';
      assembled.logprobs.push(...(choice.logprobs?.content ?? []));
    } else {
      assembled.text += choice.text ?? '';
      for (const [key, values] of Object.entries(choice.logprobs ?? {})) assembled.logprobs[key].push(...values);
    }
  }
  return assembled;
}

// Whole and streamed, with speculation and with "draft": false: one text, one list of logprobs.
async function assertOneListing(endpoint, params) {
  const first = await listing(endpoint, params);
  for (const variant of [{ stream: true }, { draft: false }, { draft: false, stream: true }])
    assert.deepEqual(await listing(endpoint, { ...params, ...variant }), first, JSON.stringify(variant));
  return first;
}

test('a stop string cuts text and logprobs alike, streamed or whole, drafted or not', { timeout: 120_000 },
  async () => {
    const params = {
      model: modelId, prompt: 'def add(a, b):\n    return a + b\n\n\ndef add(a, b):\n', max_tokens: 40,
      temperature: 0, logprobs: 2,
    };
    const free = (await client.completions.create(params)).choices[0];
    const characters = Array.from(free.text);  // text_offset counts code points
    const { tokens, text_offset: offsets } = free.logprobs;
    // A stop string from the second character of a token on: that token straddles the cut.
    const stopAt = (i) => characters.slice(offsets[i] + 1, offsets[i] + 4).join('');
    const at = tokens.findIndex((token, i) => i >= 3 && !token.startsWith('bytes:') && Array.from(token).length >= 2
      && stopAt(i).length === 3 && free.text.indexOf(stopAt(i)) === characters.slice(0, offsets[i] + 1).join('').length);
    assert.ok(at >= 0, `no token to cut inside in ${JSON.stringify(tokens)}`);
    const stop = stopAt(at);
    const cut = await assertOneListing('completion', { ...params, stop: [stop] });
    assert.equal(cut.text, characters.slice(0, offsets[at] + 1).join(''));
    // Listed: every token up to the one the cut falls in, with its figures and offsets unchanged.
    for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
      assert.deepEqual(cut.logprobs[key], free.logprobs[key].slice(0, at + 1), key);
    assert.ok(cut.logprobs.text_offset.every((offset) => offset < Array.from(cut.text).length));
    // A stop at the reply's very start: no text, and logprobs an empty list (not null).
    const empty = await assertOneListing('completion', { ...params, stop: [characters.slice(0, 2).join('')] });
    assert.equal(empty.text, '');
    assert.deepEqual(empty.logprobs.tokens, []);

    const chat = { model: modelId, messages: [{ role: 'user', content: 'def add(a, b):' }], max_tokens: 30,
      temperature: 0, logprobs: true, top_logprobs: 2 };
    const content = (await client.chat.completions.create(chat)).choices[0].message.content;
    assert.ok(content.length > 8, JSON.stringify(content));
    await assertOneListing('chat', { ...chat, stop: [content.slice(5, 8)] });
  });

// <|box_start|> and <|vision_start|> are "special": true in Qwen3's tokenizer.json; a mild bias and a
// frequency penalty put them among ordinary tokens. Skipped (the default) they add no text, shown
// they are text like any token; logprobs list them either way, a skipped one where the text after
// it begins.
test('special tokens add no text unless skip_special_tokens is false, streamed or whole, drafted or not',
  { timeout: 180_000 }, async () => {
    const specials = ['<|box_start|>', '<|vision_start|>'];
    const withoutSpecials = (text) => specials.reduce((rest, special) => rest.replaceAll(special, ''), text);
    const forcing = { model: modelId, max_tokens: 16, temperature: 0, frequency_penalty: 1,
      logit_bias: { 151648: 2.5, 151652: 2.5 } };

    const params = { ...forcing, prompt: 'The sea is', logprobs: 0 };
    const skipped = await assertOneListing('completion', params);
    const shown = await assertOneListing('completion', { ...params, skip_special_tokens: false });
    const { tokens } = shown.logprobs;
    assert.ok(tokens.some((token) => specials.includes(token)) && tokens.some((token) => !specials.includes(token)),
      JSON.stringify(tokens));
    assert.deepEqual(skipped.logprobs.tokens, tokens);
    assert.ok(specials.some((special) => shown.text.includes(special)), shown.text);
    assert.equal(skipped.text, withoutSpecials(shown.text));
    // Each token's text begins at its offset; a skipped token's offset is where the next text begins.
    for (const { text, logprobs } of [skipped, shown]) {
      const characters = Array.from(text);
      logprobs.tokens.forEach((token, i) => {
        const offset = logprobs.text_offset[i];
        if (text === skipped.text && specials.includes(token))
          assert.equal(offset, logprobs.text_offset[i + 1] ?? characters.length, `${token} at ${i}`);
        else if (!token.startsWith('bytes:'))
          assert.ok(characters.slice(offset).join('').startsWith(token), `${token} at ${i}: ${text}`);
      });
    }

    const chat = { ...forcing, messages: [{ role: 'user', content: 'The sea is' }], logprobs: true };
    const chatSkipped = await assertOneListing('chat', chat);
    const chatShown = await assertOneListing('chat', { ...chat, skip_special_tokens: false });
    assert.ok(specials.some((special) => chatShown.text.includes(special)), chatShown.text);
    assert.equal(chatSkipped.text, withoutSpecials(chatShown.text));
    assert.deepEqual(chatSkipped.logprobs.map((entry) => entry.token), chatShown.logprobs.map((entry) => entry.token));
  });

test('/v1/models lists the served model', { timeout: 10_000 }, async () => {
  const models = [];
  for await (const model of client.models.list()) models.push(model.id);
  assert.deepEqual(models, [modelId]);
  const { status } = await request(server, `/v1/models/${modelId}`, { method: 'GET' });
  assert.equal(status, 200);
  // The model directory names the same model.
  const reply = await client.chat.completions.create({ model: modelDir, messages, max_tokens: 2 });
  assert.equal(reply.model, modelId);
});

test('/props names the device and the numerics that tensorfold --version reports', { timeout: 10_000 }, async () => {
  const { status, json } = await request(server, '/props', { method: 'GET' });
  assert.equal(status, 200);
  assert.equal(json.model, modelId);
  assert.equal(json.device, 'cpu');
  const version = execFileSync(process.env.TF_BINARY, ['--version'], { encoding: 'utf8' });
  assert.ok(json.numerics.length > 0 && version.includes(`cpu numerics: ${json.numerics})`), version);
});

test('/tokenize and /detokenize round-trip', { timeout: 10_000 }, async () => {
  const content = 'Hello, world! <|im_start|> ünïcödé 🌊';
  const tokenized = await request(server, '/tokenize', { body: { content, add_special: false } });
  assert.equal(tokenized.status, 200);
  assert.ok(tokenized.json.tokens.length > 0);
  assert.ok(tokenized.json.tokens.every(Number.isInteger));
  const detokenized = await request(server, '/detokenize', {
    body: { tokens: tokenized.json.tokens },
  });
  assert.equal(detokenized.status, 200);
  assert.equal(detokenized.json.content, content);
});

test('continue_final_message: the reply continues the last assistant message\'s text', { timeout: 60_000 }, async () => {
  const chat = [{ role: 'user', content: 'Write a function that adds two numbers.' },
                { role: 'assistant', content: 'def add(a, b):\n' }];
  const prompt = await request(server, '/tokenize', { body: { messages: chat, continue_final_message: true } });
  assert.equal(prompt.status, 200);
  const text = (await request(server, '/detokenize', { body: { tokens: prompt.json.tokens } })).json.content;
  assert.ok(text.endsWith('def add(a, b):\n'), JSON.stringify(text));
  const reply = await client.chat.completions.create({
    model: modelId, messages: chat, max_tokens: 8, temperature: 0, continue_final_message: true,
  });
  assert.equal(reply.usage.prompt_tokens, prompt.json.tokens.length);
  const completion = await client.completions.create({
    model: modelId, prompt: prompt.json.tokens, max_tokens: 8, temperature: 0,
  });
  assert.equal(reply.choices[0].message.content, completion.choices[0].text);
  // Continuing a user message, or with the generation prompt asked for too, is refused by name.
  for (const body of [{ messages: [chat[0]], continue_final_message: true },
                      { messages: chat, continue_final_message: true, add_generation_prompt: true }]) {
    const refused = await request(server, '/v1/chat/completions', { body: { model: modelId, max_tokens: 4, ...body } });
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.param, 'continue_final_message');
  }
});

test('/metrics counts requests and tokens in Prometheus text', { timeout: 30_000 }, async () => {
  const before = await metrics(server);
  await client.completions.create({ model: modelId, prompt: 'count me', max_tokens: 5 });
  const after = await metrics(server);
  for (const name of ['requests_total', 'prompt_tokens_total', 'generated_tokens_total',
    'rounds_total', 'rows_per_round', 'queue_depth', 'lanes_live', 'drafted_tokens_total',
    'accepted_tokens_total']) {
    assert.equal(typeof after[`tensorfold_${name}`], 'number', name);
  }
  assert.equal(after.tensorfold_requests_total, before.tensorfold_requests_total + 1);
  assert.ok(after.tensorfold_generated_tokens_total > before.tensorfold_generated_tokens_total);
  assert.ok(after.tensorfold_rounds_total > before.tensorfold_rounds_total);
  const raw = await fetch(`${server.baseUrl}/metrics`);
  assert.match(raw.headers.get('content-type'), /^text\/plain/);
  assert.match(await raw.text(), /# TYPE tensorfold_requests_total counter/);
});

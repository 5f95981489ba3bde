// Forced tool calls (tool_choice "required" and a named function) on a Qwen3.5-class template,
// through the real server and the official `openai` client: the tiny hybrid with the real Qwen3
// vocabulary, served with the Qwen3.6 chat template, so its calls are the template's XML
// (<function=NAME><parameter=KEY>). Even a random model then writes a call the reply parser reads
// as OpenAI tool_calls with schema-valid arguments in the schema's order, the same drafted or
// undrafted, greedy or sampled, streamed or whole.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { hybridChatSources, linkedModelDir, openaiClient, request, startServer } from './harness.mjs';

let server;
let client;
let dir;
before(async () => {
  dir = linkedModelDir(hybridChatSources, 'qwen3.6.jinja');
  server = await startServer(['--parallel', '4', '--served-model-name', 'hybrid'], { model: dir });
  client = openaiClient(server);
});
after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

// Values a random model finishes quickly: enums, integers, booleans (a free string could run on).
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
    parameters: { type: 'object', properties: {
      // Not alphabetical: the arguments must keep this order.
      days: { type: 'integer' }, city: { type: 'string', enum: ['Paris', 'Oslo'] }, metric: { type: 'boolean' } },
    required: ['days', 'city'] } } },
  { type: 'function', function: { name: 'get_time',
    parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris for the next three days?' }];

function checkArguments(call) {
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.ok(Number.isInteger(args.days), call.function.arguments);
    assert.ok(['Paris', 'Oslo'].includes(args.city), call.function.arguments);
    if ('metric' in args) assert.equal(typeof args.metric, 'boolean');
    assert.deepEqual(Object.keys(args), ['days', 'city', 'metric'].filter((key) => key in args), 'the schema\'s order');
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(args.zone), call.function.arguments);
  }
}

// A stream folded into calls (id and name in a call's first delta, then argument fragments).
async function streamedCalls(params) {
  const calls = [];
  let finishReason = null;
  let content = '';
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
    for (const choice of chunk.choices) {
      content += choice.delta?.content ?? '';
      for (const delta of choice.delta?.tool_calls ?? []) {
        if (!calls[delta.index]) calls[delta.index] = { name: delta.function.name, arguments: '' };
        calls[delta.index].arguments += delta.function?.arguments ?? '';
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return { calls, finishReason, content };
}

for (const sampling of [{ temperature: 0 }, { temperature: 0.9, seed: 5 }]) {
  test(`a named function is called with schema-valid arguments; drafted = undrafted, streamed = whole (T=${sampling.temperature})`,
    { timeout: 120_000 }, async () => {
      const params = { model: 'hybrid', messages, tools, max_tokens: 200, ...sampling,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        chat_template_kwargs: { enable_thinking: false } };
      const drafted = await client.chat.completions.create(params);
      const choice = drafted.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      assert.equal(choice.message.tool_calls.length, 1);
      assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
      checkArguments(choice.message.tool_calls[0]);
      const undrafted = await client.chat.completions.create({ ...params, draft: false });
      assert.equal(undrafted.token_sha, drafted.token_sha);
      const named = (calls) => calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
      assert.deepEqual(named(undrafted.choices[0].message.tool_calls), named(choice.message.tool_calls));
      assert.equal(undrafted.timings.draft_n, 0);
      const streamed = await streamedCalls(params);
      assert.equal(streamed.finishReason, 'tool_calls');
      assert.deepEqual(streamed.calls, named(choice.message.tool_calls));
    });
}

test('"required" calls one of the tools; parallel_tool_calls false allows exactly one', { timeout: 120_000 }, async () => {
  for (const seed of [1, 2, 3]) {
    const params = { model: 'hybrid', messages, tools, max_tokens: 200, temperature: 1, seed, tool_choice: 'required',
      parallel_tool_calls: false, reasoning_effort: 'none' };
    const reply = await client.chat.completions.create(params);
    const choice = reply.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.tool_calls.length, 1);
    checkArguments(choice.message.tool_calls[0]);
    const undrafted = await client.chat.completions.create({ ...params, draft: false });
    assert.equal(undrafted.token_sha, reply.token_sha);
  }
});

test('with thinking on, the reasoning comes first and is not a call', { timeout: 60_000 }, async () => {
  const reply = await client.chat.completions.create({
    model: 'hybrid', messages, tools, max_tokens: 6, temperature: 0, tool_choice: 'required' });
  const choice = reply.choices[0];
  assert.equal(choice.finish_reason, 'length');
  assert.ok(choice.message.reasoning_content.length > 0, JSON.stringify(choice));
  assert.equal(choice.message.tool_calls, undefined);
});

test('a schema this template\'s calls cannot hold is a 400 naming it', { timeout: 10_000 }, async () => {
  const reply = await request(server, '/v1/chat/completions', { body: {
    model: 'hybrid', messages, max_tokens: 4, tool_choice: 'required',
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object',
      properties: { s: { type: 'string', pattern: '^a+$' } } } } }] } });
  assert.equal(reply.status, 400, reply.text);
  assert.equal(reply.json.error.param, 'tools[0].function.parameters.properties.s.pattern');
});

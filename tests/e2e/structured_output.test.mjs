// Structured output, forced tool calls, logit_bias / stop_token_ids and Predicted Outputs through
// the real server with the official `openai` client: a json_schema reply parses and validates, the
// reply is the same drafted or not, a prediction changes no token and is reported in usage, and
// every bad value of these fields is a 400 naming its parameter.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { modelId, openaiClient, request, startServer } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--parallel', '4']);
  client = openaiClient(server);
});
after(async () => { await server?.stop(); });

const messages = [{ role: 'user', content: 'Describe a cat as JSON.' }];

// Bounded in length, so even a random model finishes it well within max_tokens.
const schema = {
  type: 'object',
  properties: {
    color: { enum: ['black', 'white', 'tabby'] },
    age: { type: 'integer' },
    indoor: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,6}$' }, maxItems: 2 },
    owner: { anyOf: [{ type: 'null' }, { type: 'object', properties: { id: { type: 'integer' } }, required: ['id'] }] },
  },
  required: ['color', 'age', 'indoor', 'tags', 'owner'],
  additionalProperties: false,
};

// A validator for the subset the schema above uses.
function validate(value, s, where = '$') {
  if (s.anyOf) {
    assert.ok(s.anyOf.some((branch) => { try { validate(value, branch, where); return true; } catch { return false; } }),
      `${where}: no anyOf branch matches ${JSON.stringify(value)}`);
    return;
  }
  if (s.enum) { assert.ok(s.enum.includes(value), `${where}: ${JSON.stringify(value)} not in enum`); return; }
  switch (s.type) {
    case 'object':
      assert.ok(value && typeof value === 'object' && !Array.isArray(value), `${where}: not an object`);
      for (const key of s.required ?? []) assert.ok(key in value, `${where}: missing ${key}`);
      for (const [key, item] of Object.entries(value)) {
        assert.ok(key in s.properties, `${where}: unexpected member ${key}`);
        validate(item, s.properties[key], `${where}.${key}`);
      }
      return;
    case 'array':
      assert.ok(Array.isArray(value), `${where}: not an array`);
      if (s.maxItems !== undefined) assert.ok(value.length <= s.maxItems, `${where}: too many items`);
      value.forEach((item, i) => validate(item, s.items, `${where}[${i}]`));
      return;
    case 'string':
      assert.equal(typeof value, 'string', where);
      if (s.pattern) assert.match(value, new RegExp(s.pattern), where);
      return;
    case 'integer': assert.ok(Number.isInteger(value), `${where}: not an integer`); return;
    case 'boolean': assert.equal(typeof value, 'boolean', where); return;
    case 'null': assert.equal(value, null, where); return;
    default: throw new Error(`validator: unknown type ${s.type}`);
  }
}

const responseFormat = { type: 'json_schema', json_schema: { name: 'cat', schema, strict: true } };

describe('structured output', () => {
  for (const temperature of [0, 1]) {
    test(`json_schema reply parses and validates, drafted = undrafted, streamed = whole (T=${temperature})`,
      { timeout: 120_000 }, async () => {
        const params = { model: modelId, messages, max_tokens: 200, temperature, seed: 11, response_format: responseFormat };
        const reply = await client.chat.completions.create(params);
        assert.equal(reply.choices[0].finish_reason, 'stop', reply.choices[0].message.content);
        const parsed = JSON.parse(reply.choices[0].message.content);
        validate(parsed, schema);
        // Every member is required: all present, in the order the schema lists them (not sorted).
        assert.deepEqual(Object.keys(parsed), Object.keys(schema.properties));
        const undrafted = await client.chat.completions.create({ ...params, draft: false });
        assert.equal(undrafted.token_sha, reply.token_sha);
        const stream = await client.chat.completions.create({ ...params, stream: true });
        let text = '';
        for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
        assert.equal(text, reply.choices[0].message.content);
      });
  }

  // The common identifier schema: a pattern and length bounds at once, lengths in code points.
  test('a pattern with minLength/maxLength binds the reply both ways, drafted = undrafted', { timeout: 120_000 }, async () => {
    const boundSchema = {
      type: 'object',
      properties: {
        id: { type: 'string', pattern: '^[a-z0-9_]+$', minLength: 3, maxLength: 8 },
        label: { type: 'string', pattern: '[A-Z\u00e9]', maxLength: 4 },
      },
      required: ['id', 'label'],
      additionalProperties: false,
    };
    for (const [temperature, seed] of [[0, 1], [1, 5], [1, 6]]) {
      const params = { model: modelId, messages, max_tokens: 120, temperature, seed,
        response_format: { type: 'json_schema', json_schema: { name: 'bounded', schema: boundSchema, strict: true } } };
      const reply = await client.chat.completions.create(params);
      const text = reply.choices[0].message.content;
      assert.equal(reply.choices[0].finish_reason, 'stop', text);
      const value = JSON.parse(text);
      for (const [key, member] of Object.entries(boundSchema.properties)) {
        const length = [...value[key]].length;
        assert.ok(length >= (member.minLength ?? 0) && length <= member.maxLength, `${key}: ${text}`);
        assert.match(value[key], new RegExp(member.pattern, 'u'), `${key}: ${text}`);
      }
      const undrafted = await client.chat.completions.create({ ...params, draft: false });
      assert.equal(undrafted.choices[0].message.content, text);
      assert.equal(undrafted.token_sha, reply.token_sha);
    }
  });

  test('json_object and a GBNF grammar', { timeout: 120_000 }, async () => {
    const object = await client.chat.completions.create({
      model: modelId, messages, max_tokens: 300, temperature: 0, response_format: { type: 'json_object' },
    });
    const text = object.choices[0].message.content;
    if (object.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
    else assert.ok(text.startsWith('{'), text);
    const grammar = await client.chat.completions.create({
      model: modelId, messages, max_tokens: 40, temperature: 1, seed: 3,
      grammar: 'root ::= ("yes" | "no" | "caf\u00e9") "!"{1,3}',
    });
    assert.match(grammar.choices[0].message.content, /^(yes|no|café)!{1,3}$/);
    assert.equal(grammar.choices[0].finish_reason, 'stop');
  });

  test('tool_choice naming a function forces a Qwen3 tool call with schema-valid arguments', { timeout: 120_000 },
    async () => {
      const tools = [{
        type: 'function',
        function: {
          name: 'get_weather',
          parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] }, days: { type: 'integer' } },
            required: ['city', 'days'] },
        },
      }];
      const reply = await client.chat.completions.create({
        model: modelId, messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 120, temperature: 0, tools,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      const message = reply.choices[0].message;
      // Parsed into tool_calls where the server parses them; the raw Qwen3 block otherwise.
      const call = message.tool_calls?.[0]?.function ?? (() => {
        const match = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(message.content);
        assert.ok(match, message.content);
        const parsed = JSON.parse(match[1]);
        return { name: parsed.name, arguments: JSON.stringify(parsed.arguments) };
      })();
      assert.equal(call.name, 'get_weather');
      const args = JSON.parse(call.arguments);
      assert.ok(['Paris', 'Oslo'].includes(args.city));
      assert.ok(Number.isInteger(args.days));
    });

  test('logit_bias and stop_token_ids do what they say', { timeout: 120_000 }, async () => {
    const base = { model: modelId, messages, max_tokens: 12, temperature: 0, return_token_ids: true };
    const free = await request(server, '/v1/chat/completions', { body: base });
    const ids = free.json.completion_token_ids;
    assert.ok(ids.length >= 6, free.text);
    const forced = await request(server, '/v1/chat/completions', { body: { ...base, logit_bias: { [ids[2]]: 100 } } });
    assert.ok(forced.json.completion_token_ids.every((id) => id === ids[2]), forced.text);
    const stopped = await request(server, '/v1/chat/completions', { body: { ...base, stop_token_ids: [ids[4]] } });
    assert.deepEqual(stopped.json.completion_token_ids, ids.slice(0, ids.indexOf(ids[4])));
    assert.equal(stopped.json.choices[0].finish_reason, 'stop');
  });
});

describe('predicted outputs', () => {
  test('a prediction changes no token and is reported in usage', { timeout: 120_000 }, async () => {
    const params = { model: modelId, messages: [{ role: 'user', content: 'Repeat: the quick brown fox.' }],
      max_tokens: 48, temperature: 0 };
    const plain = await client.chat.completions.create(params);
    const text = plain.choices[0].message.content;
    const predicted = await client.chat.completions.create({ ...params, prediction: { type: 'content', content: text } });
    assert.equal(predicted.choices[0].message.content, text);
    assert.equal(predicted.token_sha, plain.token_sha);
    const details = predicted.usage.completion_tokens_details;
    const predictionTokens = (await request(server, '/tokenize', { body: { content: text, add_special: false } })).json.tokens;
    assert.equal(details.accepted_prediction_tokens + details.rejected_prediction_tokens, predictionTokens.length);
    assert.ok(details.accepted_prediction_tokens > 0, JSON.stringify(details));
    assert.ok(predicted.timings.draft_accepted_n > 0, 'the prediction was drafted and accepted');
    // Content parts are the same prediction; a wrong one is still only a prediction.
    const parts = await client.chat.completions.create({
      ...params, prediction: { type: 'content', content: [{ type: 'text', text: 'unrelated words ' }, { type: 'text', text: 'here' }] },
    });
    assert.equal(parts.token_sha, plain.token_sha);
    assert.equal(plain.usage.completion_tokens_details, undefined);
  });
});

// JSON Schema's own meaning of the keywords the server supports, to judge replies independently of
// its grammars: keywords beside $ref and anyOf all hold, a type's keywords bind only values of that
// type, patterns are ECMAScript (with the u flag).
function conforms(value, s, root = s) {
  if (typeof s === 'boolean') return s;
  if (s.$ref) {
    const [, container, name] = s.$ref.split('/');
    if (!conforms(value, root[container][name], root)) return false;
  }
  if (s.allOf && !s.allOf.every((branch) => conforms(value, branch, root))) return false;
  if (s.anyOf && !s.anyOf.some((branch) => conforms(value, branch, root))) return false;
  if (s.enum && !s.enum.some((v) => JSON.stringify(v) === JSON.stringify(value))) return false;
  if ('const' in s && JSON.stringify(s.const) !== JSON.stringify(value)) return false;
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  if (s.type && ![].concat(s.type).some((t) => t === type || (t === 'integer' && Number.isInteger(value)))) return false;
  if (type === 'string') {
    const length = [...value].length;
    if (length < (s.minLength ?? 0) || length > (s.maxLength ?? Infinity)) return false;
    if (s.pattern && !new RegExp(s.pattern, 'u').test(value)) return false;
  }
  if (type === 'array') {
    if (value.length < (s.minItems ?? 0) || value.length > (s.maxItems ?? Infinity)) return false;
    if (s.items && !value.every((item) => conforms(item, s.items, root))) return false;
  }
  if (type === 'object') {
    if (!(s.required ?? []).every((key) => key in value)) return false;
    for (const [key, item] of Object.entries(value)) {
      const member = s.properties?.[key] ?? s.additionalProperties ?? true;
      if (!conforms(item, member, root)) return false;
    }
  }
  return true;
}

// Schemas whose keywords the server once dropped (the reply broke them) or whose patterns it wrote
// as invalid JSON or refused.
const keptKeywordSchemas = [
  { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false,
    anyOf: [{ type: 'object' }, { type: 'array' }] },
  { type: 'string', anyOf: [{ maxLength: 2 }, { minLength: 5, maxLength: 8 }] },
  { minLength: 5 },
  { pattern: '^x$' },
  { $defs: { s: { type: 'string' } }, $ref: '#/$defs/s', maxLength: 2 },
  { enum: ['a', 'abcdefgh'], maxLength: 3 },
  { type: 'string', pattern: '^a\tb$' },
  { type: 'string', pattern: '^[\\.\\/\\+\\*]{1,4}$' },
  { type: 'string', pattern: '^[^a-z]{2}.$' },
  { type: 'string', pattern: '^[a-z0-9_]+$', minLength: 2, maxLength: 5 },
  { type: 'string', pattern: 'x', maxLength: 3 },
];

describe('every keyword of a schema binds the reply', () => {
  for (const [i, schema] of keptKeywordSchemas.entries()) {
    for (const [temperature, seed] of [[0, 1], [1, 7], [1, 8]]) {
      test(`schema ${i} ${JSON.stringify(schema)} (T=${temperature}, seed ${seed})`, { timeout: 60_000 }, async () => {
        const reply = await request(server, '/v1/chat/completions', { body: {
          model: modelId, messages: [{ role: 'user', content: 'Return a JSON value.' }], max_tokens: 120, temperature, seed,
          response_format: { type: 'json_schema', json_schema: { name: 't', schema } },
        } });
        assert.equal(reply.status, 200, reply.text);
        const choice = reply.json.choices[0];
        // A reply cut by max_tokens is a prefix; one that stopped is a whole value of the schema.
        if (choice.finish_reason !== 'stop') return;
        const value = JSON.parse(choice.message.content);
        assert.ok(conforms(value, schema), `${choice.message.content} breaks ${JSON.stringify(schema)}`);
      });
    }
  }
});

describe('bad values name their parameter', () => {
  const chat = (extra) => ({ model: modelId, messages, max_tokens: 4, ...extra });
  const cases = [
    ['response_format type', { response_format: { type: 'xml' } }, 'response_format.type'],
    ['response_format not an object', { response_format: 'json' }, 'response_format'],
    ['json_schema missing', { response_format: { type: 'json_schema' } }, 'response_format.json_schema'],
    ['unsupported schema keyword', { response_format: { type: 'json_schema', json_schema: { name: 'x',
      schema: { type: 'object', properties: { n: { type: 'number', minimum: 0 } } } } } },
    'response_format.json_schema.schema.properties.n.minimum'],
    ['unsupported pattern', { response_format: { type: 'json_schema', json_schema: { name: 'x',
      schema: { type: 'string', pattern: '(?<=a)b' } } } }, 'response_format.json_schema.schema.pattern'],
    ['pattern with a bad range', { response_format: { type: 'json_schema', json_schema: { name: 'x',
      schema: { type: 'object', properties: { s: { type: 'string', pattern: '[z-a]' } } } } } },
    'response_format.json_schema.schema.properties.s.pattern'],
    ['anyOf whose every branch its siblings rule out', { response_format: { type: 'json_schema', json_schema: {
      name: 'x', schema: { type: 'object', anyOf: [{ type: 'string' }] } } } }, 'response_format.json_schema.schema.anyOf'],
    ['enum whose every value its siblings rule out', { response_format: { type: 'json_schema', json_schema: {
      name: 'x', schema: { enum: ['abcdefgh'], maxLength: 3 } } } }, 'response_format.json_schema.schema.enum'],
    ['json_schema without a name', { response_format: { type: 'json_schema', json_schema: { schema: {} } } },
      'response_format.json_schema.name'],
    ['json_schema strict not a boolean', { response_format: { type: 'json_schema', json_schema: { name: 'x',
      strict: 'yes', schema: {} } } }, 'response_format.json_schema.strict'],
    ['grammar not a string', { grammar: 5 }, 'grammar'],
    ['grammar that does not compile', { grammar: 'root ::= missing' }, 'grammar'],
    ['grammar and response_format', { grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, 'grammar'],
    ['logit_bias out of range', { logit_bias: { 5: 200 } }, 'logit_bias'],
    ['logit_bias key not an id', { logit_bias: { abc: 1 } }, 'logit_bias'],
    ['logit_bias id outside the vocabulary', { logit_bias: { 99999999: 1 } }, 'logit_bias'],
    ['min_tokens negative', { min_tokens: -3 }, 'min_tokens'],
    ['min_tokens above max_tokens', { min_tokens: 10 }, 'min_tokens'],
    ['stop_token_ids not ids', { stop_token_ids: ['a'] }, 'stop_token_ids'],
    ['stop_token_ids outside the vocabulary', { stop_token_ids: [99999999] }, 'stop_token_ids'],
    ['ignore_eos not a boolean', { ignore_eos: 1 }, 'ignore_eos'],
    ['ignore_eos with a grammar', { ignore_eos: true, response_format: { type: 'json_object' } }, 'ignore_eos'],
    ['prediction type', { prediction: { type: 'patch', content: 'x' } }, 'prediction.type'],
    ['prediction content', { prediction: { type: 'content', content: 7 } }, 'prediction.content'],
    ['prediction longer than the context', { prediction: { type: 'content', content: 'x y '.repeat(50000) } }, 'prediction'],
    ['tool_choice required without tools', { tool_choice: 'required' }, 'tool_choice'],
    ['tool_choice naming no tool', { tool_choice: { type: 'function', function: { name: 'x' } },
      tools: [{ type: 'function', function: { name: 'y' } }] }, 'tool_choice.function.name'],
  ];
  for (const [what, extra, param] of cases) {
    test(what, async () => {
      await assert.rejects(client.chat.completions.create(chat(extra)), (error) => {
        assert.equal(error.status, 400, error.message);
        assert.equal(error.param, param, error.message);
        return true;
      });
    });
  }
});

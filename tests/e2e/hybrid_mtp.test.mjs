// A Qwen3.5-class hybrid with an MTP head served with `--drafter mtp`: the tiny hybrid fixture's
// weights plus random mtp.* tensors (the fixture has none), written here in the safetensors layout.
// Replies with MTP drafts equal the draft-off ones and the solo ones when several run together, and
// /metrics counts the drafts under proposer="mtp".
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { hybridChatSources, hybridFixtureDir, linkedModelDir, metrics, openaiClient, request, startServer } from './harness.mjs';

// Rewrites dir/model.safetensors as the fixture's tensors followed by random f32 mtp.* tensors.
function writeWeightsWithMtp(dir) {
  const config = JSON.parse(fs.readFileSync(path.join(hybridFixtureDir, 'config.json'), 'utf8'));
  const text = config.text_config ?? config;
  const hidden = text.hidden_size, inter = text.intermediate_size, headDim = text.head_dim;
  const qDim = text.num_attention_heads * headDim, kvDim = text.num_key_value_heads * headDim;
  const source = fs.readFileSync(path.join(hybridFixtureDir, 'model.safetensors'));
  const headerLength = Number(source.readBigUInt64LE(0));
  const header = JSON.parse(source.subarray(8, 8 + headerLength).toString('utf8'));
  const data = source.subarray(8 + headerLength);
  assert.equal(data.length % 4, 0, 'the fixture data must end on a 4-byte boundary');
  let state = 12345;  // a small LCG: the values only need to be fixed
  const random = () => ((state = (state * 1103515245 + 12345) % 2147483648) / 2147483648 - 0.5) * 0.4;
  const shapes = {
    'mtp.fc.weight': [hidden, 2 * hidden], 'mtp.pre_fc_norm_embedding.weight': [hidden],
    'mtp.pre_fc_norm_hidden.weight': [hidden], 'mtp.norm.weight': [hidden],
    'mtp.layers.0.input_layernorm.weight': [hidden], 'mtp.layers.0.post_attention_layernorm.weight': [hidden],
    'mtp.layers.0.self_attn.q_proj.weight': [2 * qDim, hidden], 'mtp.layers.0.self_attn.k_proj.weight': [kvDim, hidden],
    'mtp.layers.0.self_attn.v_proj.weight': [kvDim, hidden], 'mtp.layers.0.self_attn.o_proj.weight': [hidden, qDim],
    'mtp.layers.0.self_attn.q_norm.weight': [headDim], 'mtp.layers.0.self_attn.k_norm.weight': [headDim],
    'mtp.layers.0.mlp.gate_proj.weight': [inter, hidden], 'mtp.layers.0.mlp.up_proj.weight': [inter, hidden],
    'mtp.layers.0.mlp.down_proj.weight': [hidden, inter],
  };
  const extra = [];
  let offset = data.length;
  for (const [name, shape] of Object.entries(shapes)) {
    const values = new Float32Array(shape.reduce((a, b) => a * b, 1)).map(random);
    const bytes = Buffer.from(values.buffer);
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + bytes.length] };
    offset += bytes.length;
    extra.push(bytes);
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);  // the data starts 8-byte aligned
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  const target = path.join(dir, 'model.safetensors');
  fs.rmSync(target);  // a link to the fixture
  fs.writeFileSync(target, Buffer.concat([length, Buffer.from(json, 'utf8'), data, ...extra]));
}

let server;
let client;
let dir;
let modelId;
before(async () => {
  dir = linkedModelDir(hybridChatSources);
  writeWeightsWithMtp(dir);
  server = await startServer(['--parallel', '4', '--drafter', 'mtp', '--lanes', '1'], { model: dir });
  client = openaiClient(server);
  modelId = (await request(server, '/v1/models', { method: 'GET' })).json.data[0].id;
});
after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const prompts = ['the cat sat on the mat. the cat sat on the mat. the cat', 'x = [1, 2, 3]\ny = [1, 2,'];

async function completion(prompt, extra = {}) {
  return client.completions.create({ model: modelId, prompt, max_tokens: 24, temperature: 0, ...extra });
}

test('completions with MTP drafts equal the draft-off and the solo replies', { timeout: 180_000 }, async () => {
  const before = await metrics(server);
  const requests = prompts.flatMap((prompt) => [{ prompt }, { prompt, temperature: 0.8, seed: 7 }]);
  const solo = [];
  for (const { prompt, ...sampling } of requests) {
    const drafted = await completion(prompt, sampling);
    const plain = await completion(prompt, { ...sampling, draft: false });
    assert.equal(drafted.token_sha, plain.token_sha, prompt);
    assert.equal(drafted.choices[0].text, plain.choices[0].text);
    solo.push(drafted);
  }
  const together = await Promise.all(requests.map(({ prompt, ...sampling }) => completion(prompt, sampling)));
  for (let i = 0; i < requests.length; ++i) assert.equal(together[i].token_sha, solo[i].token_sha, `request ${i}`);
  const after = await metrics(server);
  const key = 'tensorfold_drafted_by_proposer_total{proposer="mtp"}';
  assert.ok(after[key] > (before[key] ?? 0), 'the MTP head drafted nothing');
});

test('--drafter mtp on a checkpoint without an MTP head ends the server naming the tensor', { timeout: 60_000 }, () => {
  const headless = linkedModelDir(hybridChatSources);
  try {
    const run = spawnSync(process.env.TF_BINARY, ['serve', '--model', headless, '--drafter', 'mtp', '--host', '127.0.0.1',
      '--port', '0'], { encoding: 'utf8', timeout: 50_000 });
    assert.equal(run.status, 1, run.stderr);
    assert.match(run.stderr, /has no MTP head \(tensor mtp\.fc\.weight is missing\)/);
    assert.ok(run.stderr.includes(headless), run.stderr);
  } finally {
    fs.rmSync(headless, { recursive: true, force: true });
  }
});

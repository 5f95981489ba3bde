// The command line: every refusal says `error: ...` and exits 1 (the parser's own included), values a
// range check cannot see (NaN, a wrapped seed, a trailing comma) are refused, nothing a run leaves
// behind mixes two models, and receipts record what was typed and the commit built from.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { sourceDir } from './harness.mjs';

const binary = process.env.TF_BINARY;
const fixture = (name) => path.join(sourceDir, 'tests', 'fixtures', 'models', name);
const tiny = fixture('qwen3-tiny-a');

function run(args, { env = {}, input } = {}) {
  const result = spawnSync(binary, args, { encoding: 'utf8', input, env: { ...process.env, ...env }, timeout: 120_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

function expectRefusal(args, pattern, options) {
  const result = run(args, options);
  assert.equal(result.status, 1, `${args.join(' ')}: ${result.stderr}`);
  assert.match(result.stderr, /^error: /, args.join(' '));
  assert.match(result.stderr, pattern, args.join(' '));
  return result;
}

test('flags the parser refuses are user errors like any other: "error:" and status 1', () => {
  expectRefusal(['eval', '--threads', '-1'], /--threads/);
  expectRefusal(['eval', '--model', tiny], /--prompt-ids/);
  expectRefusal(['no-such-command'], /subcommand|no-such-command/);
  const help = run(['--help']);
  assert.equal(help.status, 0);
  assert.match(help.stdout, /generate/);
});

test('--help and --version into a full disk fail', { skip: !fs.existsSync('/dev/full') }, () => {
  for (const flag of ['--help', '--version']) {
    const result = spawnSync('sh', ['-c', `"${binary}" ${flag} > /dev/full`], { encoding: 'utf8' });
    assert.equal(result.status, 1, flag);
  }
});

test('values a range check cannot see are refused by name', () => {
  const base = ['generate', '--model', tiny, '--prompt-ids', '1,2,3', '-n', '2'];
  expectRefusal([...base, '--temp', 'nan'], /--temp/);
  expectRefusal([...base, '--top-p', 'nan'], /--top-p/);
  expectRefusal([...base, '--min-p', 'nan'], /--min-p/);
  for (const seed of ['-1', '18446744073709551616', '99999999999999999999999', '1e3'])
    expectRefusal([...base, '--seed', seed], /--seed/);
  assert.equal(run([...base, '--seed', '18446744073709551615']).status, 0);
  expectRefusal(['generate', '--model', tiny, '--prompt-ids', '1,', '-n', '2'], /--prompt-ids.*trailing/);
  expectRefusal(['eval', '--model', tiny, '--prompt-ids', '1,2', '--all-logits'], /--all-logits.*--json/);
});

test('serve refuses a default reply length above the limit on one', () => {
  expectRefusal(['serve', '--model', tiny, '--port', '0', '--max-tokens-limit', '100', '--default-max-tokens', '200'],
                /--default-max-tokens \(200\) is above --max-tokens-limit \(100\)/);
  expectRefusal(['serve', '--model', tiny, '--port', '0', '--max-tokens-limit', '100'], /--default-max-tokens/,
                { env: { TF_DEFAULT_MAX_TOKENS: '101' } });
});

test('generate without a tokenizer prints the reply\'s ids', () => {
  const plain = run(['generate', '--model', tiny, '--drafter', 'none', '--prompt-ids', '1,2,3', '-n', '4']);
  assert.equal(plain.status, 0, plain.stderr);
  const json = JSON.parse(run(['generate', '--model', tiny, '--drafter', 'none', '--prompt-ids', '1,2,3', '-n', '4', '--json']).stdout);
  assert.equal(plain.stdout.trim(), json.ids.join(','));
});

test('a config this engine would compute differently is refused, naming the field', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-cli-config-'));
  try {
    for (const file of fs.readdirSync(tiny)) fs.copyFileSync(path.join(tiny, file), path.join(dir, file));
    const config = JSON.parse(fs.readFileSync(path.join(tiny, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, hidden_act: 'gelu' }));
    expectRefusal(['eval', '--model', dir, '--prompt-ids', '1,2'], /hidden_act.*gelu/);
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, layer_types: ['full_attention'] }));
    expectRefusal(['eval', '--model', dir, '--prompt-ids', '1,2'], /layer_types.*num_hidden_layers/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('quantize writes only into a new or empty directory, and leaves nothing behind when it fails', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-cli-quantize-'));
  try {
    const used = path.join(root, 'used');
    fs.mkdirSync(used);
    fs.writeFileSync(path.join(used, 'tokenizer.json'), '{}');
    expectRefusal(['quantize', '--model', tiny, '--out', used], /not an empty directory/);
    assert.deepEqual(fs.readdirSync(used), ['tokenizer.json']);
    const failed = path.join(root, 'failed');
    expectRefusal(['quantize', '--model', tiny, '--out', failed, '--group-size', '128'], /group size 128/);
    assert.ok(!fs.existsSync(failed), 'the directory it made is gone');
    const empty = path.join(root, 'empty');
    fs.mkdirSync(empty);
    assert.equal(run(['quantize', '--model', tiny, '--out', empty, '--group-size', '32']).status, 0);
    assert.ok(fs.existsSync(path.join(empty, 'model.safetensors')));
    // A source the engine would refuse (a hybrid whose convolution width disagrees with its weights)
    // is refused before anything is written, naming the source.
    const bad = path.join(root, 'bad-source');
    fs.cpSync(fixture('qwen3.5-tiny-a'), bad, { recursive: true });
    const config = JSON.parse(fs.readFileSync(path.join(bad, 'config.json'), 'utf8'));
    (config.text_config ?? config).linear_conv_kernel_dim += 1;
    fs.writeFileSync(path.join(bad, 'config.json'), JSON.stringify(config));
    const out = path.join(root, 'from-bad');
    const refused = expectRefusal(['quantize', '--model', bad, '--out', out], /conv/);
    assert.match(refused.stderr, /bad-source/);
    assert.ok(!fs.existsSync(out), 'nothing written');
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('tokenize reads TF_MODEL as every other command does', () => {
  const chat = fixture('qwen3-tiny-chat');
  const byFlag = run(['tokenize', '--model', chat], { input: 'hello world' });
  const byEnv = run(['tokenize'], { input: 'hello world', env: { TF_MODEL: chat } });
  assert.equal(byFlag.status, 0, byFlag.stderr);
  assert.equal(byEnv.stdout, byFlag.stdout);
});

test('bench: --bits is the synthetic weights\' format only, and the receipt records the command as typed and the build\'s commit', () => {
  expectRefusal(['bench', '--model', tiny, '--bits', '4', '--prompt-len', '8', '--decode', '2', '--repeats', '1'],
    /--bits.*--synthetic/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-cli-receipt-'));
  try {
    const receipt = path.join(dir, 'r.md');
    const args = ['bench', '--model', tiny, '--prompt-len', '8', '--decode', '2', '--repeats', '1', '--threads', '1', '--receipt', receipt];
    const result = spawnSync(binary, args, { encoding: 'utf8', cwd: os.tmpdir() });
    assert.equal(result.status, 0, result.stderr);
    const text = fs.readFileSync(receipt, 'utf8');
    assert.ok(text.includes(`- command: \`tensorfold ${args.join(' ')}\``), text);
    const version = spawnSync(binary, ['--version'], { encoding: 'utf8' }).stdout;
    const commit = /commit ([^;]+);/.exec(version)[1];
    assert.ok(text.includes(`- commit: ${commit}`), `run outside the tree, the receipt still names ${commit}:\n${text}`);
    assert.doesNotMatch(text, /\(\d+-bit\)/, 'a bf16 model is not titled as quantized');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

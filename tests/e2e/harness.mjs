// Starts the real `tensorfold serve` on loopback for end-to-end tests and offers small helpers
// (raw JSON requests, SSE reading, /metrics parsing), every wait bounded by a timeout.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';

const binary = process.env.TF_BINARY;
export const sourceDir = process.env.TF_SOURCE_DIR ?? path.resolve(import.meta.dirname ?? '.', '../..');
export const modelDir = path.join(sourceDir, 'tests', 'fixtures', 'models', 'qwen3-tiny-chat');
export const modelId = 'qwen3-tiny-chat';
export const embeddedModelDir = path.join(sourceDir, 'models', 'tensorfold-code-target');
export const hybridFixtureDir = path.join(sourceDir, 'tests', 'fixtures', 'models', 'qwen3.5-tiny-chat');

// A temporary model directory of links to other directories' files ([{dir, files}], files left out:
// all of them), with tests/fixtures/templates/`templateFile` as its chat_template.jinja when given.
export function linkedModelDir(sources, templateFile) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-model-'));
  for (const { dir: from, files } of sources)
    for (const name of files ?? fs.readdirSync(from)) fs.symlinkSync(path.join(from, name), path.join(dir, name));
  if (templateFile)
    fs.copyFileSync(path.join(sourceDir, 'tests', 'fixtures', 'templates', templateFile), path.join(dir, 'chat_template.jinja'));
  return dir;
}

// The tiny hybrid (real Qwen3 vocabulary) with the tiny chat model's tokenizer files.
export const hybridChatSources = [
  { dir: hybridFixtureDir, files: ['config.json', 'generation_config.json', 'model.safetensors'] },
  { dir: modelDir, files: ['tokenizer.json', 'tokenizer_config.json'] },
];

// Spawns the server with --port 0 and reads the port it prints, so two runs never race for one.
// With embeddedDefault the server gets no --model: it runs what a user gets with no flags. `model`
// (or `modelDir`, the same) names another model directory than the tiny chat model.
export async function startServer(extraArgs = [],
                                  { startTimeoutMs = 60_000, embeddedDefault = false, model: modelOpt, modelDir: modelDirOpt,
                                    waitUntilReady = true } = {}) {
  const dir = modelOpt ?? modelDirOpt ?? modelDir;
  if (!binary) throw new Error('TF_BINARY must name the built tensorfold binary');
  const model = embeddedDefault ? [] : ['--model', dir];
  const args = ['serve', ...model, '--host', '127.0.0.1', '--port', '0', ...extraArgs];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const closed = new Promise((resolve) => child.once('close', resolve));  // exited, stderr read to its end
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not listen in time:\n${log}`)),
                             startTimeoutMs);
    child.stderr.on('data', (data) => {
      log += data;
      const match = /listening on http:\/\/[\d.]+:(\d+)/.exec(log);
      if (match) { clearTimeout(timer); resolve(Number(match[1])); }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${log}`));
    });
  });
  const server = {
    child,
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    log: () => log,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const outcome = await Promise.race([closed.then(() => 'exited'), sleep(5_000, 'timeout')]);
        if (outcome === 'timeout') child.kill('SIGKILL');
      }
      await Promise.race([closed, sleep(2_000)]);
      // A sanitized build (TF_BINARY from a -DTF_SANITIZE=ON tree) reports on stderr: any report
      // fails the test that started the server.
      const report = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.exec(log);
      if (report) throw new Error(`the server's sanitizer reported:\n${log.slice(Math.max(0, report.index - 200), report.index + 4000)}`);
    },
  };
  if (!waitUntilReady) return server;  // listening; the model may still be loading
  try {
    server.healthAnswers = await waitForHealth(server.baseUrl, startTimeoutMs);
  } catch (error) {
    await server.stop();
    throw new Error(`${error.message}\n${log}`);
  }
  return server;
}

// Returns every answer seen on the way ({status, body}), the last being 200.
export async function waitForHealth(baseUrl, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  const answers = [];
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${baseUrl}/health`);
      const body = await response.json();
      answers.push({ status: response.status, body });
      if (response.status === 200 && body.status === 'ok') return answers;
      last = `${response.status} ${JSON.stringify(body)}`;
    } catch (error) {
      last = error.message;
    }
    await sleep(100);
  }
  throw new Error(`/health did not answer 200 within ${timeoutMs} ms (last: ${last})`);
}

export function openaiClient(server, apiKey = 'unused') {
  return new OpenAI({ baseURL: `${server.baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
}

// A raw request; `body` may be an object (sent as JSON), a string or bytes.
export async function request(server, route, { method = 'POST', body, headers = {}, signal } = {}) {
  const payload = body === undefined || typeof body === 'string' || body instanceof Uint8Array
    ? body : JSON.stringify(body);
  const response = await fetch(`${server.baseUrl}${route}`, {
    method, body: payload, signal, headers: { 'content-type': 'application/json', ...headers },
  });
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON: callers look at text */ }
  return { status: response.status, headers: response.headers, json, text };
}

// The `data:` payloads of an SSE body, [DONE] included as the string '[DONE]'.
export function sseEvents(text) {
  return text.split('\n\n').filter((block) => block.startsWith('data: '))
    .map((block) => block.slice('data: '.length))
    .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
}

// `server.headers`, when a test sets it, carries the API key.
export async function metrics(server) {
  const response = await fetch(`${server.baseUrl}/metrics`, { headers: server.headers ?? {} });
  const values = {};
  for (const line of (await response.text()).split('\n')) {
    const match = /^(tensorfold_\w+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) values[match[1]] = Number(match[2]);
  }
  return values;
}

// Polls until predicate(metrics) holds; returns the last metrics either way.
export async function waitForMetrics(server, predicate, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  let values = await metrics(server);
  while (!predicate(values) && Date.now() < deadline) {
    await sleep(50);
    values = await metrics(server);
  }
  return values;
}

// A five-turn chat about one Python file (the multi-turn prefix cache's tests): `ask` sends the
// conversation so far and returns the reply; each reply's content joins the conversation.
export const chatQuestions = [
  'Write a Python function that adds two numbers.',
  'Now make it add three numbers.',
  'Rename the function to total.',
  'Add a docstring.',
  'Show the whole file again.',
];

export async function converse(ask) {
  const messages = [{ role: 'system', content: 'You are a helpful assistant that writes Python.' }];
  const replies = [];
  for (const question of chatQuestions) {
    messages.push({ role: 'user', content: question });
    const reply = await ask(messages);
    replies.push(reply);
    messages.push({ role: 'assistant', content: reply.choices[0].message.content });
  }
  return replies;
}

// Each turn of `warm` (a server with the prompt cache) equals the same turn of `fresh` (the cold
// conversation), and every later turn resumed the conversation so far from whole cached blocks.
export function assertResumedConversation(warm, fresh, assert) {
  for (let i = 0; i < chatQuestions.length; ++i) {
    assert.equal(warm[i].choices[0].message.content, fresh[i].choices[0].message.content, `turn ${i + 1}`);
    assert.equal(warm[i].token_sha, fresh[i].token_sha, `turn ${i + 1}`);
  }
  for (let i = 1; i < chatQuestions.length; ++i) {
    const { prompt_tokens: total, prompt_tokens_details: { cached_tokens: hit } } = warm[i].usage;
    assert.ok(hit > 0 && hit < total, `turn ${i + 1} reused the conversation so far (${hit} of ${total})`);
    assert.equal(hit % 16, 0, 'whole blocks');
  }
}

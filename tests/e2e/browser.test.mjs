// The chat page at / in headless Chromium against the embedded default model: a rename reply shows
// long-copied tokens and more than one token per round, and "run again with draft off" gives the
// same text and token_sha; with a Qwen3 template, a reply's reasoning_content is shown apart and
// folded. Screenshots go to browser-artifacts/ beside the binary.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import puppeteer from 'puppeteer-core';
import { embeddedModelDir, linkedModelDir, startServer } from './harness.mjs';

const chromiumPath = process.env.TF_CHROMIUM ?? '/usr/bin/chromium';
const artifactsDir = path.join(process.env.TF_BINARY ? path.dirname(process.env.TF_BINARY) : os.tmpdir(),
  'browser-artifacts');
const renamePrompt = 'Rename names to paths in this file:\n\nimport os\n\n\ndef list_files(root):\n' +
  '    names = []\n    for name in os.listdir(root):\n        names.append(os.path.join(root, name))\n' +
  '    return names\n';

let server;
let browser;
let page;
const pageErrors = [];
before(async () => {
  assert.ok(fs.existsSync(chromiumPath),
    `${chromiumPath} is missing: the browser test needs Debian's chromium (tools/install_deps.sh installs it)`);
  server = await startServer([], { embeddedDefault: true });
  browser = await puppeteer.launch({
    executablePath: chromiumPath, args: ['--no-sandbox', '--headless=new'], protocolTimeout: 60_000,
  });
  page = await browser.newPage();
  page.setDefaultTimeout(60_000);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.setViewport({ width: 1200, height: 900 });
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

async function valueOf(root, selector) {
  return root.$eval(selector, (node) => node.dataset.value);
}

test('a rename on the page is shaded by long copy and equals its draft-off rerun', { timeout: 180_000 },
  async () => {
    const response = await page.goto(`${server.baseUrl}/`, { waitUntil: 'load' });
    assert.equal(response.status(), 200, 'GET / serves the chat page');
    // The page runs only its own files and no other site may frame it (it keeps an API key); the
    // whole test below runs under that policy.
    assert.match(response.headers()['content-security-policy'], /default-src 'self'.*frame-ancestors 'none'/);
    assert.equal(response.headers()['x-content-type-options'], 'nosniff');
    await page.waitForFunction(() => document.getElementById('server-status').textContent === 'ready');
    assert.equal(await page.$eval('#model-name', (node) => node.textContent), 'tensorfold-code-target');

    await page.$eval('#temperature', (node) => { node.value = '0'; });
    await page.$eval('#max-tokens', (node) => { node.value = '200'; });
    await page.$eval('#prompt', (node, text) => { node.value = text; }, renamePrompt);
    await page.click('#send');
    const reply = await page.waitForSelector('.message.assistant[data-state]');
    assert.equal(await reply.evaluate((node) => node.dataset.state), 'done',
      await reply.evaluate((node) => node.textContent));

    const text = await reply.$eval('.reply .content', (node) => node.textContent);
    assert.match(text, /paths/, `the reply renames: ${text}`);
    const nCopied = await reply.$$eval('.reply .content .tok-long_copy', (nodes) => nodes.length);
    assert.ok(nCopied > 0, 'shaded long-copy tokens appear');
    const tokensPerRound = Number(await valueOf(reply, '.stat-tpr'));
    assert.ok(tokensPerRound > 1, `tokens per round shown and above 1: ${tokensPerRound}`);
    assert.match(await reply.$eval('.stat-tpr .value', (node) => node.textContent), /^\d+\.\d\d$/);
    const tokenSha = await valueOf(reply, '.stat-sha');
    assert.match(tokenSha, /^[0-9a-f]{64}$/);

    await reply.$eval('.rerun', (node) => node.click());
    const compare = await page.waitForSelector('.compare[data-identical], .compare[data-state=failed]');
    assert.equal(await compare.evaluate((node) => node.dataset.identical), 'true',
      await compare.evaluate((node) => node.textContent));
    assert.equal(await compare.$eval('.reply .content', (node) => node.textContent), text);
    assert.equal(await valueOf(compare, '.stat-sha'), tokenSha);
    assert.match(await compare.$eval('.verdict', (node) => node.textContent), /identical: yes/);
    assert.match(await compare.$eval('.speed-compare', (node) => node.textContent), /undrafted [\d.]+ tok\/s/);
    assert.equal(await compare.$$eval('.tok-long_copy, .tok-drafter', (nodes) => nodes.length), 0,
      'the undrafted reply has only the target\'s own tokens');

    fs.mkdirSync(artifactsDir, { recursive: true });
    await compare.evaluate((node) => { node.querySelector('details').open = true; });
    // The whole page in one viewport, so the sticky composer sits at its end.
    const height = await page.evaluate(() => document.documentElement.scrollHeight);
    await page.setViewport({ width: 1200, height: Math.min(height, 4000) });
    await page.screenshot({ path: path.join(artifactsDir, 'page.png') });
    assert.deepEqual(pageErrors, []);
  });

// The embedded code model copies what a rename request shows it, <think> block included: served
// with the Qwen3 template, that block comes back as reasoning_content.
test('reasoning_content is shown apart from the reply, folded, and equal on the draft-off rerun', { timeout: 180_000 },
  async () => {
    const dir = linkedModelDir([{ dir: embeddedModelDir }], 'qwen3.jinja');
    const thinkingServer = await startServer(['--drafter', 'none', '--served-model-name', 'code-model-qwen3-template'], { modelDir: dir });
    try {
      await page.setViewport({ width: 1200, height: 900 });
      await page.goto(`${thinkingServer.baseUrl}/`, { waitUntil: 'load' });
      await page.waitForFunction(() => document.getElementById('server-status').textContent === 'ready');
      assert.equal(await page.$eval('#thinking', (node) => node.checked), true);
      await page.$eval('#temperature', (node) => { node.value = '0'; });
      await page.$eval('#max-tokens', (node) => { node.value = '120'; });
      const file = '<think>\nnames become paths\n</think>\n\nimport os\n\n\ndef list_files(root):\n    names = []\n' +
        '    return names\n';
      await page.$eval('#prompt', (node, text) => { node.value = text; }, `Rename names to paths in this file:\n\n${file}`);
      await page.click('#send');
      const reply = await page.waitForSelector('.message.assistant[data-state]');
      assert.equal(await reply.evaluate((node) => node.dataset.state), 'done');
      const reasoning = await reply.$('.reply details.reasoning');
      assert.equal(await reasoning.evaluate((node) => node.hidden), false, 'the reasoning is shown');
      assert.equal(await reasoning.evaluate((node) => node.open), false, 'folded until opened');
      assert.equal(await reasoning.$eval('summary', (node) => node.textContent), 'reasoning');
      assert.equal(await reasoning.$eval('.reasoning-text', (node) => node.textContent), 'names become paths');
      const content = await reply.$eval('.reply .content', (node) => node.textContent);
      assert.equal(content.trimEnd(), 'import os\n\n\ndef list_files(root):\n    paths = []\n    return paths');
      await reasoning.$eval('summary', (node) => node.click());
      assert.equal(await reasoning.evaluate((node) => node.open), true, 'a click unfolds it');
      assert.ok(await reasoning.$eval('.reasoning-text', (node) => node.getBoundingClientRect().height > 0));

      await reply.$eval('.rerun', (node) => node.click());
      const compare = await page.waitForSelector('.compare[data-identical], .compare[data-state=failed]');
      assert.equal(await compare.evaluate((node) => node.dataset.identical), 'true',
        await compare.evaluate((node) => node.textContent));
      assert.equal(await compare.$eval('.reasoning-text', (node) => node.textContent), 'names become paths');

      fs.mkdirSync(artifactsDir, { recursive: true });
      await page.screenshot({ path: path.join(artifactsDir, 'page-reasoning.png'), fullPage: true });
      assert.deepEqual(pageErrors, []);
    } finally {
      await thinkingServer.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

test('a refused turn leaves the screen as it leaves the conversation; a key must be ASCII', { timeout: 120_000 },
  async () => {
    await page.goto(`${server.baseUrl}/`, { waitUntil: 'load' });
    await page.waitForFunction(() => document.getElementById('server-status').textContent === 'ready');
    await page.$eval('#temperature', (node) => { node.value = '5'; });  // above 2: the server answers 400
    await page.$eval('#prompt', (node) => { node.value = 'def add(a, b):'; });
    await page.click('#send');
    await page.waitForFunction(() => !document.getElementById('error').hidden);
    assert.match(await page.$eval('#error', (node) => node.textContent), /\(400\).*temperature/);
    assert.equal(await page.$$eval('.message', (nodes) => nodes.length), 0, 'no bubble of a turn never sent');
    assert.equal(await page.$eval('#prompt', (node) => node.value), 'def add(a, b):', 'the text is given back');
    await page.$eval('#temperature', (node) => { node.value = '0'; });
    await page.$eval('#max-tokens', (node) => { node.value = '8'; });
    await page.click('#send');
    const reply = await page.waitForSelector('.message.assistant[data-state]');
    assert.equal(await reply.evaluate((node) => node.dataset.state), 'done');
    assert.equal(await page.$$eval('.message.user', (nodes) => nodes.length), 1, 'the sent text shows once');

    await page.$eval('#key-panel', (node) => { node.hidden = false; });
    await page.$eval('#api-key', (node) => { node.value = 'clé🔑'; });
    await page.$eval('#key-form', (node) => node.requestSubmit());
    assert.match(await page.$eval('#key-reason', (node) => node.textContent), /printable ASCII/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('tensorfold-api-key')), null);
    assert.deepEqual(pageErrors, []);
  });

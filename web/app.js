// TensorFold chat page: streams chat replies over SSE, shades each reply by the proposer that put
// its tokens there ("return_provenance"), shows a thinking model's reasoning_content apart (folded),
// and reruns a reply with the draft off to show it is equal.
'use strict';

const $ = (id) => document.getElementById(id);
const sourceNames = {
  long_copy: 'copied by long copy', drafter: 'drafted by the block drafter',
  mtp: "drafted by the model's MTP head", ngram: 'n-gram',
  replay: 'replay', target: "the target's own token",
};
const exampleRename = 'Rename names to paths in this file:\n\nimport os\n\n\ndef list_files(root):\n' +
  '    names = []\n    for name in os.listdir(root):\n        names.append(os.path.join(root, name))\n' +
  '    return names\n';

const state = { model: null, conversation: [], controller: null, isBusy: false };

// ---- Talking to the server -------------------------------------------------------------------

function apiKey() { return sessionStorage.getItem('tensorfold-api-key') || ''; }

function apiHeaders() {
  const headers = { 'content-type': 'application/json' };
  if (apiKey()) headers.authorization = `Bearer ${apiKey()}`;
  return headers;
}

class ServerRefusal extends Error {
  constructor(status, body) {
    const error = body && body.error ? body.error : {};
    super(error.message || `The server answered ${status}.`);
    this.status = status;
    this.code = error.code;
    this.type = error.type;
  }
}

// Words for a refusal; a 401 also opens the key panel.
function explainRefusal(error) {
  if (!(error instanceof ServerRefusal)) return `Could not reach the server: ${error.message}`;
  if (error.status === 401) {
    askForKey(apiKey() ? 'The server refused this API key.' : 'This server needs an API key.');
    return `${apiKey() ? 'Bad API key' : 'API key needed'}: ${error.message}`;
  }
  if (error.status === 503) return `The server is busy or still loading (503): ${error.message} Try again shortly.`;
  if (error.status === 400) return `The server refused the request (400): ${error.message}`;
  return `The server answered ${error.status}: ${error.message}`;
}

async function readRefusal(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON */ }
  return new ServerRefusal(response.status, body);
}

async function getJson(path) {
  const response = await fetch(path, { headers: apiHeaders() });
  if (!response.ok) throw await readRefusal(response);
  return response.json();
}

// Yields each SSE event's data payload (the text after `data: `), [DONE] included.
async function* sseData(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, '');
      buffer = buffer.slice(end + 1);
      if (line === '') {
        if (data.length) yield data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
    }
  }
  if (data.length) yield data.join('\n');
}

// Streams one chat reply into `view`; resolves with {text, reasoning, tokenSha, timings, seed} or throws.
async function streamChat(body, view, signal) {
  const response = await fetch('/v1/chat/completions', {
    method: 'POST', headers: apiHeaders(), body: JSON.stringify(body), signal,
  });
  if (!response.ok) throw await readRefusal(response);
  const reply = { text: '', reasoning: '', tokenSha: null, timings: null, seed: null, finishReason: null };
  const startedAt = performance.now();
  for await (const data of sseData(response)) {
    if (data === '[DONE]') break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new ServerRefusal(500, chunk);
    const choice = chunk.choices && chunk.choices[0];
    if (choice) {
      const text = (choice.delta && choice.delta.content) || '';
      const reasoning = (choice.delta && choice.delta.reasoning_content) || '';
      reply.text += text;
      reply.reasoning += reasoning;
      view.append(text, reasoning, choice.provenance || []);
      if (choice.finish_reason) reply.finishReason = choice.finish_reason;
    }
    if (chunk.timings) reply.timings = chunk.timings;
    if (chunk.token_sha) reply.tokenSha = chunk.token_sha;
    if (chunk.seed !== undefined) reply.seed = chunk.seed;
    view.showStats(reply.timings, performance.now() - startedAt);
  }
  return reply;
}

// ---- The request the settings describe ---------------------------------------------------------

function numberField(id) {
  const raw = $(id).value.trim();
  return raw === '' ? undefined : Number(raw);
}

function requestBody(messages) {
  const body = {
    model: state.model || undefined, messages, stream: true,
    stream_options: { include_usage: true }, return_provenance: true,
    temperature: numberField('temperature'), top_p: numberField('top-p'),
    seed: numberField('seed'), max_tokens: numberField('max-tokens'),
  };
  if (!$('thinking').checked) body.chat_template_kwargs = { enable_thinking: false };
  if ($('draft-off').checked) body.draft = false;
  for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
  return body;
}

function conversationMessages() {
  const system = $('system-prompt').value.trim();
  const turns = state.conversation.map(({ role, content }) => ({ role, content }));
  return system ? [{ role: 'system', content: system }, ...turns] : turns;
}

// ---- Rendering ---------------------------------------------------------------------------------

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function stat(label, className) {
  const item = element('span', className);
  item.append(`${label} `, element('b', 'value', '–'));
  return item;
}

function tokensPerSecond(timings) {
  return timings && timings.predicted_ms > 0 ? timings.predicted_n / timings.predicted_ms * 1000 : null;
}

// One reply's text, shaded span by span, its reasoning (folded away) and its live figures.
class ReplyView {
  constructor(parent) {
    this.root = element('div', 'reply');
    this.reasoning = element('details', 'reasoning');
    this.reasoningTitle = element('summary', '', 'thinking…');
    this.reasoningText = element('div', 'reasoning-text');
    this.reasoning.append(this.reasoningTitle, this.reasoningText);
    this.reasoning.hidden = true;
    this.content = element('div', 'content');
    this.stats = element('div', 'stats');
    this.tokensPerRound = stat('tokens/round', 'stat-tpr');
    this.rounds = stat('rounds', 'stat-rounds');
    this.speed = stat('tok/s', 'stat-speed');
    this.sha = stat('token_sha', 'stat-sha sha');
    this.stats.append(this.tokensPerRound, this.rounds, this.speed, this.sha);
    this.root.append(this.reasoning, this.content, this.stats);
    parent.append(this.root);
    this.n_tokens = 0;
    this.roundsSeen = new Set();
  }

  append(text, reasoning, provenance) {
    this.n_tokens += provenance.length;
    for (const entry of provenance) this.roundsSeen.add(entry.round);
    const last = provenance[provenance.length - 1];
    const source = last ? last.source : 'unknown';
    const shaded = (piece) => {
      const span = element('span', `tok-${source}`, piece);
      if (last) span.title = `${sourceNames[source] || source}, round ${last.round}`;
      return span;
    };
    if (reasoning) {
      this.reasoning.hidden = false;
      this.reasoningText.append(shaded(reasoning));
    }
    if (text) {
      this.content.append(shaded(text));
      this.reasoningTitle.textContent = 'reasoning';
    }
    if (text || reasoning) scrollToEnd();
  }

  // Live figures come from the provenance seen so far; the final chunk's timings replace them.
  showStats(timings, elapsedMs) {
    const set = (item, value, shown) => {
      item.dataset.value = value === null ? '' : String(value);
      item.querySelector('.value').textContent = value === null ? '–' : shown;
    };
    const rounds = timings ? timings.rounds : this.roundsSeen.size;
    const perRound = timings ? timings.tokens_per_round : (rounds ? this.n_tokens / rounds : null);
    const speed = timings ? tokensPerSecond(timings) : (this.n_tokens && elapsedMs > 0 ? this.n_tokens / elapsedMs * 1000 : null);
    set(this.tokensPerRound, perRound, perRound === null ? '' : perRound.toFixed(2));
    set(this.rounds, rounds || null, String(rounds));
    set(this.speed, speed, speed === null ? '' : speed.toFixed(1));
  }

  // A reply cut short: whatever it reached is no longer being thought.
  stop() {
    if (this.reasoningTitle.textContent === 'thinking…') this.reasoningTitle.textContent = 'reasoning (stopped)';
  }

  finish(reply) {
    this.showStats(reply.timings, 0);
    this.reasoningTitle.textContent = 'reasoning';
    this.sha.dataset.value = reply.tokenSha || '';
    this.sha.querySelector('.value').textContent = reply.tokenSha ? reply.tokenSha.slice(0, 16) + '…' : '–';
    this.sha.title = reply.tokenSha || '';
  }
}

function scrollToEnd() { window.scrollTo(0, document.body.scrollHeight); }

function addMessage(role, text) {
  $('empty-hint').hidden = true;
  const node = element('article', `message ${role}`);
  node.append(element('div', 'role', role === 'user' ? 'you' : state.model || 'assistant'));
  if (text !== undefined) node.append(element('div', 'content', text));
  $('messages').append(node);
  scrollToEnd();
  return node;
}

function showError(message) {
  $('error').textContent = message;
  $('error').hidden = !message;
}

function setBusy(isBusy) {
  state.isBusy = isBusy;
  $('send').disabled = isBusy;
  $('stop').disabled = !isBusy;
  for (const button of document.querySelectorAll('.rerun')) button.disabled = isBusy;
}

// ---- Sending, stopping, rerunning --------------------------------------------------------------

async function runReply(body, view, node) {
  state.controller = new AbortController();
  setBusy(true);
  node.classList.add('streaming');
  try {
    const reply = await streamChat(body, view, state.controller.signal);
    view.finish(reply);
    node.dataset.state = 'done';
    return reply;
  } catch (error) {
    const isStopped = error.name === 'AbortError';
    node.dataset.state = isStopped ? 'stopped' : 'failed';
    view.stop();
    node.append(element('p', isStopped ? 'note' : 'note bad', isStopped ? 'Stopped.' : explainRefusal(error)));
    // Not an answer from the server at all: it may be gone; show that, and wait for it again.
    if (!isStopped && !(error instanceof ServerRefusal)) {
      setStatus('cannot reach the server; retrying…', true);
      connect();
    }
    return null;
  } finally {
    node.classList.remove('streaming');
    state.controller = null;
    setBusy(false);
  }
}

async function send() {
  const text = $('prompt').value;
  if (!text.trim() || state.isBusy) return;
  showError('');
  $('prompt').value = '';
  state.conversation.push({ role: 'user', content: text });
  const userNode = addMessage('user', text);
  const body = requestBody(conversationMessages());
  const node = addMessage('assistant');
  const view = new ReplyView(node);
  const reply = await runReply(body, view, node);
  if (!reply) {
    const answer = view.content.textContent;
    if (node.dataset.state === 'stopped' && answer) {
      // A stopped reply stays in the conversation as far as its answer got.
      state.conversation.push({ role: 'assistant', content: answer });
    } else if (node.dataset.state === 'stopped') {
      // Stopped before any answer (while reasoning): the turn leaves the conversation, and says so.
      state.conversation.pop();
      userNode.classList.add('left-out');
      node.classList.add('left-out');
      node.append(element('p', 'note', 'This turn is left out of the conversation.'));
    } else {
      // A refused or failed turn leaves the screen as it leaves the conversation: the text goes
      // back to the prompt box and the reason above it.
      state.conversation.pop();
      const reason = node.querySelector('.note.bad');
      showError(reason ? reason.textContent : 'The reply failed.');
      userNode.remove();
      node.remove();
      $('prompt').value = text;
      $('empty-hint').hidden = state.conversation.length > 0;
    }
    return;
  }
  state.conversation.push({ role: 'assistant', content: reply.text });
  addReplyActions(node, body, reply);
}

function addReplyActions(node, body, reply) {
  const actions = element('div', 'actions');
  const copy = element('button', 'secondary small copy', 'Copy reply');
  copy.type = 'button';
  copy.addEventListener('click', async () => {
    await copyText(reply.text);
    copy.textContent = 'Copied';
    setTimeout(() => { copy.textContent = 'Copy reply'; }, 1500);
  });
  actions.append(copy);
  if (body.draft !== false) {
    const rerun = element('button', 'secondary small rerun', 'Run again with draft off');
    rerun.type = 'button';
    rerun.addEventListener('click', () => rerunUndrafted(node, body, reply, rerun));
    actions.append(rerun);
  }
  node.append(actions);
}

async function copyText(text) {
  try { await navigator.clipboard.writeText(text); return; } catch { /* fall back below */ }
  const area = element('textarea');
  area.value = text;
  document.body.append(area);
  area.select();
  document.execCommand('copy');
  area.remove();
}

// Same conversation, same parameters and the seed the first reply used, without speculation.
async function rerunUndrafted(node, body, drafted, button) {
  if (state.isBusy) return;
  node.querySelector('.compare')?.remove();
  const compare = element('div', 'compare');
  compare.append(element('div', 'role', 'the same request with "draft": false'));
  node.append(compare);
  const seed = body.seed !== undefined ? body.seed : drafted.seed;
  const undraftedBody = { ...body, draft: false, ...(seed !== null && seed !== undefined ? { seed } : {}) };
  const view = new ReplyView(compare);
  const undrafted = await runReply(undraftedBody, view, compare);
  if (!undrafted) return;
  const isSameText = undrafted.text === drafted.text && undrafted.reasoning === drafted.reasoning;
  const isIdentical = isSameText && undrafted.tokenSha === drafted.tokenSha;
  compare.dataset.identical = String(isIdentical);
  const verdict = element('p', `verdict ${isIdentical ? 'same' : 'differ'}`,
    isIdentical ? 'identical: yes (same text, same token_sha)'
                : `identical: no (${isSameText ? 'same text' : 'text differs'}, ` +
                  `${undrafted.tokenSha === drafted.tokenSha ? 'same token_sha' : 'token_sha differs'})`);
  const fast = tokensPerSecond(drafted.timings);
  const slow = tokensPerSecond(undrafted.timings);
  let speedText = 'speed: unknown';
  if (fast && slow) {
    speedText = `drafted ${fast.toFixed(1)} tok/s, undrafted ${slow.toFixed(1)} tok/s: ` +
      (fast >= slow ? `the undrafted reply was ${(fast / slow).toFixed(1)}× slower`
                    : `the undrafted reply was ${(slow / fast).toFixed(1)}× faster`);
  }
  compare.insertBefore(verdict, view.root);
  compare.insertBefore(element('p', 'speed-compare', speedText), view.root);
  const details = element('details');
  details.append(element('summary', '', 'undrafted reply'));
  view.root.replaceWith(details);
  details.append(view.root);
  button.textContent = 'Run again with draft off';
}

// ---- Start-up: health, model, key ------------------------------------------------------------

function setStatus(text, isBad = false) {
  $('server-status').textContent = text;
  $('server-status').classList.toggle('bad', isBad);
}

function askForKey(reason) {
  $('key-reason').textContent = reason;
  $('key-panel').hidden = false;
  $('api-key').focus();
}

// Polls /health while the model loads, then asks /v1/models for the model's name; one poll at a
// time (a failed reply and a new key may both ask for one).
let connecting = null;
function connect() {
  connecting ??= pollServer().finally(() => { connecting = null; });
  return connecting;
}

async function pollServer() {
  for (;;) {
    try {
      const response = await fetch('/health');
      const body = await response.json().catch(() => ({}));
      if (response.ok) break;
      if (body.status === 'loading') {
        const percent = typeof body.progress === 'number' ? ` ${Math.round(body.progress * 100)}%` : '';
        setStatus(`loading the model…${percent}`);
      }
      else { setStatus(`the server cannot serve: ${body.message || response.status}`, true); return; }
    } catch (error) {
      setStatus('cannot reach the server; retrying…', true);
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  try {
    const models = await getJson('/v1/models');
    state.model = models.data && models.data[0] ? models.data[0].id : null;
    $('model-name').textContent = state.model || 'unknown model';
    setStatus('ready');
    $('key-panel').hidden = true;
  } catch (error) {
    setStatus(error.status === 401 ? 'API key needed' : 'not connected', true);
    showError(explainRefusal(error));
  }
}

$('composer').addEventListener('submit', (event) => { event.preventDefault(); send(); });
$('prompt').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); send(); }
});
$('stop').addEventListener('click', () => state.controller?.abort());
$('example').addEventListener('click', () => { $('prompt').value = exampleRename; $('prompt').focus(); });
$('clear').addEventListener('click', () => {
  if (state.isBusy) return;
  state.conversation = [];
  for (const node of document.querySelectorAll('.message')) node.remove();
  $('empty-hint').hidden = false;
  showError('');
});
$('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const key = $('api-key').value.trim();
  // A key travels in an HTTP header: printable ASCII only (fetch refuses anything else).
  if (!/^[\x21-\x7e]*$/.test(key)) {
    $('key-reason').textContent = 'An API key is printable ASCII without spaces; this one has other characters.';
    return;
  }
  sessionStorage.setItem('tensorfold-api-key', key);
  $('api-key').value = '';
  showError('');
  connect();
});
connect();

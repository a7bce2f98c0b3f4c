// The chat page: one streamed /v1/chat/completions request per turn, parsed from SSE as it
// arrives. Model output is untrusted: it only ever reaches the page as textContent.

import { call, json, sse } from './api.js';
import { $, h, fill, say } from './dom.js';

let history = [];
let running = null; // the AbortController of the reply being streamed

function numberField(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function parseJsonField(id, what, kind) {
  const text = $(id).value.trim();
  if (!text) return undefined;
  let value;
  try { value = JSON.parse(text); } catch (err) { throw new Error(`${what}: ${err.message}`); }
  if (kind === 'array' ? !Array.isArray(value) : (typeof value !== 'object' || Array.isArray(value))) {
    throw new Error(`${what} must be a JSON ${kind}`);
  }
  return value;
}

/** The request body for `messages` with the page's settings (throws on a bad JSON field). */
export function requestBody(messages, stream) {
  const body = { model: $('#chat-model').value, messages };
  const system = $('#chat-system').value.trim();
  if (system) body.messages = [{ role: 'system', content: system }, ...messages];
  const opts = {
    temperature: numberField('#chat-temp'), top_p: numberField('#chat-top-p'),
    max_tokens: numberField('#chat-max'), seed: numberField('#chat-seed'),
  };
  for (const [k, v] of Object.entries(opts)) if (v !== undefined && !Number.isNaN(v)) body[k] = v;
  if ($('#chat-think').value) body.reasoning_effort = $('#chat-think').value;
  const schema = parseJsonField('#chat-schema', 'The schema', 'object');
  if (schema) body.response_format = { type: 'json_schema', json_schema: { name: 'answer', schema } };
  const tools = parseJsonField('#chat-tools', 'Tools', 'array');
  if (tools) body.tools = tools;
  Object.assign(body, parseJsonField('#chat-extra', 'Extra fields', 'object') || {});
  if (stream) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  return body;
}

function snippet(kind) {
  const draft = $('#chat-input').value.trim() || 'Say hello.';
  const body = requestBody([...history, { role: 'user', content: draft }], false);
  const base = location.origin;
  const text = kind === 'curl'
    ? `curl -s ${base}/v1/chat/completions \\\n  -H 'content-type: application/json' \\\n` +
      `  -H "authorization: Bearer $LLAMAY_API_KEY" \\\n` +
      `  -d '${JSON.stringify(body).replaceAll("'", "'\\''")}'`
    : `import json, os\nfrom openai import OpenAI\n\n` +
      `client = OpenAI(base_url="${base}/v1", api_key=os.environ.get("LLAMAY_API_KEY", "none"))\n` +
      `body = json.loads(${JSON.stringify(JSON.stringify(body))})\n` +
      // Every field but these two goes in extra_body: the client passes it through as it is.
      `model, messages = body.pop("model"), body.pop("messages")\n` +
      `reply = client.chat.completions.create(model=model, messages=messages, extra_body=body)\n` +
      `print(reply.choices[0].message)\n`;
  const pre = $('#chat-snippet');
  pre.hidden = false;
  pre.textContent = text;
  if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
  say($('#chat-note'), `Copied as ${kind === 'curl' ? 'curl' : 'Python'} (shown under the settings).`, 'ok');
}

function bubble(role, text) {
  const el = h(`div.msg.${role}`, {}, h('div.role', { text: role }), h('div.content', { text }));
  $('#chat-log').append(el);
  return el;
}

function toolCard(call) {
  const args = h('pre.args');
  const name = h('strong');
  const card = h('div.tool-card', {}, h('span.badge', { text: 'tool call' }), name, args);
  return { card, name, args };
}

const BLANK = ' \t\n\r';

// `text` indented two spaces a level, or null if it is not JSON. The text itself is
// re-spaced, not parsed and printed again: JSON.parse would round a long integer or
// fraction to the nearest double, and the reply must show what the model wrote.
function pretty(text) {
  try { JSON.parse(text); } catch { return null; }
  const line = (depth) => '\n' + '  '.repeat(depth);
  let out = '';
  let depth = 0;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      out += c;
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
    } else if (BLANK.includes(c)) {
      continue;
    } else if (c === '{' || c === '[') {
      let j = i + 1;
      while (j < text.length && BLANK.includes(text[j])) j++;
      if (text[j] === (c === '{' ? '}' : ']')) {
        out += c + text[j];
        i = j;
      } else {
        depth++;
        out += c + line(depth);
      }
    } else if (c === '}' || c === ']') {
      depth--;
      out += line(depth) + c;
    } else if (c === ',') {
      out += ',' + line(depth);
    } else if (c === ':') {
      out += ': ';
    } else {
      if (c === '"') inString = true;
      out += c;
    }
  }
  return out;
}

async function send(text) {
  let body;
  try {
    body = requestBody([...history, { role: 'user', content: text }], true);
  } catch (err) {
    say($('#chat-note'), err.message, 'error');
    return;
  }
  history.push({ role: 'user', content: text });
  bubble('user', text);
  const reply = bubble('assistant', '');
  const content = reply.querySelector('.content');
  const thinkText = h('div.think-text');
  const thinking = h('details.thinking', { hidden: true }, h('summary', { text: 'Thinking' }), thinkText);
  content.before(thinking);
  const stats = h('div.stats');
  reply.append(stats);
  reply.classList.add('streaming');

  const controller = new AbortController();
  running = controller;
  $('#chat-stop').disabled = false;
  $('#chat-send').disabled = true;
  say($('#chat-note'), '');
  const t0 = performance.now();
  let first = null;
  let answer = '';
  let usage = null;
  let finish = null;
  const calls = [];
  try {
    const res = await call('/v1/chat/completions', { method: 'POST', body, signal: controller.signal });
    for await (const chunk of sse(res)) {
      if (chunk.error) throw new Error(chunk.error.message || String(chunk.error));
      if (chunk.usage) usage = chunk.usage;
      const choice = (chunk.choices || [])[0];
      if (!choice) continue;
      const d = choice.delta || {};
      if ((d.content || d.reasoning_content || d.tool_calls) && first === null) first = performance.now();
      if (d.reasoning_content) {
        if (thinking.hidden) { thinking.hidden = false; thinking.open = true; } // open while it streams
        thinkText.textContent += d.reasoning_content;
      }
      if (d.content) {
        if (!answer) thinking.open = false; // folded once the answer starts

        answer += d.content;
        content.textContent = answer;
      }
      for (const tc of d.tool_calls || []) {
        const i = tc.index ?? calls.length;
        if (!calls[i]) {
          calls[i] = { id: tc.id, type: 'function', function: { name: '', arguments: '' }, view: toolCard() };
          reply.insertBefore(calls[i].view.card, stats);
        }
        const fn = tc.function || {};
        if (fn.name) calls[i].function.name += fn.name;
        if (fn.arguments) calls[i].function.arguments += fn.arguments;
        calls[i].view.name.textContent = calls[i].function.name;
        calls[i].view.args.textContent = pretty(calls[i].function.arguments) || calls[i].function.arguments;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      $('#chat-log').scrollTop = $('#chat-log').scrollHeight;
    }
    if (body.response_format) {
      const parsed = pretty(answer);
      content.classList.add('json');
      if (parsed !== null) content.textContent = parsed;
      else reply.append(h('div.note.error', { text: 'The answer is not complete JSON.' }));
    }
    const msg = { role: 'assistant', content: answer };
    if (calls.length) msg.tool_calls = calls.map(({ id, type, function: fn }) => ({ id, type, function: fn }));
    history.push(msg);
  } catch (err) {
    if (err.name === 'AbortError') {
      reply.append(h('div.note', { text: 'Stopped.' }));
      history.push({ role: 'assistant', content: answer });
    } else {
      reply.append(h('div.note.error', { text: err.message }));
      history.pop();
    }
  } finally {
    const t1 = performance.now();
    const parts = [];
    if (first !== null) parts.push(`TTFT ${Math.round(first - t0)} ms`);
    if (usage) {
      const gen = usage.completion_tokens || 0;
      const secs = (t1 - (first ?? t0)) / 1000;
      if (gen && secs > 0) parts.push(`${(gen / secs).toFixed(1)} tokens/s`);
      parts.push(`${gen} tokens`);
      const cached = (usage.prompt_tokens_details || {}).cached_tokens || 0;
      parts.push(`${cached} cached of ${usage.prompt_tokens} prompt tokens`);
    }
    if (finish) parts.push(`finish: ${finish}`);
    stats.textContent = parts.join(' · ');
    reply.classList.remove('streaming');
    running = null;
    $('#chat-stop').disabled = true;
    $('#chat-send').disabled = false;
  }
}

async function loadModels() {
  const select = $('#chat-model');
  try {
    const list = await json('/v1/models');
    const ids = (list.data || []).map((m) => m.id);
    fill(select, h('option', { value: '', text: 'server default' }), ids.map((id) => h('option', { value: id, text: id })));
  } catch (err) {
    say($('#chat-note'), `Models: ${err.message}`, 'error');
  }
}

export function init() {
  if (window.matchMedia('(max-width: 700px)').matches) $('#chat-settings').open = false;
  loadModels();
  $('#chat-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = $('#chat-input').value.trim();
    if (!text || running) return;
    $('#chat-input').value = '';
    send(text);
  });
  $('#chat-input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      $('#chat-form').requestSubmit();
    }
  });
  $('#chat-stop').addEventListener('click', () => running && running.abort());
  $('#chat-clear').addEventListener('click', () => { history = []; fill($('#chat-log')); say($('#chat-note'), ''); });
  $('#chat-curl').addEventListener('click', () => { try { snippet('curl'); } catch (e) { say($('#chat-note'), e.message, 'error'); } });
  $('#chat-python').addEventListener('click', () => { try { snippet('python'); } catch (e) { say($('#chat-note'), e.message, 'error'); } });
}

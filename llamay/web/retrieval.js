// Retrieval (/v1/retrieve) and redaction (/v1/redact). Passages and findings are shown as
// text; highlights are <mark> elements around text nodes, never markup built from strings.

import { json } from './api.js';
import { $, h, fill, say } from './dom.js';

async function search(event) {
  event.preventDefault();
  const note = $('#rag-note');
  say(note, 'Searching…');
  try {
    const body = { query: $('#rag-query').value, top_k: Number($('#rag-k').value) || 5 };
    const r = await json('/v1/retrieve', { method: 'POST', body });
    const items = (r.data || []).map((p) => h('li.passage', {},
      h('div.meta', {},
        h('span.mono', { text: p.source }),
        h('span.mono.muted', { text: `bytes ${p.start}–${p.end}` }),
        h('span.score', { text: `score ${Number(p.score).toFixed(4)}` })),
      h('div.wrap', { text: p.text })));
    fill($('#rag-results'), items);
    say(note, `${items.length} passages (${r.method || 'retrieval'}).`, items.length ? 'ok' : '');
  } catch (err) {
    fill($('#rag-results'));
    say(note, err.message, 'error');
  }
}

/** `text` with each finding wrapped in a <mark>; offsets are code points, as the server counts. */
export function marked(text, findings) {
  const chars = Array.from(text);
  const out = [];
  let pos = 0;
  for (const f of [...findings].sort((a, b) => a.start - b.start)) {
    if (f.start < pos) continue; // overlapping findings: the first one shown
    out.push(chars.slice(pos, f.start).join(''));
    out.push(h('mark', { title: `${f.type} (${f.source})`, text: chars.slice(f.start, f.end).join('') }));
    pos = f.end;
  }
  out.push(chars.slice(pos).join(''));
  return out;
}

async function redact(event) {
  event.preventDefault();
  const note = $('#redact-note');
  const text = $('#redact-input').value;
  try {
    const r = await json('/v1/redact', { method: 'POST', body: { text } });
    fill($('#redact-marked'), marked(text, r.findings || []));
    $('#redact-text').textContent = r.text;
    $('#redact-out').hidden = false;
    const types = [...new Set((r.findings || []).map((f) => f.type))].join(', ');
    say(note, `${(r.findings || []).length} findings${types ? `: ${types}` : ''}.`, 'ok');
  } catch (err) {
    say(note, err.message, 'error');
  }
}

export function init() {
  $('#rag-form').addEventListener('submit', search);
  $('#redact-form').addEventListener('submit', redact);
}

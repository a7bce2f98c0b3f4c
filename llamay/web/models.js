// The models page: installed (/api/tags) and loaded (/api/ps) models; pull with a live
// progress bar from /api/pull's NDJSON; load, unload, and details from /api/show.

import { call, json, ndjson } from './api.js';
import { $, h, fill, say, bytes } from './dom.js';

let role = 'user';

async function refresh() {
  const note = $('#models-note');
  try {
    const [tags, ps] = await Promise.all([json('/api/tags'), json('/api/ps')]);
    const loaded = new Set((ps.models || []).map((m) => m.name));
    const rows = (tags.models || []).map((m) => {
      const d = m.details || {};
      const isLoaded = loaded.has(m.name) || loaded.has(m.name.replace(/:latest$/, ''));
      const actions = h('div.row.actions',
        {},
        h('button.quiet', { type: 'button', text: 'Details', onclick: () => details(m.name) }),
        isLoaded
          ? (role === 'admin' ? h('button.quiet', { type: 'button', text: 'Unload', onclick: () => unload(m.name) }) : null)
          : h('button.quiet', { type: 'button', text: 'Load', onclick: () => load(m.name) }));
      return h('tr', {},
        h('td.mono', { text: m.name }), h('td', { text: bytes(m.size) }),
        h('td', { text: d.family || '' }), h('td', { text: d.quantization_level || '' }),
        h('td', { text: isLoaded ? 'yes' : '' }), h('td', {}, actions));
    });
    fill($('#models-table tbody'), rows.length ? rows : h('tr', {}, h('td.muted', { colspan: 6, text: 'No models installed.' })));
  } catch (err) {
    say(note, err.message, 'error');
  }
}

function field(label, value) {
  return [h('dt', { text: label }), h('dd', {}, value)];
}

async function details(name) {
  const box = $('#model-details');
  box.hidden = false;
  fill(box, h('p.muted', { text: `Loading details of ${name}…` }));
  try {
    const info = await json('/api/show', { method: 'POST', body: { model: name } });
    const d = info.details || {};
    fill(box,
      h('h2', { text: name }),
      h('dl.details', {},
        field('Family', d.family || ''), field('Parameters', d.parameter_size || ''),
        field('Quantization', d.quantization_level || ''), field('Format', d.format || ''),
        field('Capabilities', (info.capabilities || []).join(', ')),
        field('Sampling defaults', h('pre.wrap', { text: info.parameters || '(none)' })),
        field('Template', h('pre.wrap.template', { text: info.template || '' }))),
      h('button.quiet', { type: 'button', text: 'Close', onclick: () => { box.hidden = true; } }));
  } catch (err) {
    fill(box, h('p.note.error', { text: err.message }));
  }
}

async function load(name) {
  const note = $('#models-note');
  say(note, `Loading ${name}…`);
  try {
    const res = await call('/api/load', { method: 'POST', body: { model: name } });
    // A streamed load reports `completed` of `total`; a plain answer is one JSON object.
    for await (const ev of ndjson(res)) {
      if (ev.error) throw new Error(ev.error);
      if (ev.total) {
        $('#load-progress').hidden = false;
        $('#load-bar').value = Math.min(100, (100 * (ev.completed || 0)) / ev.total);
        $('#load-text').textContent = `${name}: ${Math.round($('#load-bar').value)}%`;
      }
    }
    say(note, `${name} is loaded.`, 'ok');
  } catch (err) {
    say(note, `Load failed: ${err.message}`, 'error');
  } finally {
    $('#load-progress').hidden = true;
  }
  refresh();
}

async function unload(name) {
  try {
    await json('/api/unload', { method: 'POST', body: { model: name } });
    say($('#models-note'), `${name} unloaded.`, 'ok');
  } catch (err) {
    say($('#models-note'), err.message, 'error');
  }
  refresh();
}

function eta(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return '';
  return seconds < 90 ? `${Math.ceil(seconds)} s` : `${Math.ceil(seconds / 60)} min`;
}

async function pull(event) {
  event.preventDefault();
  const source = $('#pull-source').value.trim();
  const name = $('#pull-name').value.trim();
  const bar = $('#pull-bar');
  const text = $('#pull-text');
  $('#pull-progress').hidden = false;
  $('#pull-go').disabled = true;
  bar.value = 0;
  const t0 = performance.now();
  try {
    const body = name ? { model: source, name } : { model: source };
    const res = await call('/api/pull', { method: 'POST', body });
    for await (const ev of ndjson(res)) {
      if (ev.error) throw new Error(ev.error);
      if (ev.total) {
        const done = ev.completed || 0;
        const secs = (performance.now() - t0) / 1000;
        const speed = ev.speed ?? (secs > 0 ? done / secs : 0);
        bar.value = Math.min(100, (100 * done) / ev.total);
        text.textContent = `${ev.status} · ${bytes(done)} of ${bytes(ev.total)} · ${bytes(speed)}/s` +
          (speed > 0 && done < ev.total ? ` · ${eta((ev.total - done) / speed)} left` : '');
      } else {
        text.textContent = ev.status || '';
      }
      if (ev.status === 'success') {
        bar.value = 100;
        text.textContent = 'success · 100%';
      }
    }
    say($('#models-note'), `Pulled ${name || source}.`, 'ok');
  } catch (err) {
    say($('#models-note'), `Pull failed: ${err.message}`, 'error');
  } finally {
    $('#pull-go').disabled = false;
    refresh();
  }
}

export function init(me) {
  role = me.role;
  $('#pull-form').addEventListener('submit', pull);
}

export function enter() {
  refresh();
}

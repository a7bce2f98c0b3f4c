// The contexts page: list, create from a system prompt, fork, download a snapshot,
// restore one by upload, delete.

import { call, json } from './api.js';
import { $, h, fill, say, download } from './dom.js';

const note = () => $('#ctx-note');

async function act(label, fn) {
  try {
    const what = await fn();
    say(note(), what || `${label}: done.`, 'ok');
  } catch (err) {
    say(note(), `${label}: ${err.message}`, 'error');
  }
  refresh();
}

async function refresh() {
  try {
    const list = await json('/v1/contexts');
    const rows = (list.data || []).map((c) => h('tr', { 'data-id': c.id },
      h('td.mono', { text: c.id }), h('td', { text: c.model }), h('td', { text: c.tokens }),
      h('td', { text: c.resident ? 'in KV' : 'on disk' }),
      h('td', {}, h('div.row.actions', {},
        h('button.quiet', { type: 'button', text: 'Fork', onclick: () => act('Fork', async () => {
          const r = await json(`/v1/contexts/${encodeURIComponent(c.id)}/fork?n=1`, { method: 'POST' });
          return `Forked into ${r.data[0].id}.`;
        }) }),
        h('button.quiet', { type: 'button', text: 'Download', onclick: () => act('Download', async () => {
          const res = await call(`/v1/contexts/${encodeURIComponent(c.id)}/snapshot`);
          download(await res.blob(), `${c.id}.llamayctx`);
          return `Downloaded ${c.id}.llamayctx.`;
        }) }),
        h('button.quiet.danger', { type: 'button', text: 'Delete', onclick: () => act('Delete', async () => {
          await json(`/v1/contexts/${encodeURIComponent(c.id)}`, { method: 'DELETE' });
          return `Deleted ${c.id}.`;
        }) })))));
    fill($('#ctx-table tbody'), rows.length ? rows : h('tr', {}, h('td.muted', { colspan: 5, text: 'No contexts yet.' })));
  } catch (err) {
    say(note(), err.message, 'error');
  }
}

async function models() {
  try {
    const list = await json('/v1/models');
    fill($('#ctx-model'), h('option', { value: '', text: 'server default' }),
      (list.data || []).map((m) => h('option', { value: m.id, text: m.id })));
  } catch { /* the list stays with the default only */ }
}

export function init() {
  models();
  $('#ctx-form').addEventListener('submit', (event) => {
    event.preventDefault();
    act('Create', async () => {
      const body = { model: $('#ctx-model').value, messages: [{ role: 'system', content: $('#ctx-system').value }] };
      const r = await json('/v1/contexts', { method: 'POST', body });
      return `Created ${r.id} (${r.tokens} tokens).`;
    });
  });
  $('#ctx-file').addEventListener('change', () => {
    const file = $('#ctx-file').files[0];
    if (!file) return;
    act('Restore', async () => {
      const r = await json('/v1/contexts/restore', { method: 'POST', raw: file });
      $('#ctx-file').value = '';
      return `Restored ${r.id}.`;
    });
  });
}

export function enter() {
  refresh();
}

// The console's shell: asks for a key when the server wants one, learns the key's role
// from /v1/whoami, hides what that role may not do, and switches pages by the URL hash.

import { auth, json, ApiError } from './api.js';
import { $, say } from './dom.js';
import * as chat from './chat.js';
import * as models from './models.js';
import * as contexts from './contexts.js';
import * as retrieval from './retrieval.js';
import * as status from './status.js';

const PAGES = { chat, models, contexts, retrieval, status };
const started = new Set();
let me = null;

function show(id) {
  for (const page of document.querySelectorAll('.page')) page.hidden = page.id !== id;
}

async function route() {
  if (!me) return;
  const name = (location.hash || '#chat').slice(1);
  const page = PAGES[name] ? name : 'chat';
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === `#${page}`);
  }
  show(`page-${page}`);
  for (const [other, mod] of Object.entries(PAGES)) if (other !== page && mod.leave) mod.leave();
  if (!started.has(page)) {
    started.add(page);
    PAGES[page].init(me);
  }
  if (PAGES[page].enter) PAGES[page].enter();
}

let lastRole = null;

function applyRole(who) {
  if (lastRole && lastRole !== who.role) {
    // Pages set themselves up for one role: another key's role starts the console afresh.
    location.reload();
    return;
  }
  lastRole = who.role;
  me = who;
  document.body.classList.toggle('admin', who.role === 'admin');
  for (const el of document.querySelectorAll('[data-admin]')) el.hidden = who.role !== 'admin';
  $('#who').textContent = who.keys_required ? `${who.principal} · ${who.role}` : 'local · admin';
  $('#signout').hidden = !who.keys_required;
  $('#nav').hidden = false;
}

async function signIn() {
  try {
    applyRole(await json('/v1/whoami'));
    if (me) route();
  } catch (err) {
    if (!(err instanceof ApiError) || (err.status !== 401 && err.status !== 403)) throw err;
    const hadKey = Boolean(auth.key);
    auth.key = '';
    show('login');
    $('#nav').hidden = true;
    say($('#login-note'), hadKey ? `Key refused: ${err.message}` : '', hadKey ? 'error' : '');
    $('#login-key').focus();
  }
}

$('#login-form').addEventListener('submit', (event) => {
  event.preventDefault();
  auth.key = $('#login-key').value.trim();
  $('#login-key').value = '';
  signIn();
});

$('#signout').addEventListener('click', () => {
  auth.key = '';
  location.reload();
});

window.addEventListener('hashchange', route);
window.addEventListener('llamay:unauthorized', () => {
  if (!me) return; // several calls may fail at once: ask once
  me = null;
  signIn();
});
signIn().catch((err) => say($('#login-note'), String(err), 'error'));

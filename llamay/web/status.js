// The status page: samples /v1/stats (admins) or /health every 2 s and plots the last
// five minutes on <canvas> elements.

import { json } from './api.js';
import { $ } from './dom.js';

const KEEP = 150; // samples: 5 minutes at one per 2 s
const series = { tps: [], queue: [], kv: [], hit: [], draft: [] };
let timer = null;
let admin = false;
let last = null;

function push(name, value) {
  const s = series[name];
  s.push(value);
  if (s.length > KEEP) s.shift();
}

/** A line plot of `values` scaled to the canvas; `max` fixes the top (else the data's). */
function plot(canvas, values, max) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width;
  const hgt = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(w * ratio)) { canvas.width = Math.round(w * ratio); canvas.height = Math.round(hgt * ratio); }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, hgt);
  const styles = getComputedStyle(canvas);
  const top = Math.max(max ?? 1, ...values);
  ctx.strokeStyle = styles.getPropertyValue('--grid').trim() || '#ddd';
  ctx.fillStyle = styles.getPropertyValue('--axis').trim() || '#666';
  ctx.font = '11px system-ui, sans-serif';
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = Math.round(8 + (hgt - 16) * (1 - f)) + 0.5;
    ctx.beginPath(); ctx.moveTo(36, y); ctx.lineTo(w, y); ctx.stroke();
    const label = top * f;
    ctx.fillText(label === 0 ? '0' : label >= 100 ? label.toFixed(0) : label.toFixed(label >= 10 ? 1 : 2), 2, y + 4);
  }
  if (values.length < 2) return;
  ctx.strokeStyle = styles.getPropertyValue('--line').trim() || '#2563eb';
  ctx.lineWidth = 2;
  ctx.beginPath();
  values.forEach((v, i) => {
    // Until five minutes are held, the samples there are spread over the whole width.
    const x = 36 + ((w - 40) * i) / (values.length - 1);
    const y = 8 + (hgt - 16) * (1 - v / top);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

// A per-model counter of /v1/stats summed over the loaded models.
function sum(stats, key) {
  return stats.models.reduce((a, m) => a + (m[key] || 0), 0);
}

async function sample() {
  try {
    const now = performance.now() / 1000;
    if (admin) {
      const s = await json('/v1/stats');
      const kvTotal = s.models.reduce((a, m) => a + m.kv_cells_total, 0);
      if (last) {
        const dt = now - last.t;
        const gen = s.tokens_out - last.out;
        const prompt = s.tokens_in - last.in;
        const cached = s.models.reduce((a, m) => a + m.cached_tokens, 0) - last.cached;
        push('tps', dt > 0 ? Math.max(0, gen / dt) : 0);
        push('hit', prompt > 0 ? cached / prompt : (series.hit.at(-1) ?? 0));
        const drafted = sum(s, 'draft_tokens') - last.drafted;
        const taken = sum(s, 'draft_accepted_tokens') - last.taken;
        push('draft', drafted > 0 ? taken / drafted : (series.draft.at(-1) ?? 0));
      }
      last = {
        t: now, out: s.tokens_out, in: s.tokens_in, cached: sum(s, 'cached_tokens'),
        drafted: sum(s, 'draft_tokens'), taken: sum(s, 'draft_accepted_tokens'),
      };
      $('#st-draft').textContent = `${last.taken} of ${last.drafted} overall`;
      push('queue', s.queue_depth);
      push('kv', s.kv_cells_used);
      $('#st-kv').textContent = `${s.kv_cells_used} of ${kvTotal}`;
      $('#st-tps').textContent = series.tps.length ? series.tps.at(-1).toFixed(1) : '';
      $('#st-hit').textContent = `${(100 * s.prefix_cache_hit_rate).toFixed(1)}% overall`;
    } else {
      const hl = await json('/health');
      const kv = hl.models.reduce((a, m) => a + m.kv_cells, 0);
      push('queue', hl.models.reduce((a, m) => a + m.waiting, 0));
      push('kv', kv);
      $('#st-kv').textContent = `${kv} of ${hl.models.reduce((a, m) => a + m.context, 0)}`;
    }
    $('#st-queue').textContent = String(series.queue.at(-1));
    plot($('#chart-queue'), series.queue);
    plot($('#chart-kv'), series.kv);
    if (admin) {
      plot($('#chart-tps'), series.tps);
      plot($('#chart-hit'), series.hit, 1);
      plot($('#chart-draft'), series.draft, 1);
    }
    $('#status-note').textContent = 'Sampled every 2 s; the last 5 minutes.';
  } catch (err) {
    $('#status-note').textContent = `Status: ${err.message}`;
  }
}

export function init(me) {
  admin = me.role === 'admin';
}

export function enter() {
  if (!timer) { sample(); timer = setInterval(sample, 2000); }
}

export function leave() {
  if (timer) { clearInterval(timer); timer = null; }
}

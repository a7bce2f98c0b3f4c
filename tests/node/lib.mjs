// What every client script shares: where the server is (set by tests/slow/test_node_clients.py),
// greedy settings, a zod schema whose JSON is short enough for a tiny model's budget, and a fetch
// that records what a client sent, for the checks that are about the wire.
import assert from 'node:assert/strict';
import { z } from 'zod';

export const BASE = process.env.LLAMAY_BASE ?? assert.fail('LLAMAY_BASE is not set');
export const MODEL = process.env.LLAMAY_MODEL ?? assert.fail('LLAMAY_MODEL is not set');
export const KEY = 'unused';

export const ASK = 'What is the weather in Paris?';

// Enums and a length bound keep a constrained answer inside a small max_tokens.
export const Weather = z.object({
  city: z.enum(['Paris', 'London', 'Rome']),
  unit: z.enum(['c', 'f']),
});
export const WEATHER_SCHEMA = z.toJSONSchema(Weather, { target: 'draft-7' });

export const Answer = z.object({
  city: z.enum(['Paris', 'London', 'Rome']),
  temperature: z.number().int().min(-50).max(50),
  sunny: z.boolean(),
});

/** A fetch that records each request's URL, headers, JSON body and response status. */
export function recordingFetch() {
  const seen = [];
  const fetchFn = async (url, init = {}) => {
    const response = await fetch(url, init);
    const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
    let body = null;
    if (typeof init.body === 'string') body = JSON.parse(init.body);
    seen.push({ url: String(url), headers, body, status: response.status });
    return response;
  };
  return { seen, fetch: fetchFn };
}

/** `value` parsed by `schema`, or a failure that shows the value. */
export function conforms(schema, value) {
  const result = schema.safeParse(value);
  assert.ok(result.success, `${JSON.stringify(value)} does not match the schema: ${result.error}`);
  return result.data;
}

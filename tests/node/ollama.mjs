// ollama-js against llamay's Ollama API: chat and generate (whole and streamed), tools and the
// round trip with the result, structured output with a zod schema as `format`, and the model list.
// The Ollama API has no tool_choice, so a call cannot be forced: the tool check samples until the
// model calls (the first seeds do), and every answer on the way must be well formed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Ollama } from 'ollama';
import { z } from 'zod';
import { ASK, Answer, BASE, MODEL, WEATHER_SCHEMA, Weather, conforms } from './lib.mjs';

const ollama = new Ollama({ host: BASE });
const GREEDY = { temperature: 0, seed: 1 };
const messages = [{ role: 'user', content: ASK }];
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather for a city', parameters: WEATHER_SCHEMA },
};

test('list and show name the model', async () => {
  const { models } = await ollama.list();
  assert.ok(models.some((m) => m.name === MODEL || m.model === MODEL));
  const shown = await ollama.show({ model: MODEL });
  assert.ok(shown.capabilities.includes('completion'));
  assert.equal(typeof shown.template, 'string');
});

test('chat: whole and streamed give the same message and counts', async () => {
  const whole = await ollama.chat({ model: MODEL, messages, options: { ...GREEDY, num_predict: 12 } });
  assert.equal(whole.message.role, 'assistant');
  assert.ok(whole.message.content.length > 0);
  assert.equal(whole.done, true);
  assert.ok(['stop', 'length'].includes(whole.done_reason));
  assert.ok(whole.prompt_eval_count > 0 && whole.eval_count > 0 && whole.eval_count <= 12);

  const parts = [];
  let last;
  for await (const part of await ollama.chat({ model: MODEL, messages, stream: true, options: { ...GREEDY, num_predict: 12 } })) {
    parts.push(part.message.content);
    last = part;
  }
  assert.ok(parts.length > 1);
  assert.equal(parts.join(''), whole.message.content);
  assert.equal(last.done, true);
  assert.equal(last.done_reason, whole.done_reason);
  assert.equal(last.eval_count, whole.eval_count);
  assert.equal(last.prompt_eval_count, whole.prompt_eval_count);
});

test('generate: whole and streamed give the same text', async () => {
  const body = { model: MODEL, prompt: ASK, options: { ...GREEDY, num_predict: 12 } };
  const whole = await ollama.generate(body);
  assert.ok(whole.response.length > 0 && whole.done);
  const parts = [];
  for await (const part of await ollama.generate({ ...body, stream: true })) parts.push(part.response);
  assert.equal(parts.join(''), whole.response);
});

test('tools: a call, its streamed twin, and the round trip with the result', async () => {
  let called = null;
  for (let seed = 0; seed < 16 && !called; seed++) {
    const options = { temperature: 1.0, seed, num_predict: 200 };
    const r = await ollama.chat({ model: MODEL, messages, tools: [weatherTool], options });
    // Answered in words or by a call: either way well formed.
    assert.equal(typeof r.message.content, 'string');
    for (const call of r.message.tool_calls ?? []) {
      assert.equal(call.function.name, 'get_weather');
      conforms(Weather, call.function.arguments);
    }
    if (r.message.tool_calls?.length) called = { r, options };
  }
  assert.ok(called, 'no seed called the tool');
  const { r, options } = called;
  const streamed = [];
  for await (const part of await ollama.chat({ model: MODEL, messages, tools: [weatherTool], options, stream: true })) {
    streamed.push(...(part.message.tool_calls ?? []));
  }
  assert.deepEqual(streamed.map((c) => c.function), r.message.tool_calls.map((c) => c.function));

  const follow = await ollama.chat({
    model: MODEL, tools: [weatherTool], options: { ...GREEDY, num_predict: 12 },
    messages: [
      ...messages,
      r.message,
      { role: 'tool', tool_name: 'get_weather', content: JSON.stringify({ temperature: 21, sunny: true }) },
    ],
  });
  assert.equal(follow.done, true);
  assert.ok(follow.prompt_eval_count > r.prompt_eval_count);
});

test('structured output: a zod schema as format, chat and generate', async () => {
  const format = z.toJSONSchema(Answer);
  const r = await ollama.chat({ model: MODEL, messages, format, options: { ...GREEDY, num_predict: 80 } });
  assert.equal(r.done_reason, 'stop');
  conforms(Answer, JSON.parse(r.message.content));
  const parts = [];
  for await (const part of await ollama.chat({ model: MODEL, messages, format, stream: true, options: { ...GREEDY, num_predict: 80 } })) {
    parts.push(part.message.content);
  }
  assert.equal(parts.join(''), r.message.content);
  const g = await ollama.generate({ model: MODEL, prompt: ASK, format, options: { ...GREEDY, num_predict: 80 } });
  conforms(Answer, JSON.parse(g.response));
  // `format: "json"` is any JSON value.
  const json = await ollama.chat({ model: MODEL, messages, format: 'json', options: { ...GREEDY, num_predict: 40 } });
  assert.equal(json.done_reason, 'stop');
  JSON.parse(json.message.content);
});

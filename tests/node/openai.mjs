// openai-node against llamay: chat completions (whole, streamed, tools, structured output with
// the zod helpers) and the Responses API (create, stream, previous_response_id, tools, parse).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { ASK, Answer, BASE, KEY, MODEL, WEATHER_SCHEMA, Weather, conforms } from './lib.mjs';

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
const GREEDY = { model: MODEL, temperature: 0, seed: 1 };
const messages = [{ role: 'user', content: ASK }];
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather for a city', parameters: WEATHER_SCHEMA },
};

test('models: the served model is listed', async () => {
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  assert.ok(ids.includes(MODEL));
});

test('chat: a whole answer with usage', async () => {
  const r = await client.chat.completions.create({ ...GREEDY, messages, max_tokens: 12 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  const choice = r.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.ok(choice.message.content.length > 0);
  assert.equal(r.model, MODEL);
  assert.ok(['stop', 'length'].includes(choice.finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.ok(r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat stream: deltas join to the whole answer, usage once on the last chunk', async () => {
  const whole = await client.chat.completions.create({ ...GREEDY, messages, max_tokens: 12 });
  const stream = await client.chat.completions.create({
    ...GREEDY, messages, max_tokens: 12, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(text, whole.choices[0].message.content);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  // Every other chunk has no usage, so a client that sums them counts once.
  assert.ok(chunks.slice(0, -1).every((c) => c.usage == null));
  const finish = chunks.flatMap((c) => c.choices).filter((ch) => ch.finish_reason);
  assert.deepEqual(finish.map((ch) => ch.finish_reason), [whole.choices[0].finish_reason]);
  // The SDK's own stream helper assembles the same completion.
  const helper = client.chat.completions.stream({ ...GREEDY, messages, max_tokens: 12 });
  const assembled = await helper.finalChatCompletion();
  assert.equal(assembled.choices[0].message.content, whole.choices[0].message.content);
});

test('tools: a required call, a named call, and the round trip with the result', async () => {
  const r = await client.chat.completions.create({
    ...GREEDY, messages, max_tokens: 200, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.ok(call.id);
  conforms(Weather, JSON.parse(call.function.arguments));

  const named = await client.chat.completions.create({
    ...GREEDY, messages, max_tokens: 200, tools: [weatherTool],
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_weather');
  conforms(Weather, JSON.parse(named.choices[0].message.tool_calls[0].function.arguments));

  const follow = await client.chat.completions.create({
    ...GREEDY, max_tokens: 12, tools: [weatherTool],
    messages: [
      ...messages,
      choice.message,
      { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sunny: true }) },
    ],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(follow.choices[0].finish_reason));
  assert.ok(follow.usage.prompt_tokens > r.usage.prompt_tokens);
});

test('tools streamed: the assembled call equals the whole one', async () => {
  const body = { ...GREEDY, messages, max_tokens: 200, tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false };
  const whole = await client.chat.completions.create(body);
  const assembled = await client.chat.completions.stream(body).finalChatCompletion();
  const [a, b] = [whole.choices[0].message.tool_calls[0], assembled.choices[0].message.tool_calls[0]];
  assert.equal(b.function.name, a.function.name);
  assert.equal(b.function.arguments, a.function.arguments);
  assert.equal(assembled.choices[0].finish_reason, 'tool_calls');
});

test('structured output: zodResponseFormat and zodFunction through parse()', async () => {
  const r = await client.chat.completions.parse({
    ...GREEDY, messages, max_tokens: 80, response_format: zodResponseFormat(Answer, 'answer'),
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  conforms(Answer, r.choices[0].message.parsed);
  assert.deepEqual(r.choices[0].message.parsed, JSON.parse(r.choices[0].message.content));

  const t = await client.chat.completions.parse({
    ...GREEDY, messages, max_tokens: 80,
    tools: [zodFunction({ name: 'get_weather', parameters: Weather })], tool_choice: 'required', parallel_tool_calls: false,
  });
  conforms(Weather, t.choices[0].message.tool_calls[0].function.parsed_arguments);

  // The streamed parse ends in the same object.
  const streamed = await client.chat.completions
    .stream({ ...GREEDY, messages, max_tokens: 80, response_format: zodResponseFormat(Answer, 'answer') })
    .finalChatCompletion();
  assert.deepEqual(streamed.choices[0].message.parsed, r.choices[0].message.parsed);
});

test('responses: create, stream and previous_response_id', async () => {
  const first = await client.responses.create({ ...GREEDY, input: ASK, max_output_tokens: 12 });
  assert.equal(first.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(first.status));
  assert.ok(first.output_text.length > 0);
  assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0 && first.usage.output_tokens <= 12);
  assert.equal(first.usage.total_tokens, first.usage.input_tokens + first.usage.output_tokens);

  const stream = client.responses.stream({ ...GREEDY, input: ASK, max_output_tokens: 12 });
  const deltas = [];
  const types = [];
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') deltas.push(event.delta);
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
  assert.equal(deltas.join(''), first.output_text);
  assert.equal(final.output_text, first.output_text);
  assert.deepEqual(final.usage, first.usage);

  const second = await client.responses.create({
    ...GREEDY, previous_response_id: first.id, input: 'And in London?', max_output_tokens: 12,
  });
  assert.equal(second.previous_response_id, first.id);
  // The earlier turn is part of the prompt: more input than the first question alone.
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
});

test('responses: a forced function call and its output sent back', async () => {
  const tool = { type: 'function', name: 'get_weather', description: 'Current weather for a city', parameters: WEATHER_SCHEMA, strict: true };
  const r = await client.responses.create({
    ...GREEDY, input: ASK, max_output_tokens: 200, tools: [tool], tool_choice: 'required', parallel_tool_calls: false,
  });
  const calls = r.output.filter((item) => item.type === 'function_call');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  conforms(Weather, JSON.parse(calls[0].arguments));
  const follow = await client.responses.create({
    ...GREEDY, previous_response_id: r.id, max_output_tokens: 12, tools: [tool],
    input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '{"temperature": 21}' }],
  });
  assert.ok(['completed', 'incomplete'].includes(follow.status));
  assert.ok(follow.usage.input_tokens > r.usage.input_tokens);
});

test('responses: zodTextFormat through parse()', async () => {
  const r = await client.responses.parse({
    ...GREEDY, input: ASK, max_output_tokens: 80, text: { format: zodTextFormat(Answer, 'answer') },
  });
  assert.equal(r.status, 'completed');
  conforms(Answer, r.output_parsed);
});

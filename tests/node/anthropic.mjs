// @anthropic-ai/sdk against llamay: messages (whole, streamed), tools with the round trip,
// structured output with the zod helper, and the SDK's default tool runner, which asks for a
// server-held message thread first and must fall back to sending the whole conversation.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { betaZodOutputFormat, betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { zodOutputFormat } from '@anthropic-ai/sdk/helpers/zod';
import { z } from 'zod';
import { ASK, BASE, KEY, MODEL, WEATHER_SCHEMA, Weather, conforms, recordingFetch } from './lib.mjs';

const client = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
const GREEDY = { model: MODEL, temperature: 0 };
const messages = [{ role: 'user', content: ASK }];
const weatherTool = { name: 'get_weather', description: 'Current weather for a city', input_schema: WEATHER_SCHEMA };
const ONE_CALL = { type: 'any', disable_parallel_tool_use: true };
const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

test('messages: a whole answer with usage', async () => {
  const r = await client.messages.create({ ...GREEDY, messages, max_tokens: 12 });
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.ok(r.id.startsWith('msg_'));
  assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason));
  assert.ok(textOf(r).length > 0);
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.output_tokens <= 12);
  // A Claude model name, as code written for Anthropic sends, is served by the default model.
  const claude = await client.messages.create({ ...GREEDY, model: 'claude-sonnet-4-5', messages, max_tokens: 12 });
  assert.equal(claude.model, MODEL);
  assert.equal(textOf(claude), textOf(r));
});

test('messages stream: text deltas join to the whole answer, same usage', async () => {
  const whole = await client.messages.create({ ...GREEDY, messages, max_tokens: 12 });
  const stream = client.messages.stream({ ...GREEDY, messages, max_tokens: 12 });
  const parts = [];
  stream.on('text', (delta) => parts.push(delta));
  const final = await stream.finalMessage();
  assert.equal(parts.join(''), textOf(whole));
  assert.equal(textOf(final), textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  const inputs = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
  assert.equal(inputs(final.usage), inputs(whole.usage));
});

test('tools: a forced call, its streamed twin, and the round trip with the result', async () => {
  const body = { ...GREEDY, messages, max_tokens: 200, tools: [weatherTool], tool_choice: ONE_CALL };
  const r = await client.messages.create(body);
  assert.equal(r.stop_reason, 'tool_use');
  const uses = r.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, 'get_weather');
  assert.ok(uses[0].id.startsWith('toolu_'));
  conforms(Weather, uses[0].input);

  const streamed = await client.messages.stream(body).finalMessage();
  assert.deepEqual(streamed.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]), [[uses[0].name, uses[0].input]]);

  const named = await client.messages.create({ ...body, tool_choice: { type: 'tool', name: 'get_weather' } });
  conforms(Weather, named.content.find((b) => b.type === 'tool_use').input);

  const follow = await client.messages.create({
    ...GREEDY, max_tokens: 12, tools: [weatherTool],
    messages: [
      ...messages,
      { role: 'assistant', content: r.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '21 and sunny' }] },
    ],
  });
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(follow.stop_reason));
  assert.ok(follow.usage.input_tokens + (follow.usage.cache_read_input_tokens ?? 0) > r.usage.input_tokens);
});

// zodOutputFormat keeps what Anthropic's structured outputs take (types, enums, required) and moves
// bounds such as minimum or maxLength into the description, where nothing enforces them; the SDK
// then checks the reply against the full zod schema. So the schema here has no bounds.
const Report = z.object({ city: z.enum(['Paris', 'London', 'Rome']), unit: z.enum(['c', 'f']), sunny: z.boolean() });

test('structured output: zodOutputFormat through parse(), whole and streamed', async () => {
  const body = { ...GREEDY, messages, max_tokens: 80, output_config: { format: zodOutputFormat(Report) } };
  const r = await client.messages.parse(body);
  assert.equal(r.stop_reason, 'end_turn');
  conforms(Report, r.parsed_output);
  assert.deepEqual(r.parsed_output, JSON.parse(textOf(r)));
  const streamed = await client.messages.stream(body).finalMessage();
  assert.equal(textOf(streamed), textOf(r));
  assert.deepEqual(streamed.parsed_output, r.parsed_output);

  // The beta API takes the older output_format and sends it as output_config.format.
  const { seen, fetch } = recordingFetch();
  const recorded = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 60_000, fetch });
  const beta = await recorded.beta.messages.parse({ ...GREEDY, messages, max_tokens: 80, output_format: betaZodOutputFormat(Report) });
  conforms(Report, beta.parsed_output);
  assert.equal(seen[0].body.output_config.format.type, 'json_schema');
});

test('tool runner: falls back from a thread and completes the tool loop', async () => {
  const { seen, fetch } = recordingFetch();
  const runnerClient = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 60_000, fetch });
  const ran = [];
  const getWeather = betaZodTool({
    name: 'get_weather',
    description: 'Current weather for a city',
    inputSchema: Weather,
    run: async (input) => {
      ran.push(input);
      return `21 degrees and sunny in ${input.city}`;
    },
  });
  const runner = runnerClient.beta.messages.toolRunner({
    ...GREEDY, max_tokens: 200, messages, tools: [getWeather], tool_choice: ONE_CALL, max_iterations: 2,
  });
  const replies = [];
  for await (const message of runner) replies.push(message);
  assert.equal(replies.length, 2);
  assert.ok(replies.every((m) => m.stop_reason === 'tool_use'));
  assert.equal(ran.length, 2);
  ran.forEach((input) => conforms(Weather, input));

  // The first request asks for a thread and is refused with Anthropic's code for it ...
  const [first, ...rest] = seen;
  assert.deepEqual(first.body.thread, { type: 'create' });
  assert.match(first.headers['anthropic-beta'] ?? '', /message-threads/);
  assert.equal(first.status, 400);
  // ... and every turn after it goes out whole, without a thread.
  assert.deepEqual(rest.map((r) => r.status), [200, 200]);
  assert.ok(rest.every((r) => !('thread' in r.body)));
  assert.deepEqual(rest[1].body.messages.map((m) => m.role), ['user', 'assistant', 'user']);
  assert.equal(rest[1].body.tools[0].name, 'get_weather');
  const result = rest[1].body.messages[2].content.find((b) => b.type === 'tool_result');
  assert.equal(result.tool_use_id, replies[0].content.find((b) => b.type === 'tool_use').id);
});

test('tool runner: streamed turns', async () => {
  const ran = [];
  const getWeather = betaZodTool({
    name: 'get_weather', description: 'Current weather for a city', inputSchema: Weather,
    run: async (input) => { ran.push(input); return '21 and sunny'; },
  });
  const runner = client.beta.messages.toolRunner({
    ...GREEDY, max_tokens: 200, messages, tools: [getWeather], tool_choice: ONE_CALL, stream: true, max_iterations: 2,
  });
  const calls = [];
  for await (const stream of runner) {
    const deltas = [];
    stream.on('inputJson', (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    assert.equal(message.stop_reason, 'tool_use');
    const use = message.content.find((b) => b.type === 'tool_use');
    assert.deepEqual(JSON.parse(deltas.join('')), use.input);
    calls.push(use.input);
  }
  assert.equal(calls.length, 2);
  assert.deepEqual(ran, calls);
});

test('tool runner: the loop ends on a reply without a call', async () => {
  const ran = [];
  const getWeather = betaZodTool({
    name: 'get_weather', description: 'Current weather for a city', inputSchema: Weather,
    run: async (input) => { ran.push(input); return '21 and sunny'; },
  });
  const runner = client.beta.messages.toolRunner({
    ...GREEDY, max_tokens: 200, messages, tools: [getWeather], tool_choice: ONE_CALL, max_iterations: 5,
  });
  const replies = [];
  for await (const message of runner) {
    replies.push(message);
    if (replies.length === 1) {
      // Keep the reply, and let the model answer in words once the tool has run.
      runner.setMessagesParams((params) => ({
        ...params, messages: [...params.messages, { role: 'assistant', content: message.content }], tool_choice: { type: 'none' },
      }));
    }
  }
  assert.equal(replies.length, 2);
  assert.equal(replies[0].stop_reason, 'tool_use');
  assert.equal(ran.length, 1);
  conforms(Weather, ran[0]);
  const final = await runner.done();
  assert.equal(final.id, replies[1].id);
  assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
  assert.ok(final.content.every((b) => b.type === 'text'));
  // The last request held the question, the call and its result.
  assert.deepEqual(runner.params.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
});

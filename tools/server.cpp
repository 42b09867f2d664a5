// SPDX-License-Identifier: Apache-2.0
// edgellm-server: an OpenAI-compatible HTTP server over one loaded checkpoint.
//
//   edgellm-server -m models/kjv-target-awq --port 8080 --parallel 2
//   curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json'
//        -d '{"messages":[{"role":"user","content":"Who made the light?"}],"max_tokens":32}'
//
// One Engine (weights, tokenizer) is shared read-only by --parallel slots, each a Session with
// its own KV cache and its own share of the --threads. A request takes the free slot whose
// cached tokens share the longest prefix with its prompt (a conversation's next turn prefills
// only the new part), else waits in a queue of --queue places; a full queue is answered 503 with
// Retry-After. Generation stops at the next token when the client disconnects, the request
// runs past --timeout, or the server shuts down (SIGTERM/SIGINT: stop accepting, let requests
// in flight finish for --grace seconds, cancel the rest, exit 0).
//
// Structured replies: response_format json_object/json_schema and llama.cpp's "grammar" field
// constrain the reply (constrain/constraint.hpp); tools/tool_choice/parallel_tool_calls render
// the tools with the checkpoint's template, hold a call the model opens to the tools' schemas
// (a lazy constraint, constrain/tool_calls.hpp) and answer OpenAI's tool_calls.
//
// HTTP is cpp-httplib's (one thread per connection from a pool of --http-threads); JSON is the
// project's reader (io/json.hpp) and writer (io/json_write.hpp).
#include "flags.hpp"
#include "server/api_error.hpp"
#include "server/compiled_cache.hpp"
#include "server/connection.hpp"
#include "server/messages.hpp"
#include "server/slots.hpp"
#include "server/tool_calls.hpp"

#include <edgellm/constrain/constraint.hpp>
#include <edgellm/constrain/tool_calls.hpp>
#include <edgellm/io/json.hpp>
#include <edgellm/io/json_write.hpp>
#include <edgellm/model/chat_template.hpp>
#include <edgellm/session.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using namespace edgellm;
using namespace edgellm::server;
namespace json = edgellm::io::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kProg = "edgellm-server";

struct ServerOptions {
  std::string model;
  std::string alias;  // the model id in /v1/models and replies; default: the directory's name
  std::string host = "127.0.0.1";
  int port = 8080;
  std::size_t parallel = 1;
  std::size_t queue = 16;
  std::size_t threads = std::max<std::size_t>(1, detail::hardware_threads());
  std::size_t context = 0;
  cache::KvType kv_type = cache::KvType::int8;
  model::LmHeadFormat lm_head = model::LmHeadFormat::int8;  // the CLIs' default
  std::string api_key;
  std::size_t max_body = std::size_t{4} << 20;
  std::size_t max_messages = 1024;
  std::size_t max_tokens = 0;  // per request; 0: what the context leaves
  std::size_t timeout_s = 600;
  std::size_t grace_s = 10;
  std::size_t http_threads = 128;
  bool quiet = false;
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

// Counters for /metrics.

struct Metrics {
  std::atomic<std::uint64_t> requests{0}, rejected_busy{0}, errors_4xx{0}, errors_5xx{0};
  std::atomic<std::uint64_t> prompt_tokens{0}, cached_tokens{0}, generated_tokens{0};
  std::atomic<std::uint64_t> cancelled{0};
  std::atomic<std::uint64_t> prefill_us{0}, decode_us{0};
};

// ---------------------------------------------------------------------------------------------
// A parsed request.

struct Job {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;
  // response_format json_object or json_schema, or llama.cpp's "grammar": the reply's language
  std::shared_ptr<const constrain::Constraint> constraint;
  // tools: rendered by the template; with tool_grammar (tool_choice other than none) a call the
  // model opens is held to the tools' schemas and the reply is parsed into tool_calls.
  std::optional<ToolRequest> tools;
  std::shared_ptr<const constrain::ToolCallGrammar> tool_grammar;
  std::vector<std::int32_t> prompt;
  GenerateOptions gen;
  decode::SamplingOptions sampling;
  std::string id;
  std::int64_t created = 0;
  // Where the request came from (to notice a disconnect) and its deadline.
  std::string remote_addr;
  int remote_port = -1;
  Clock::time_point deadline;
};

class Server {
 public:
  Server(ServerOptions o, std::shared_ptr<const Engine> engine, model::ChatTemplate tmpl,
         bool template_adds_bos)
      : o_(std::move(o)), engine_(std::move(engine)), template_(std::move(tmpl)),
        template_adds_bos_(template_adds_bos), scheduler_(o_.queue) {}

  status create_slots(const SessionOptions& base, std::size_t threads_per_slot) {
    for (std::size_t i = 0; i < o_.parallel; ++i) {
      Slot& s = scheduler_.slots().emplace_back();
      SessionOptions so = base;
      if (threads_per_slot > 1) {
        auto pool = ThreadPool::create(threads_per_slot);
        if (!pool) return pool.error();
        s.pool = std::move(*pool);
        so.pool = s.pool.get();
      }
      auto session = Session::create(engine_, so);
      if (!session) return session.error();
      s.session.emplace(std::move(*session));
    }
    context_ = scheduler_.slots().front().session->context_size();
    return {};
  }

  std::size_t context() const { return context_; }
  Scheduler& scheduler() { return scheduler_; }
  Metrics& metrics() { return metrics_; }
  std::atomic<bool>& cancel_all() { return cancel_all_; }
  std::atomic<int>& in_flight() { return in_flight_; }

  // Parses a chat or text completion request into `job`; an ApiError on bad input.
  std::optional<ApiError> parse(const httplib::Request& req, bool chat, Job& job) {
    auto doc = json::parse(req.body, "request body", {.max_depth = 64, .max_bytes = o_.max_body});
    if (!doc) return invalid("the body is not valid JSON: " + doc.error().message);
    const json::Value& v = *doc;
    if (!v.is_object()) return invalid("the body must be a JSON object");
    job.chat = chat;
    if (const json::Value* m = v.find("model"); m != nullptr && !m->is_string())
      return bad_param("model", "model: expected a string");
    if (auto e = check_unsupported(v, chat)) return e;
    if (auto e = parse_constraint(v, job)) return e;
    if (auto e = parse_tools(v, chat, job)) return e;

    std::string text;
    if (chat) {
      auto rendered = render_messages(v.find("messages"), job.tools ? &job.tools->tools : nullptr);
      if (!rendered) return rendered.error_value;
      text = std::move(rendered.text);
    } else {
      const json::Value* p = v.find("prompt");
      if (p != nullptr && p->is_array() && p->size() == 1 && p->as_array()[0].is_string())
        p = &p->as_array()[0];
      if (p == nullptr || !p->is_string())
        return bad_param("prompt", "prompt: expected a string (or an array of one string)");
      if (p->as_string().empty()) return bad_param("prompt", "prompt: must not be empty");
      text = p->as_string();
    }
    const model::Tokenizer& tok = *engine_->tokenizer();
    auto ids = tok.encode(text, {.add_special = chat ? !template_adds_bos_ : true,
                                 .parse_special = chat});
    if (!ids) return invalid("the prompt cannot be encoded: " + ids.error().message);
    if (ids->empty()) return bad_param(chat ? "messages" : "prompt", "the prompt encodes to no tokens");
    job.prompt = std::move(*ids);
    if (job.prompt.size() >= context_) {
      return ApiError{400,
                      fmt::format("the prompt is {} tokens; this server's context holds {} "
                                  "(prompt and reply together)",
                                  job.prompt.size(), context_),
                      "invalid_request_error", chat ? "messages" : "prompt",
                      "context_length_exceeded"};
    }

    // max_tokens (max_completion_tokens wins in chat): at most what the context leaves.
    const std::size_t room = context_ - job.prompt.size();
    std::size_t max_new = chat ? room : 16;  // OpenAI's defaults: the rest; 16 for completions
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      const json::Value* m = v.find(key);
      if (m == nullptr || m->is_null()) continue;
      const auto n = m->get_int();
      if (!n || *n < 1) return bad_param(key, fmt::format("{}: expected an integer >= 1", key));
      max_new = static_cast<std::size_t>(*n);
    }
    if (o_.max_tokens != 0) max_new = std::min(max_new, o_.max_tokens);
    job.gen.max_new_tokens = std::max<std::size_t>(1, std::min(max_new, room));
    job.gen.add_special = false;  // the prompt goes in as ids
    job.gen.parse_special = false;
    if (chat) job.gen.stop_ids = chat_stop_ids_;
    // A call's markers may be special tokens: they stay in the text that is parsed.
    if (job.tool_grammar) job.gen.skip_special = false;

    if (const json::Value* s = v.find("stop"); s != nullptr && !s->is_null()) {
      if (s->is_string()) {
        if (!s->as_string().empty()) job.gen.stop_strings.push_back(s->as_string());
      } else if (s->is_array() && s->size() <= 4) {
        for (const json::Value& x : s->as_array()) {
          if (!x.is_string()) return bad_param("stop", "stop: expected strings");
          if (!x.as_string().empty()) job.gen.stop_strings.push_back(x.as_string());
        }
      } else {
        return bad_param("stop", "stop: expected a string or an array of at most 4 strings");
      }
    }

    // Sampling: OpenAI's defaults (temperature 1, top_p 1), no top-k; a seed or a random one.
    job.sampling = decode::SamplingOptions{};
    job.sampling.temperature = 1.0f;
    job.sampling.top_p = 1.0f;
    job.sampling.top_k = 0;
    if (auto e = number_in(v, "temperature", 0.0, 2.0, job.sampling.temperature)) return e;
    if (auto e = number_in(v, "top_p", 0.0, 1.0, job.sampling.top_p)) return e;
    if (job.sampling.top_p <= 0.0f) return bad_param("top_p", "top_p: must be in (0, 1]");
    if (const json::Value* s = v.find("seed"); s != nullptr && !s->is_null()) {
      const auto n = s->get_int();
      if (!n) return bad_param("seed", "seed: expected an integer");
      job.sampling.seed = static_cast<std::uint64_t>(*n);
    } else {
      std::random_device rd;
      job.sampling.seed = (std::uint64_t{rd()} << 32) ^ rd();
    }
    if (const json::Value* s = v.find("stream"); s != nullptr && !s->is_null()) {
      if (!s->is_bool()) return bad_param("stream", "stream: expected true or false");
      job.stream = s->as_bool();
    }
    if (const json::Value* so = v.find("stream_options"); so != nullptr && !so->is_null()) {
      const json::Value* u = so->find("include_usage");
      if (!so->is_object() || (u != nullptr && !u->is_bool()))
        return bad_param("stream_options", "stream_options: expected {\"include_usage\": bool}");
      job.include_usage = u != nullptr && u->as_bool();
    }
    job.created = static_cast<std::int64_t>(std::time(nullptr));
    job.id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", next_request_id());
    job.remote_addr = req.remote_addr;
    job.remote_port = req.remote_port;
    job.deadline = Clock::now() + std::chrono::seconds(o_.timeout_s);
    return std::nullopt;
  }

  // Runs `job` on a slot. `emit(text)` gets each piece of text and returns false when it could
  // not be delivered. Returns the generation, or an ApiError.
  struct Outcome {
    std::optional<Generation> generation;
    std::string text;     // the reply as generated
    std::string content;  // the reply without its tool calls (all of it when there are none)
    std::vector<constrain::ToolCall> calls;
    std::vector<std::string> call_ids;
    std::string finish_reason;
    ApiError error;
  };
  Outcome run(const Job& job, std::uint64_t ticket, int local_port,
              const std::function<bool(std::string_view)>& emit) {
    Outcome out;
    const int fd = find_connection_fd(job.remote_addr, job.remote_port, local_port);
    const auto stop_now = [&] {
      return cancel_all_.load(std::memory_order_relaxed) || peer_gone(fd) ||
             Clock::now() >= job.deadline;
    };
    Slot* slot = scheduler_.acquire(ticket, job.prompt, stop_now);
    if (slot == nullptr) {
      metrics_.cancelled.fetch_add(1);
      out.error = server_fault(503, "the request was given up while it waited for a slot "
                                    "(client gone, timeout or shutdown)");
      return out;
    }
    Session& session = *slot->session;
    bool stopped_by_us = false;
    GenerateOptions gen = job.gen;
    std::unique_ptr<constrain::DocumentConstraint> constraint;
    std::unique_ptr<constrain::ToolCallConstraint> tool_constraint;
    std::vector<std::int32_t> stops = job.gen.stop_ids;
    stops.insert(stops.end(), engine_->eos_ids().begin(), engine_->eos_ids().end());
    if (job.constraint) {  // tokens that would leave the reply's language are masked
      auto c = job.constraint->start(trie_, std::move(stops), job.prompt.size(),
                                     job.gen.max_new_tokens);
      if (!c) {
        scheduler_.release(*slot);
        out.error = server_fault(500, c.error().message);
        return out;
      }
      constraint = std::move(*c);
      gen.logits_processor = constraint.get();
    } else if (job.tool_grammar) {  // free text, and a call opened is held to the tools
      auto c = job.tool_grammar->start(tool_trie_, std::move(stops), job.prompt.size(),
                                       job.gen.max_new_tokens);
      if (!c) {
        scheduler_.release(*slot);
        out.error = server_fault(500, c.error().message);
        return out;
      }
      tool_constraint = std::move(*c);
      gen.logits_processor = tool_constraint.get();
    }
    auto generation = [&]() -> result<Generation> {
      if (auto st = session.set_sampling(job.sampling); !st) return st.error();
      return session.generate(std::span<const std::int32_t>(job.prompt), gen,
                              [&](std::string_view piece, std::int32_t) {
                                out.text.append(piece);
                                if (!emit(piece) || stop_now()) {
                                  stopped_by_us = true;
                                  return false;
                                }
                                return true;
                              });
    }();
    if (!generation) {
      // The session may hold a half-built state (out of memory): forget it.
      (void)session.reset();
      slot->held.clear();
      scheduler_.release(*slot);
      out.error = server_fault(500, "generation failed: " + generation.error().message);
      return out;
    }
    slot->held = job.prompt;
    slot->held.insert(slot->held.end(), generation->tokens.begin(), generation->tokens.end());
    scheduler_.release(*slot);
    const auto& st = generation->stats;
    metrics_.prompt_tokens.fetch_add(st.prompt_tokens);
    metrics_.cached_tokens.fetch_add(st.cached_tokens);
    metrics_.generated_tokens.fetch_add(st.new_tokens);
    metrics_.prefill_us.fetch_add(static_cast<std::uint64_t>(st.prefill_s * 1e6));
    metrics_.decode_us.fetch_add(static_cast<std::uint64_t>(st.decode_s * 1e6));
    if (stopped_by_us) metrics_.cancelled.fetch_add(1);
    switch (st.stop) {
      case decode::StopReason::eos:
      case decode::StopReason::stop_string: out.finish_reason = "stop"; break;
      default: out.finish_reason = "length"; break;  // budget, full context, cancelled
    }
    out.content = out.text;
    if (job.tool_grammar) {
      constrain::ParsedReply parsed = constrain::parse_tool_calls(out.text, job.tools->spec.format);
      if (!parsed.calls.empty()) {
        out.content = std::move(parsed.text);
        out.calls = std::move(parsed.calls);
        for (std::size_t i = 0; i < out.calls.size(); ++i)
          out.call_ids.push_back(fmt::format("call_{:016x}", next_request_id()));
        if (st.stop == decode::StopReason::eos) out.finish_reason = "tool_calls";
      }
    }
    out.generation = std::move(*generation);
    return out;
  }

  json::Value usage(const Generation& g) const {
    json::Object u;
    u.append("prompt_tokens", g.stats.prompt_tokens);
    u.append("completion_tokens", g.tokens.size());
    u.append("total_tokens", g.stats.prompt_tokens + g.tokens.size());
    json::Object details;
    details.append("cached_tokens", g.stats.cached_tokens);
    u.append("prompt_tokens_details", json::Value(std::move(details)));
    return json::Value(std::move(u));
  }

  // One chunk of a streamed reply (`delta` text, or the final chunk with `finish_reason`).
  std::string chunk(const Job& job, std::optional<std::string_view> delta, bool first,
                    const std::string& finish_reason, const Outcome* calls = nullptr) const {
    json::Object choice;
    choice.append("index", 0);
    if (job.chat) {
      json::Object d;
      if (first) d.append("role", "assistant");
      if (delta) d.append("content", *delta);
      if (calls != nullptr)
        d.append("tool_calls", json::Value(tool_calls_json(calls->calls, calls->call_ids, true)));
      choice.append("delta", json::Value(std::move(d)));
    } else {
      choice.append("text", std::string(delta.value_or("")));
    }
    choice.append("logprobs", json::Value());
    choice.append("finish_reason",
                  finish_reason.empty() ? json::Value() : json::Value(finish_reason));
    json::Array choices;
    choices.push_back(json::Value(std::move(choice)));
    return envelope(job, job.chat ? "chat.completion.chunk" : "text_completion", std::move(choices));
  }

  std::string envelope(const Job& job, const char* object, json::Array choices,
                       std::optional<json::Value> usage_value = std::nullopt) const {
    json::Object o;
    o.append("id", job.id);
    o.append("object", object);
    o.append("created", job.created);
    o.append("model", o_.alias);
    o.append("system_fingerprint", fingerprint_);
    o.append("choices", json::Value(std::move(choices)));
    if (usage_value) o.append("usage", std::move(*usage_value));
    return json::dump(json::Value(std::move(o)));
  }

  std::string complete_body(const Job& job, const Outcome& r) const {
    json::Object choice;
    choice.append("index", 0);
    if (job.chat) {
      json::Object m;
      m.append("role", "assistant");
      // OpenAI's content is null in a reply that only calls tools.
      m.append("content", r.calls.empty() || !r.content.empty() ? json::Value(r.content) : json::Value());
      if (!r.calls.empty())
        m.append("tool_calls", json::Value(tool_calls_json(r.calls, r.call_ids, false)));
      choice.append("message", json::Value(std::move(m)));
    } else {
      choice.append("text", r.text);
    }
    choice.append("logprobs", json::Value());
    choice.append("finish_reason", r.finish_reason);
    json::Array choices;
    choices.push_back(json::Value(std::move(choice)));
    return envelope(job, job.chat ? "chat.completion" : "text_completion", std::move(choices),
                    usage(*r.generation));
  }

  std::string models_body() const {
    json::Object m;
    m.append("id", o_.alias);
    m.append("object", "model");
    m.append("created", started_);
    m.append("owned_by", "edgellm");
    json::Array data;
    data.push_back(json::Value(std::move(m)));
    json::Object o;
    o.append("object", "list");
    o.append("data", json::Value(std::move(data)));
    return json::dump(json::Value(std::move(o)));
  }

  std::string metrics_text() {
    const auto c = [](const std::atomic<std::uint64_t>& a) { return a.load(); };
    const double prefill_s = static_cast<double>(c(metrics_.prefill_us)) / 1e6;
    const double decode_s = static_cast<double>(c(metrics_.decode_us)) / 1e6;
    const double prefilled = static_cast<double>(c(metrics_.prompt_tokens) - c(metrics_.cached_tokens));
    std::string t;
    const auto metric = [&](const char* name, const char* type, const char* help, auto value) {
      t += fmt::format("# HELP edgellm_{0} {1}\n# TYPE edgellm_{0} {2}\nedgellm_{0} {3}\n", name,
                       help, type, value);
    };
    metric("requests_total", "counter", "Completion requests received.", c(metrics_.requests));
    metric("requests_rejected_busy_total", "counter", "Requests refused with 503: queue full.",
           c(metrics_.rejected_busy));
    metric("requests_cancelled_total", "counter",
           "Generations stopped early: client gone, timeout or shutdown.", c(metrics_.cancelled));
    metric("responses_4xx_total", "counter", "Client errors answered.", c(metrics_.errors_4xx));
    metric("responses_5xx_total", "counter", "Server errors answered.", c(metrics_.errors_5xx));
    metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           c(metrics_.prompt_tokens));
    metric("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's cache.",
           c(metrics_.cached_tokens));
    metric("generated_tokens_total", "counter", "Tokens generated.", c(metrics_.generated_tokens));
    metric("prefill_seconds_total", "counter", "Seconds spent prefilling.", prefill_s);
    metric("decode_seconds_total", "counter", "Seconds spent decoding.", decode_s);
    metric("prefill_tokens_per_second", "gauge", "Prefilled tokens per prefill second.",
           prefill_s > 0 ? prefilled / prefill_s : 0.0);
    metric("decode_tokens_per_second", "gauge", "Generated tokens per decode second.",
           decode_s > 0 ? static_cast<double>(c(metrics_.generated_tokens)) / decode_s : 0.0);
    metric("queue_length", "gauge", "Requests waiting for a slot.", scheduler_.queue_length());
    metric("slots_busy", "gauge", "Slots generating.", scheduler_.active());
    metric("slots_total", "gauge", "Slots (--parallel).", o_.parallel);
    return t;
  }

  void set_chat_stop_ids(std::vector<std::int32_t> ids) { chat_stop_ids_ = std::move(ids); }
  status build_token_trie() {
    auto t = constrain::TokenTrie::build(*engine_->tokenizer(), engine_->config().vocab_size);
    if (!t) return t.error();
    trie_ = std::move(*t);
    auto json_object = constrain::Constraint::compile({.kind = constrain::ConstraintKind::json_object});
    if (!json_object) return json_object.error();
    json_object_ = std::move(*json_object);
    if (tool_format_) {
      auto tt = constrain::tool_call_trie(*engine_->tokenizer(), engine_->config().vocab_size,
                                          *tool_format_);
      if (!tt) return tt.error();
      tool_trie_ = std::move(*tt);
    }
    return {};
  }
  void set_tool_format(std::optional<constrain::ToolCallFormat> f) { tool_format_ = f; }
  void set_fingerprint(std::string f) { fingerprint_ = std::move(f); }
  const ServerOptions& options() const { return o_; }

 private:
  struct Rendered {
    std::string text;
    std::optional<ApiError> error_value;
    explicit operator bool() const { return !error_value; }
  };

  // The messages, checked (server/messages.hpp), rendered by the checkpoint's template with the
  // request's tools when it has some.
  Rendered render_messages(const json::Value* messages, const json::Value* tools) const {
    Rendered r;
    json::Array list;
    if (auto e = template_messages(messages, o_.max_messages, list)) {
      r.error_value = std::move(e);
      return r;
    }
    model::ChatRenderOptions ro;
    if (tools != nullptr) ro.variables.emplace_back("tools", *tools);
    auto text = template_.render_json(json::Value(std::move(list)), ro);
    if (!text) {
      r.error_value = bad_param("messages", "the chat template refused the messages: " +
                                                text.error().message);
      return r;
    }
    r.text = std::move(*text);
    return r;
  }

  // What this server cannot honour yet is refused by name rather than ignored.
  static std::optional<ApiError> check_unsupported(const json::Value& v, bool chat) {
    if (const json::Value* n = v.find("n"); n != nullptr && !n->is_null()) {
      if (n->get_int() != std::optional<std::int64_t>(1)) return bad_param("n", "n: only 1 is supported");
    }
    if (const json::Value* rf = v.find("response_format"); rf != nullptr && !rf->is_null()) {
      const json::Value* type = rf->find("type");
      if (type == nullptr || !type->is_string() ||
          (type->as_string() != "text" && type->as_string() != "json_object" &&
           type->as_string() != "json_schema"))
        return bad_param("response_format",
                         "response_format: {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                         "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}");
    }
    if (!chat) {
      for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"})
        if (const json::Value* t = v.find(key); t != nullptr && !t->is_null())
          return bad_param(key, fmt::format("{}: only in chat completions", key));
    }
    for (const char* key : {"frequency_penalty", "presence_penalty"}) {
      if (const json::Value* p = v.find(key); p != nullptr && !p->is_null()) {
        if (p->get_double() != std::optional<double>(0.0))
          return bad_param(key, fmt::format("{}: only 0 is supported", key));
      }
    }
    for (const char* key : {"logprobs", "echo"}) {
      if (const json::Value* p = v.find(key); p != nullptr && !p->is_null()) {
        const bool on = p->is_bool() ? p->as_bool() : true;
        if (on) return bad_param(key, fmt::format("{}: not supported", key));
      }
    }
    if (!chat) {
      if (const json::Value* s = v.find("suffix"); s != nullptr && !s->is_null())
        return bad_param("suffix", "suffix: not supported");
      if (const json::Value* b = v.find("best_of"); b != nullptr && !b->is_null() &&
                                                     b->get_int() != std::optional<std::int64_t>(1))
        return bad_param("best_of", "best_of: only 1 is supported");
    }
    return std::nullopt;
  }

  static std::optional<ApiError> number_in(const json::Value& v, const char* key, double lo,
                                           double hi, float& out) {
    const json::Value* p = v.find(key);
    if (p == nullptr || p->is_null()) return std::nullopt;
    const auto x = p->get_double();
    if (!x || *x < lo || *x > hi)
      return bad_param(key, fmt::format("{}: expected a number in [{}, {}]", key, lo, hi));
    out = static_cast<float>(*x);
    return std::nullopt;
  }

  ServerOptions o_;
  std::shared_ptr<const Engine> engine_;
  model::ChatTemplate template_;
  bool template_adds_bos_;
  std::vector<std::int32_t> chat_stop_ids_;
  std::shared_ptr<const constrain::TokenTrie> trie_;  // the vocabulary for json_object
  // The template's call format (none: it shows no tool calls) and the vocabulary with its
  // markers (constrain::tool_call_trie).
  std::optional<constrain::ToolCallFormat> tool_format_;
  std::shared_ptr<const constrain::TokenTrie> tool_trie_;
  // The compiled constraints (json_object's, and the schemas, grammars and tool sets requests
  // gave, the most recent 32 of each by their text).
  std::shared_ptr<const constrain::Constraint> json_object_;
  CompiledCache<constrain::Constraint> constraints_{32};
  CompiledCache<constrain::ToolCallGrammar> tool_grammars_{32};

  // The compiled constraint for `spec` (key: its kind and source), compiled on first use.
  result<std::shared_ptr<const constrain::Constraint>> constraint_for(
      const constrain::ConstraintSpec& spec) {
    return constraints_.get(std::string(constrain::to_string(spec.kind)) + '\n' + spec.source,
                            [&] { return constrain::Constraint::compile(spec); });
  }

  // tools, tool_choice and parallel_tool_calls into job.tools and job.tool_grammar (server/
  // tool_calls.hpp); an ApiError naming the field.
  std::optional<ApiError> parse_tools(const json::Value& v, bool chat, Job& job) {
    if (!chat) return std::nullopt;  // check_unsupported refused tools on /v1/completions
    if (auto e = parse_tool_request(v, tool_format_, job.tools)) return e;
    if (!job.tools || job.tools->spec.choice.mode == constrain::ToolChoice::Mode::none)
      return std::nullopt;
    if (job.constraint)
      return bad_param(v.find("grammar") != nullptr ? "grammar" : "response_format",
                       "tools and a constrained reply (response_format json_object/json_schema, "
                       "grammar) cannot be combined: give one");
    auto g = tool_grammars_.get(job.tools->key(), [&] {
      return constrain::ToolCallGrammar::compile(job.tools->list, job.tools->spec);
    });
    if (!g) return bad_param("tools", g.error().message);
    job.tool_grammar = std::move(*g);
    return std::nullopt;
  }

  // response_format (json_object, json_schema) or llama.cpp's "grammar" field into
  // job.constraint; an ApiError naming the field when the schema or grammar is refused.
  std::optional<ApiError> parse_constraint(const json::Value& v, Job& job) {
    const json::Value* grammar = v.find("grammar");
    if (grammar != nullptr && !grammar->is_null()) {
      if (!grammar->is_string() || grammar->as_string().empty())
        return bad_param("grammar", "grammar: expected a GBNF grammar as a string");
      auto c = constraint_for({.kind = constrain::ConstraintKind::grammar,
                               .source = grammar->as_string()});
      if (!c) return bad_param("grammar", c.error().message);
      job.constraint = std::move(*c);
    }
    const json::Value* rf = v.find("response_format");
    if (rf == nullptr || !rf->is_object()) return std::nullopt;
    const std::string& type = rf->find("type")->as_string();  // checked by check_unsupported
    if (type == "text") return std::nullopt;
    if (job.constraint)
      return bad_param("grammar", "grammar and response_format both constrain the reply: give one");
    if (type == "json_object") {
      job.constraint = json_object_;
      return std::nullopt;
    }
    const json::Value* js = rf->find("json_schema");
    const json::Value* schema = js != nullptr && js->is_object() ? js->find("schema") : nullptr;
    if (schema == nullptr || !(schema->is_object() || schema->is_bool()))
      return bad_param("response_format",
                       "response_format.json_schema.schema: expected a JSON Schema (an object)");
    auto c = constraint_for({.kind = constrain::ConstraintKind::json_schema,
                             .source = json::dump(*schema)});
    if (!c) return bad_param("response_format", "response_format.json_schema.schema: " +
                                                    c.error().message);
    job.constraint = std::move(*c);
    return std::nullopt;
  }

  std::string fingerprint_;
  Scheduler scheduler_;
  Metrics metrics_;
  std::size_t context_ = 0;
  std::atomic<bool> cancel_all_{false};
  std::atomic<int> in_flight_{0};
  // Request ids: a counter mixed with a random start (splitmix64), unique within a run.
  std::uint64_t next_request_id() {
    std::uint64_t z = id_base_ + next_id_.fetch_add(0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::atomic<std::uint64_t> next_id_{0};
  std::uint64_t id_base_ = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  std::int64_t started_ = static_cast<std::int64_t>(std::time(nullptr));
};

/// Constant-time comparison of the Authorization header with "Bearer KEY".
bool authorized(const httplib::Request& req, const std::string& key) {
  if (key.empty()) return true;
  const std::string expected = "Bearer " + key;
  const std::string got = req.get_header_value("Authorization");
  unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i] ^ (i < got.size() ? got[i] : 0));
  return diff == 0;
}


}  // namespace

int main(int argc, char** argv) {
  ServerOptions o;
  const std::vector<cli::flag> flags{
      cli::flag::string({"-m", "--model"}, "DIR", "checkpoint directory (required)", o.model),
      cli::flag::string({"--alias"}, "NAME", "model id in /v1/models and replies", o.alias)
          .shows_default("the directory's name"),
      cli::flag::string({"--host"}, "ADDR", "address to listen on (another than loopback\n"
                        "exposes the model: use --api-key)", o.host),
      cli::flag::number({"--port"}, "N", "TCP port; 0 takes a free one (printed)", o.port, 0, 65535),
      cli::flag::number({"-np", "--parallel"}, "N", "slots: requests generating at once", o.parallel,
                        std::size_t{1}, std::size_t{64}),
      cli::flag::number({"--queue"}, "N", "requests that may wait for a slot; more get 503",
                        o.queue, std::size_t{0}, std::size_t{4096}),
      tools::threads_flag(o.threads, kProg, "threads, shared out among the slots (at least\n"
                          "one each)"),
      cli::flag::number({"-c", "--ctx-size", "--context"}, "N",
                        "tokens per slot; 0: the model's maximum, at most\n4096", o.context,
                        std::size_t{0}, std::size_t{1} << 20),
      tools::kv_type_flag({"--kv-type"}, "KV cache storage: int8, int4, f16 or f32", o.kv_type),
      tools::lm_head_flag("lm_head: f16 as stored, int8 or int4 (at load)", o.lm_head),
      cli::flag::string({"--api-key"}, "KEY", "require 'Authorization: Bearer KEY' on /v1/*",
                        o.api_key).shows_default(""),
      cli::flag::number({"--max-body"}, "BYTES", "largest request body", o.max_body,
                        std::size_t{1024}, std::size_t{1} << 30),
      cli::flag::number({"--max-messages"}, "N", "most messages in a chat request", o.max_messages,
                        std::size_t{1}, std::size_t{1} << 20),
      cli::flag::number({"--max-tokens"}, "N", "most tokens a request may generate; 0: the\n"
                        "context's rest", o.max_tokens, std::size_t{0}, std::size_t{1} << 20),
      cli::flag::number({"--timeout"}, "S", "seconds a request may take, waiting included", o.timeout_s,
                        std::size_t{1}, std::size_t{86400}),
      cli::flag::number({"--grace"}, "S", "seconds requests in flight get to finish at SIGTERM",
                        o.grace_s, std::size_t{0}, std::size_t{3600}),
      cli::flag::number({"--http-threads"}, "N", "connections served at once (idle ones\n"
                        "included)", o.http_threads, std::size_t{4}, std::size_t{4096}),
      cli::flag::boolean({"-q", "--quiet"}, "no line per request on stderr", o.quiet),
  };
  const tools::Help help{
      "usage: edgellm-server -m DIR [--port N] [--parallel N] [flags]\n\n"
      "An OpenAI-compatible HTTP server over one loaded checkpoint: POST /v1/chat/completions,\n"
      "POST /v1/completions, GET /v1/models, GET /health, GET /metrics (Prometheus text).\n\n",
      {{"", &flags}},
      "Exit status: 0 after SIGTERM or SIGINT, 1 when the model cannot be loaded or the address\n"
      "not bound, 2 on a usage error.\n",
      28};
  if (const auto rc = tools::parse_command_line(kProg, argc, argv, help)) return *rc;
  if (o.model.empty()) return cli::usage_error(kProg, "no model: pass -m DIR");
  if (o.alias.empty()) {
    std::error_code ec;
    o.alias = std::filesystem::weakly_canonical(o.model, ec).filename().string();
    if (o.alias.empty()) o.alias = o.model;
  }

  // Signals: blocked here, before any thread starts, and taken by one thread with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  const std::size_t per_slot = std::max<std::size_t>(1, o.threads / o.parallel);
  EngineOptions eo;
  eo.load.lm_head = o.lm_head;
  auto engine = Engine::load(o.model, eo);
  if (!engine) {
    std::fprintf(stderr, "%s: %s\n", kProg, engine.error().message.c_str());
    return 1;
  }
  auto found = model::ChatTemplate::find(o.model);
  if (!found) {
    std::fprintf(stderr, "%s: chat template: %s\n", kProg, found.error().message.c_str());
    return 1;
  }
  const bool has_template = found->has_value();
  std::optional<model::ChatTemplate> tmpl = std::move(*found);
  if (!tmpl) {
    std::fprintf(stderr, "%s: warning: %s has no chat_template in tokenizer_config.json; using "
                         "ChatML\n", kProg, o.model.c_str());
    auto chatml = model::ChatTemplate::chatml();
    if (!chatml) return 1;
    tmpl = std::move(*chatml);
  }
  // Stop ids of a chat turn: the template's eos token and ChatML's end of turn.
  std::vector<std::int32_t> stop_ids;
  const model::Tokenizer& tok = *(*engine)->tokenizer();
  if (has_template)
    if (const auto& eos = tmpl->eos_token())
      if (auto id = tok.token_to_id(*eos)) stop_ids.push_back(*id);
  if (auto im_end = tok.token_to_id("<|im_end|>")) stop_ids.push_back(*im_end);

  const std::optional<constrain::ToolCallFormat> tool_format =
      has_template ? constrain::detect_tool_call_format(tmpl->source()) : std::nullopt;
  Server server(o, *engine, std::move(*tmpl), has_template);
  server.set_tool_format(tool_format);
  server.set_chat_stop_ids(std::move(stop_ids));
  server.set_fingerprint(fmt::format("edgellm-{}.{}.{}-{}", EDGELLM_VERSION_MAJOR, EDGELLM_VERSION_MINOR,
                                    EDGELLM_VERSION_PATCH, cache::kv_type_name(o.kv_type)));
  SessionOptions so;
  so.kv_type = o.kv_type;
  so.context_size = o.context;
  if (auto st = server.build_token_trie(); !st) {
    std::fprintf(stderr, "%s: %s\n", kProg, st.error().message.c_str());
    return 1;
  }
  if (auto st = server.create_slots(so, per_slot); !st) {
    std::fprintf(stderr, "%s: %s\n", kProg, st.error().message.c_str());
    return 1;
  }

  httplib::Server http;
  http.new_task_queue = [n = o.http_threads] { return new httplib::ThreadPool(n); };
  http.set_payload_max_length(o.max_body);
  http.set_read_timeout(10, 0);
  http.set_write_timeout(10, 0);
  http.set_keep_alive_timeout(3);  // an idle connection holds a thread this long
  http.set_keep_alive_max_count(1000);
  int local_port = o.port;

  const auto log = [&](const httplib::Request& req, const httplib::Response& res) {
    if (res.status >= 500) server.metrics().errors_5xx.fetch_add(1);
    else if (res.status >= 400) server.metrics().errors_4xx.fetch_add(1);
    if (!o.quiet)
      std::fprintf(stderr, "%s: %s %s %d\n", kProg, req.method.c_str(), req.path.c_str(), res.status);
  };
  http.set_logger(log);
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) == 0 && !authorized(req, o.api_key)) {
      send_error(res, {401, "missing or wrong API key ('Authorization: Bearer KEY')",
                       "invalid_request_error", {}, "invalid_api_key"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // ours already
    ApiError e = invalid(fmt::format("{} {}: HTTP {}", req.method, req.path, res.status));
    e.status = res.status;
    if (res.status == 404) e.message = fmt::format("no route {} {}", req.method, req.path);
    if (res.status == 413) e.message = "the request body is larger than this server accepts";
    if (res.status >= 500) e.type = "server_error";
    res.set_content(error_body(e), "application/json");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, server_fault(500, "internal error: " + what));
  });

  http.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(fmt::format("{{\"status\":\"ok\",\"slots_idle\":{},\"queue_length\":{}}}",
                                o.parallel - server.scheduler().active(),
                                server.scheduler().queue_length()),
                    "application/json");
  });
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(server.metrics_text(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(server.models_body(), "application/json");
  });

  const auto completion = [&](bool chat) {
    return [&, chat](const httplib::Request& req, httplib::Response& res) {
      server.metrics().requests.fetch_add(1);
      auto job = std::make_shared<Job>();
      if (auto e = server.parse(req, chat, *job)) return send_error(res, *e);
      const auto ticket = server.scheduler().enqueue();
      if (!ticket) {
        server.metrics().rejected_busy.fetch_add(1);
        res.set_header("Retry-After", "1");
        return send_error(res, server_fault(503, "all slots are busy and the queue is full (or "
                                                    "the server is stopping); retry later"));
      }
      server.in_flight().fetch_add(1);
      if (!job->stream) {
        auto r = server.run(*job, *ticket, local_port, [](std::string_view) { return true; });
        server.in_flight().fetch_sub(1);
        if (!r.generation) return send_error(res, r.error);
        return res.set_content(server.complete_body(*job, r), "application/json");
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [&server, job, ticket = *ticket, local_port](std::size_t, httplib::DataSink& sink) {
            const auto send = [&sink](const std::string& data) {
              const std::string event = "data: " + data + "\n\n";
              return sink.write(event.data(), event.size());
            };
            bool first = true, delivered = true;
            // With tools, text that may open a call waits; the calls come whole at the end.
            std::optional<CallTextStream> calls_text;
            if (job->tool_grammar) calls_text.emplace(job->tools->spec.format);
            const auto send_text = [&](std::string_view text) {
              if (first && job->chat) delivered = send(server.chunk(*job, "", true, ""));
              first = false;
              delivered = delivered && send(server.chunk(*job, text, false, ""));
            };
            const auto r = server.run(*job, ticket, local_port, [&](std::string_view piece) {
              if (!calls_text) {
                send_text(piece);
              } else if (const std::string text = calls_text->take(piece); !text.empty()) {
                send_text(text);
              }
              return delivered;
            });
            if (!r.generation) {
              send(error_body(r.error));
            } else if (delivered) {
              if (calls_text)
                if (const std::string rest = calls_text->rest(r.content); !rest.empty()) send_text(rest);
              if (first && job->chat) send(server.chunk(*job, "", true, ""));
              if (!r.calls.empty()) send(server.chunk(*job, std::nullopt, false, "", &r));
              send(server.chunk(*job, std::nullopt, false, r.finish_reason));
              if (job->include_usage) {
                send(server.envelope(*job, job->chat ? "chat.completion.chunk" : "text_completion",
                                     {}, server.usage(*r.generation)));
              }
              send("[DONE]");
            }
            sink.done();
            return true;
          },
          [&server, ticket = *ticket](bool) {
            server.scheduler().forget(ticket);
            server.in_flight().fetch_sub(1);
          });
    };
  };
  http.Post("/v1/chat/completions", completion(true));
  http.Post("/v1/completions", completion(false));

  if (o.port == 0) {
    local_port = http.bind_to_any_port(o.host);
  } else if (http.bind_to_port(o.host, o.port)) {
    local_port = o.port;
  } else {
    local_port = -1;
  }
  if (local_port <= 0) {
    std::fprintf(stderr, "%s: cannot listen on %s:%d (address in use, or not this host's)\n", kProg,
                 o.host.c_str(), o.port);
    return 1;
  }
  std::fprintf(stderr, "%s: listening on http://%s:%d (model %s, %zu slot%s of %zu tokens, %zu "
                       "thread%s each)\n", kProg, o.host.c_str(), local_port, o.alias.c_str(),
               o.parallel, o.parallel == 1 ? "" : "s", server.context(), per_slot,
               per_slot == 1 ? "" : "s");

  // Shutdown: the first SIGTERM/SIGINT stops new requests, waits up to --grace for those in
  // flight, cancels the rest at their next token, then stops the listener.
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "%s: %s: stopping (grace %zu s)\n", kProg, sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 o.grace_s);
    server.scheduler().stop_accepting();
    const auto until = Clock::now() + std::chrono::seconds(o.grace_s);
    while (server.in_flight().load() > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server.cancel_all().store(true);
    while (server.in_flight().load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http.stop();
  });
  const bool ok = http.listen_after_bind();
  if (!server.scheduler().stopping()) ::kill(::getpid(), SIGTERM);  // the listener failed: end stopper
  stopper.join();
  std::fprintf(stderr, "%s: stopped\n", kProg);
  return ok || server.cancel_all().load() ? 0 : 1;
}

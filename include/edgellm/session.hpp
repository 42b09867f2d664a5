// SPDX-License-Identifier: Apache-2.0
// The session facade: an Engine loads a checkpoint directory once (weights, tokenizer.json, the
// eos ids of config.json and generation_config.json) and is shared read-only; a Session over it
// holds one conversation (its own KV cache, sampler and decoder) and generates text with a
// streaming callback that can cancel. This is the object a C API or a JNI binding wraps: every
// error is a result<T> / status value and nothing here keeps global state.
//
//   auto engine = edgellm::Engine::load("models/kjv-target-awq", {.threads = 2});
//   if (!engine) return fail(engine.error());
//   auto session = edgellm::Session::create(*engine);
//   if (!session) return fail(session.error());
//   auto out = session->generate("And God said", {.max_new_tokens = 64},
//                                [](std::string_view text, std::int32_t) { print(text); return true; });
//
// Thread safety: an Engine is immutable once loaded; any number of Sessions over one Engine may
// run concurrently on different threads (each owns its cache, scratch and sampler; the weights and
// the tokenizer are read-only). A Session is used by one thread at a time. Sessions that share a
// ThreadPool (the Engine's, or one the app passes) take turns on it: its run() serialises callers.
//
// Threads: the app owns its ThreadPool and passes it in SessionOptions::pool (it must outlive the
// Session), or asks the Engine to own one (EngineOptions::threads > 1) that every Session without
// a pool of its own uses. Without either, a Session computes on its calling thread.
#pragma once

#include "edgellm/backend/profile.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/decode/generate.hpp"
#include "edgellm/decode/lookup_draft.hpp"
#include "edgellm/decode/prompt_cache.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/decode/speculative.hpp"
#include "edgellm/detail/guard_exceptions.hpp"
#include "edgellm/model/tokenizer.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "edgellm/plan.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace edgellm {

/// How Engine::load() loads a checkpoint directory.
struct EngineOptions {
  /// Passed to model::load_weights (reference mode, lm_head format, packed-weight cache, ...).
  model::LoadOptions load{};
  /// With load.lm_head int8 or q4: when that lm_head cannot be built (e.g. no group size
  /// divides hidden_size), load the lm_head as stored instead of failing; Engine::lm_head_note()
  /// then says why.
  bool lm_head_fallback = true;
  /// Load DIR/tokenizer.json (required to generate text). false: weights only (a draft model,
  /// which decodes with its target's tokenizer; a bench on synthetic token ids).
  bool load_tokenizer = true;
  /// > 1: the Engine owns a ThreadPool of this many threads (the caller's included) that
  /// Sessions without SessionOptions::pool use. 1: no pool.
  std::size_t threads = 1;
  /// Memory budget of the load (plan.hpp): when set, load() plans the weights and the tokenizer
  /// first (config.json and the safetensors headers only) and refuses, before allocating
  /// anything large, when their resident bytes or the peak while loading exceed it.
  MemoryBudget memory_budget{};

  /// The options for a draft model that proposes tokens for a target loaded with `target`: the
  /// lm_head in int4 (a draft only proposes, the target decides every token, so this costs no
  /// exactness and saves most of a small draft's step), the target's reference mode and
  /// allow_extra_tensors, no packed cache (that file is the target's), no tokenizer and no pool
  /// of its own (the Session's is used).
  static EngineOptions draft_of(const EngineOptions& target) {
    EngineOptions o;
    o.load.fp32_reference = target.load.fp32_reference;
    o.load.rtn_group_size = target.load.rtn_group_size;
    o.load.release_source_pages = target.load.release_source_pages;
    o.load.allow_extra_tensors = target.load.allow_extra_tensors;
    o.load.lm_head = model::LmHeadFormat::q4;
    o.lm_head_fallback = true;
    o.load_tokenizer = false;
    return o;
  }
};

/// A loaded checkpoint: weights, tokenizer and stop ids, shared read-only by Sessions (and by
/// code that builds its own model::Transformer from weights()).
class Engine {
 public:
  /// Loads `dir` (config.json, generation_config.json if present, *.safetensors, tokenizer.json).
  /// Errors name the directory or the file at fault: a path that is not a directory, the
  /// loader's and the tokenizer's errors, a tokenizer with more tokens than the model's
  /// vocab_size, a pool that cannot be created.
  static result<std::shared_ptr<const Engine>> load(const std::string& dir,
                                                    const EngineOptions& options = {}) {
    // The guard turns an exception that escapes (an allocation not checked where it happens)
    // into an error: the application gets a result, never an abort.
    using Loaded = result<std::shared_ptr<const Engine>>;
    return edgellm::detail::guard_exceptions("Engine::load", [&]() -> Loaded {
      constexpr std::string_view where = "Engine::load";
      std::error_code ec;
      if (!std::filesystem::is_directory(dir, ec)) {
        return make_error(errc::io_error, where,
                          "'" + dir + "' is not a directory (a Hugging Face checkpoint directory)");
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (options.memory_budget.enabled()) {
        auto budget = resolve_budget(options.memory_budget);
        if (!budget) return budget.error();
        PlanOptions po;
        po.load = options.load;
        po.lm_head_fallback = options.lm_head_fallback;
        po.load_tokenizer = options.load_tokenizer;
        auto plan = plan_memory(dir, po);
        if (!plan) return plan.error();
        if (plan->engine_peak_bytes() > *budget) {
          return make_error(errc::out_of_memory, where,
                            dir + ": loading needs " + mib(plan->engine_peak_bytes()) +
                                " (weights " + mib(plan->weights.resident_bytes()) +
                                (plan->tokenizer_bytes ? ", tokenizer " + mib(plan->tokenizer_bytes)
                                                       : std::string()) +
                                ", peak while loading " + mib(plan->weights.load_peak_bytes) +
                                " at " + plan->weights.load_peak_tensor + "), budget " +
                                mib(*budget));
        }
      }
      std::shared_ptr<Engine> e(new Engine());
      e->dir_ = dir;
      e->options_ = options;
      e->options_.load.progress = nullptr;  // the caller's, for this load only
      model::LoadOptions lo = options.load;
      auto w = model::load_weights(dir, lo);
      if (!w && options.lm_head_fallback && lo.lm_head != model::LmHeadFormat::as_stored &&
          !lo.fp32_reference) {
        // Whatever made the quantised lm_head fail, the load as stored either works or reports
        // the checkpoint's real problem.
        e->lm_head_note_ = std::string(model::lm_head_format_name(lo.lm_head)) +
                           " lm_head refused (" + w.error().message + "); keeping it as stored";
        lo.lm_head = model::LmHeadFormat::as_stored;
        w = model::load_weights(dir, lo);
      }
      if (!w) return w.error();
      e->weights_ = std::move(*w);
      if (options.load_tokenizer) {
        auto tok = model::Tokenizer::load(dir);
        if (!tok) return tok.error();
        if (tok->vocab_size() > e->weights_->config.vocab_size) {
          return make_error(errc::format_error, where,
                            dir + ": tokenizer.json has " + std::to_string(tok->vocab_size()) +
                                " tokens but the model's vocab_size is " +
                                std::to_string(e->weights_->config.vocab_size));
        }
        e->tokenizer_.emplace(std::move(*tok));
      }
      for (const std::int64_t id : e->weights_->config.eos_token_ids)
        e->eos_ids_.push_back(static_cast<std::int32_t>(id));
      if (options.threads > 1) {
        auto pool = ThreadPool::create(options.threads);
        if (!pool) return pool.error();
        e->pool_ = std::move(*pool);
      }
      e->load_seconds_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return std::shared_ptr<const Engine>(std::move(e));
    });
  }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::string& dir() const noexcept { return dir_; }
  const EngineOptions& options() const noexcept { return options_; }
  const model::ModelConfig& config() const noexcept { return weights_->config; }
  const std::shared_ptr<const model::TransformerWeights>& weights() const noexcept { return weights_; }
  /// Null when loaded with load_tokenizer = false.
  const model::Tokenizer* tokenizer() const noexcept { return tokenizer_ ? &*tokenizer_ : nullptr; }
  /// The model's stop ids (config.json's and generation_config.json's eos_token_id).
  std::span<const std::int32_t> eos_ids() const noexcept { return eos_ids_; }
  /// The Engine's pool (EngineOptions::threads > 1), else null. Internally synchronised.
  ThreadPool* pool() const noexcept { return pool_.get(); }
  /// Seconds Engine::load() took (weights, tokenizer, pool).
  double load_seconds() const noexcept { return load_seconds_; }
  /// Why the lm_head is as stored although int8 or int4 was asked for; empty otherwise.
  const std::string& lm_head_note() const noexcept { return lm_head_note_; }
  /// The packed-weight cache's note (model::TransformerWeights::packed_cache_note).
  const std::string& packed_cache_note() const noexcept { return weights_->packed_cache_note; }
  /// The note is a warning: the packed cache was neither used nor written.
  bool packed_cache_failed() const noexcept { return weights_->packed_cache_failed; }

 private:
  Engine() = default;

  std::string dir_;
  EngineOptions options_;
  std::shared_ptr<const model::TransformerWeights> weights_;
  std::optional<model::Tokenizer> tokenizer_;
  std::vector<std::int32_t> eos_ids_;
  std::unique_ptr<ThreadPool> pool_;
  double load_seconds_ = 0.0;
  std::string lm_head_note_;
};

/// How a Session is built: its KV cache, threads, sampler and (optional) speculative decoding.
struct SessionOptions {
  /// KV cache storage: int8 (per position and head, half the memory of f16), int4 (per position,
  /// head and 32 values, 0.28 of f16; CPU only), f16 or f32.
  cache::KvType kv_type = cache::KvType::int8;
  /// Tokens the session holds (prompt and generated). 0: the model's max_position_embeddings,
  /// at most 4096, capped at a Mistral sliding_window.
  std::size_t context_size = 0;
  /// Most tokens run through the layers at once (model::TransformerOptions::max_batch).
  std::size_t max_batch = 64;
  /// The app's pool (it must outlive the Session); null: the Engine's pool, if it owns one.
  ThreadPool* pool = nullptr;
  decode::SamplingOptions sampling{};
  /// Speculative decoding with a draft model that shares the target's tokenizer (load it with
  /// EngineOptions::draft_of); greedy output is the same as without it, sampled output has the
  /// same distribution. Not combinable with prompt_lookup.
  std::shared_ptr<const Engine> draft{};
  /// Speculative decoding with n-gram lookup in the prompt and the text so far (no second model).
  bool prompt_lookup = false;
  /// Draft length and adaptive mode, with `draft` or `prompt_lookup`.
  decode::SpeculativeOptions speculative{};
  /// Memory budget of this Session (plan.hpp): its KV cache for the whole context and its
  /// scratch (a draft model's included), the Engine's weights excluded. When set, create()
  /// refuses before allocating when the plan exceeds it, or with shrink_context_to_fit takes
  /// the largest context that fits (Session::memory_note() says so).
  MemoryBudget memory_budget{};
  bool shrink_context_to_fit = false;
  /// Per-op time, calls and fork-joins of the target model's steps (a draft model's are not
  /// counted) are added here (model::TransformerOptions::profile); must outlive the Session.
  backend::Profile* profile = nullptr;
};

/// What one Session::generate() call does besides the prompt.
struct GenerateOptions {
  std::size_t max_new_tokens = 256;       ///< budget of emitted tokens (> 0)
  std::vector<std::string> stop_strings{};  ///< generation ends before the first occurrence
  std::vector<std::int32_t> stop_ids{};     ///< stop tokens besides the model's eos ids
  bool ignore_eos = false;                ///< do not stop at the model's eos ids
  bool skip_special = true;               ///< special tokens produce no text
  bool add_special = true;                ///< text prompts: add the tokenizer's bos etc.
  bool parse_special = false;             ///< text prompts: "<|im_start|>" etc. become special tokens
  /// Changes the scores of every sampled token (a constraint: constrain/json_constraint.hpp);
  /// the caller's, it must outlive the call. Null: none.
  decode::LogitsProcessor* logits_processor = nullptr;
};

/// Streaming callback: a piece of generated text (whole UTF-8 characters; text that may start a
/// stop string is held back until it is known not to) and the id of the latest emitted token.
/// Return false to stop: generate() returns at once with StopReason::callback, and the Session
/// stays usable. A token that completes no text (part of a UTF-8 character, a skipped special
/// token) brings no call.
using TokenCallback = std::function<bool(std::string_view text, std::int32_t token)>;

/// The result of one generate() call.
struct Generation {
  std::vector<std::int32_t> tokens;  ///< emitted token ids (stop ids excluded)
  decode::GenerateStats stats;       ///< tokens, prefill and decode times, time to first token
};

/// Totals over a Session's generate() calls since creation or reset().
struct SessionStats {
  std::size_t generations = 0;
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;  ///< of prompt_tokens, kept from the cache (not prefilled)
  std::size_t new_tokens = 0;
  double prefill_s = 0.0;
  double decode_s = 0.0;
  decode::GenerateStats last;  ///< the latest successful call's
};

/// One conversation over an Engine: a model::Transformer with its own KV cache (the type chosen
/// at runtime; each call dispatches once, the Transformer does the work), a decode::Sampler, and
/// a decoder (plain, or speculative with a draft model or prompt lookup) that reuses what the
/// cache holds: a prompt that extends the previous one (a chat's next turn) forwards only its new
/// tokens. Movable, not copyable; one thread at a time (see the file comment).
class Session {
 public:
  /// A session over `engine`. Errors: a null engine, options the Transformer, the sampler or the
  /// speculative decoder refuse (context, sampling ranges, a draft with another vocabulary), a
  /// draft engine together with prompt_lookup.
  // Defined after the class: Clang (14) does not instantiate Core<...>::create_cpu from a generic
  // lambda in a member function defined inside the class before Core, and the link fails with
  // "undefined reference to Session::Core<...>::create" (found by tests/fuzz/checkpoint_dir).
  static result<Session> create(std::shared_ptr<const Engine> engine,
                                const SessionOptions& options = {});

  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;

  /// Encodes `prompt` (GenerateOptions::add_special / parse_special) and generates after it.
  result<Generation> generate(std::string_view prompt, const GenerateOptions& options = {},
                              const TokenCallback& on_token = {}) {
    const model::Tokenizer* tok = engine_->tokenizer();
    if (tok == nullptr) return no_tokenizer();
    if (prompt.empty())
      return make_error(errc::invalid_argument, "Session::generate", "prompt: empty");
    auto ids = edgellm::detail::guard_exceptions("Session::generate", [&] {
      return tok->encode(prompt, {.add_special = options.add_special,
                                  .parse_special = options.parse_special});
    });
    if (!ids) return ids.error();
    return generate(std::span<const std::int32_t>(*ids), options, on_token);
  }

  /// Generates after the token ids `prompt` (decode::generate's loop). The cache keeps the
  /// longest common prefix of this prompt and what it holds. Errors: no tokenizer, an empty
  /// prompt, max_new_tokens == 0, a token id outside the vocabulary, a prompt longer than the
  /// context, memory that runs out (errc::out_of_memory; reset() before going on); a full
  /// context during generation is not an error (StopReason::context_full). An exception thrown
  /// by on_token is the caller's: it stops generation, as returning false does, and is rethrown.
  result<Generation> generate(std::span<const std::int32_t> prompt,
                              const GenerateOptions& options = {},
                              const TokenCallback& on_token = {}) {
    std::exception_ptr thrown_by_callback;
    auto r = edgellm::detail::guard_exceptions("Session::generate", [&]() -> result<Generation> {
      const model::Tokenizer* tok = engine_->tokenizer();
      if (tok == nullptr) return no_tokenizer();
      decode::GenerateOptions go;
      go.max_new_tokens = options.max_new_tokens;
      go.stop_strings = options.stop_strings;
      go.skip_special = options.skip_special;
      if (!options.ignore_eos)
        go.stop_ids.assign(engine_->eos_ids().begin(), engine_->eos_ids().end());
      go.stop_ids.insert(go.stop_ids.end(), options.stop_ids.begin(), options.stop_ids.end());
      Generation out;
      const auto on_text = [&](std::string_view piece) {
        if (!on_token) return true;
        try {
          return on_token(piece, out.tokens.empty() ? -1 : out.tokens.back());
        } catch (...) {
          thrown_by_callback = std::current_exception();
          return false;
        }
      };
      // The processor is this call's only: set for the run, cleared however it ends.
      sampler_.set_logits_processor(options.logits_processor);
      struct ClearProcessor {
        decode::Sampler& s;
        ~ClearProcessor() { s.set_logits_processor(nullptr); }
      } clear_processor{sampler_};
      auto stats = core_->run(sampler_, *tok, prompt, go, on_text, out.tokens);
      if (!stats) return stats.error();
      last_prompt_.assign(prompt.begin(), prompt.end());
      out.stats = *stats;
      totals_.generations += 1;
      totals_.prompt_tokens += stats->prompt_tokens;
      totals_.cached_tokens += stats->cached_tokens;
      totals_.new_tokens += stats->new_tokens;
      totals_.prefill_s += stats->prefill_s;
      totals_.decode_s += stats->decode_s;
      totals_.last = *stats;
      return out;
    });
    if (thrown_by_callback) std::rethrow_exception(thrown_by_callback);
    return r;
  }

  /// Forgets the conversation: the cache holds no tokens, the sampler restarts from its seed,
  /// the statistics are zero (the memory stays allocated).
  status reset() {
    auto sampler = decode::Sampler::create(options_.sampling);
    if (!sampler) return sampler.error();
    if (auto st = core_->reset(); !st) return st;
    sampler_ = std::move(*sampler);
    totals_ = {};
    last_prompt_.clear();
    return {};
  }

  /// New sampling settings for the next calls (the random stream restarts from their seed).
  status set_sampling(const decode::SamplingOptions& sampling) {
    auto sampler = decode::Sampler::create(sampling);
    if (!sampler) return sampler.error();
    sampler_ = std::move(*sampler);
    options_.sampling = sampling;
    return {};
  }

  /// Restores the KV state saved in `path` by save_prompt_cache() (decode/prompt_cache.hpp) and
  /// returns its tokens: the next generate() whose prompt starts with them forwards only the
  /// rest. Plain decoding only. Errors name the file; a state from another model, KV type or
  /// checkpoint is refused and the session is unchanged.
  result<std::vector<std::int32_t>> load_prompt_cache(const std::string& path) {
    using Tokens = result<std::vector<std::int32_t>>;
    return edgellm::detail::guard_exceptions("Session::load_prompt_cache", [&]() -> Tokens {
      constexpr std::string_view where = "Session::load_prompt_cache";
      if (options_.draft || options_.prompt_lookup) {
        return make_error(errc::unsupported, where,
                          "a prompt cache is not supported with speculative decoding");
      }
      auto c = decode::read_prompt_cache(path);
      if (!c) return c.error();
      if (auto st = core_->restore(*c); !st) {
        return make_error(st.error().code, where,
                          path + ": " + st.error().message + " (delete the file to rebuild it)");
      }
      return std::move(c->tokens);
    });
  }

  /// Writes the KV state after the latest generate() call's prompt to `path` (to a temporary
  /// file, then renamed). Errors: no generate() yet, I/O errors naming the file.
  status save_prompt_cache(const std::string& path) const {
    return edgellm::detail::guard_exceptions("Session::save_prompt_cache", [&]() -> status {
      if (last_prompt_.empty()) {
        return make_error(errc::invalid_argument, "Session::save_prompt_cache",
                          "no prompt yet (call generate() first)");
      }
      decode::PromptCache c;
      if (auto st = core_->save(last_prompt_, c); !st) return st;
      return decode::write_prompt_cache(path, c);
    });
  }

  const std::shared_ptr<const Engine>& engine() const noexcept { return engine_; }
  const SessionOptions& options() const noexcept { return options_; }
  cache::KvType kv_type() const noexcept { return options_.kv_type; }
  /// Tokens the cache holds.
  std::size_t position() const noexcept { return core_->position(); }
  std::size_t context_size() const noexcept { return core_->context_size(); }
  /// Bytes of this Session's model state (KV cache, scratch; on the device for a device
  /// Session), the shared weights excluded.
  std::size_t bytes() const noexcept { return core_->bytes(); }
  const SessionStats& stats() const noexcept { return totals_; }
  /// What the memory budget did (e.g. "context shrunk from 4096 to 1500 tokens ..."); empty
  /// when it changed nothing.
  const std::string& memory_note() const noexcept { return memory_note_; }
  /// Counters of the speculative decoder since creation or reset(); null without one.
  const decode::SpeculativeStats* speculative_stats() const noexcept {
    return core_->speculative_stats();
  }
  /// The compute backend the Session's model runs on: "cpu", or the device backend's name.
  const char* backend_name() const noexcept { return core_->backend_name(); }

  /// The options of the models a Session over `engine` with `options` builds: its pool (the
  /// app's, else the Engine's), max_batch, profile, and the context size (0: the model's
  /// maximum, at most 4096, capped at a sliding window).
  static model::TransformerOptions model_options(const Engine& engine, const SessionOptions& options) {
    model::TransformerOptions to;
    to.pool = options.pool != nullptr ? options.pool : engine.pool();
    to.max_batch = options.max_batch;
    to.context_size = context_size_for(engine.config(), options.context_size);
    to.profile = options.profile;
    return to;
  }

  /// The context size of a Session with SessionOptions::context_size `requested` over a model
  /// of config `cfg` (before a memory budget shrinks it): `requested`, or when 0 the model's
  /// maximum, at most 4096, capped at a sliding window. Needs config.json only, so an
  /// application can check a prompt's length before loading the weights.
  static std::size_t context_size_for(const model::ModelConfig& cfg, std::size_t requested) {
    if (requested != 0) return requested;
    std::size_t n = std::min<std::size_t>(cfg.max_position_embeddings, 4096);
    if (cfg.sliding_window) n = std::min(n, *cfg.sliding_window);
    return n;
  }

  /// A Session over models the caller built on another compute backend (a Vulkan device:
  /// session/vulkan.hpp): `target`, and `draft` when options.draft is set (the draft engine's
  /// weights on the same backend). Both must be empty (position() == 0). The Session keeps a
  /// reference to `owner` (what they run on: the device) and releases it after them; on error
  /// the models stay with the caller. The prompt cache works when the
  /// model can save its KV state (decode::PrefixModel). Errors: as create(), and models that
  /// hold tokens or disagree with the options.
  template <decode::Model Target>
  static result<Session> adopt(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                               Target&& target, std::optional<Target>&& draft,
                               const std::shared_ptr<const void>& owner, const char* backend_name);

 private:
  // The decoding state behind a Session, whichever model type it runs (a CPU cache type, a
  // device backend): one virtual call per generate(), not per token.
  struct CoreBase {
    using OnText = std::function<bool(std::string_view)>;
    virtual ~CoreBase() = default;
    virtual result<decode::GenerateStats> run(decode::Sampler& sampler, const model::Tokenizer& tok,
                                              std::span<const std::int32_t> prompt,
                                              const decode::GenerateOptions& go,
                                              const OnText& on_text,
                                              std::vector<std::int32_t>& emitted) = 0;
    virtual status reset() = 0;
    virtual status restore(const decode::PromptCache& c) = 0;
    virtual status save(std::span<const std::int32_t> tokens, decode::PromptCache& out) const = 0;
    virtual std::size_t position() const noexcept = 0;
    virtual std::size_t context_size() const noexcept = 0;
    virtual std::size_t bytes() const noexcept = 0;
    virtual const decode::SpeculativeStats* speculative_stats() const noexcept = 0;
    virtual const char* backend_name() const noexcept = 0;
  };

  // One model type's models and decoders. Heap-allocated: the decoders point to the models,
  // so their addresses must not change when the Session moves.
  template <decode::Model Target>
  struct Core final : CoreBase {
    using Plain = decode::PlainDecoder<Target>;
    using SpecModel = decode::SpeculativeDecoder<Target, Target>;
    using SpecLookup = decode::SpeculativeDecoder<Target, decode::LookupDraft>;

    std::shared_ptr<const void> owner;  // what the models run on (a device): released after them
    Target target;
    std::optional<Target> draft;
    std::optional<decode::LookupDraft> lookup;
    decode::SpeculativeOptions speculative;
    std::variant<std::monostate, Plain, SpecModel, SpecLookup> decoder;
    const char* backend = "cpu";

    Core(Target t, std::optional<Target> d, const decode::SpeculativeOptions& so, const char* b,
         std::shared_ptr<const void> o)
        : owner(std::move(o)), target(std::move(t)), draft(std::move(d)), speculative(so),
          backend(b) {}

    // The CPU models of `engine` (and of o.draft), Target a model::Transformer.
    static result<std::unique_ptr<CoreBase>> create_cpu(const Engine& engine,
                                                        const SessionOptions& o,
                                                        const model::TransformerOptions& to) {
      auto t = Target::create(engine.weights(), to);
      if (!t) return t.error();
      std::optional<Target> d;
      if (o.draft) {
        model::TransformerOptions draft_to = to;
        draft_to.profile = nullptr;  // SessionOptions::profile is the target's
        auto dm = Target::create(o.draft->weights(), draft_to);
        if (!dm) return dm.error();
        d.emplace(std::move(*dm));
      }
      return create(std::move(*t), std::move(d), o, "cpu");
    }

    static result<std::unique_ptr<CoreBase>> create(Target t, std::optional<Target> d,
                                                    const SessionOptions& o, const char* b,
                                                    std::shared_ptr<const void> owner = {}) {
      std::unique_ptr<Core> c(
          new Core(std::move(t), std::move(d), o.speculative, b, std::move(owner)));
      if (!c->draft && o.prompt_lookup) {
        auto l = decode::LookupDraft::create(c->target.vocab_size(), c->target.context_size());
        if (!l) return l.error();
        c->lookup.emplace(std::move(*l));
      }
      if (auto st = c->make_decoder({}); !st) return st.error();
      return std::unique_ptr<CoreBase>(std::move(c));
    }

    // A fresh decoder; `held`: the tokens the target holds (a restored prompt cache).
    status make_decoder(std::span<const std::int32_t> held) {
      const auto set = [&](auto&& d) -> status {
        if (!d) return d.error();
        decoder.template emplace<std::remove_cvref_t<decltype(*d)>>(std::move(*d));
        return {};
      };
      if (draft) return set(SpecModel::create(target, *draft, speculative));
      if (lookup) return set(SpecLookup::create(target, *lookup, speculative));
      return set(Plain::create(target, held));
    }

    result<decode::GenerateStats> run(decode::Sampler& sampler, const model::Tokenizer& tok,
                                      std::span<const std::int32_t> prompt,
                                      const decode::GenerateOptions& go, const OnText& on_text,
                                      std::vector<std::int32_t>& emitted) override {
      return std::visit(
          [&](auto& d) -> result<decode::GenerateStats> {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(d)>, std::monostate>) {
              return make_error(errc::invalid_argument, "Session::generate", "no decoder");
            } else {
              return decode::generate(d, sampler, tok, prompt, go, on_text, &emitted);
            }
          },
          decoder);
    }

    status reset() override {
      if (auto st = target.truncate(0); !st) return st;
      if (draft) {
        if (auto st = draft->truncate(0); !st) return st;
      }
      if (lookup) {
        if (auto st = lookup->truncate(0); !st) return st;
      }
      return make_decoder({});
    }

    status restore(const decode::PromptCache& c) override {
      if constexpr (decode::PrefixModel<Target>) {
        if (auto st = decode::restore_prompt_cache(target, c); !st) return st;
        return make_decoder(c.tokens);
      } else {
        return no_prefix();
      }
    }

    status save(std::span<const std::int32_t> tokens, decode::PromptCache& out) const override {
      if constexpr (decode::PrefixModel<Target>) {
        return decode::save_prompt_cache(target, tokens, out);
      } else {
        return no_prefix();
      }
    }

    status no_prefix() const {
      return make_error(errc::unsupported, "Session",
                        std::string("a prompt cache is not supported on the ") + backend +
                            " backend");
    }

    std::size_t position() const noexcept override { return target.position(); }
    std::size_t context_size() const noexcept override { return target.context_size(); }
    std::size_t bytes() const noexcept override { return target.bytes(); }
    const char* backend_name() const noexcept override { return backend; }

    const decode::SpeculativeStats* speculative_stats() const noexcept override {
      if (const auto* s = std::get_if<SpecModel>(&decoder)) return &s->stats();
      if (const auto* s = std::get_if<SpecLookup>(&decoder)) return &s->stats();
      return nullptr;
    }
  };

  Session(std::shared_ptr<const Engine> engine, const SessionOptions& options, decode::Sampler sampler)
      : engine_(std::move(engine)), options_(options), sampler_(std::move(sampler)) {}

  model::TransformerOptions transformer_options() const { return model_options(*engine_, options_); }

  // The plan of this Session's memory (plan_session) over the Engine's weights.
  SessionPlan session_plan(std::size_t context_size) const {
    const auto weights_plan = [](const Engine& e) {
      WeightsPlan w;
      w.dir = e.dir();
      w.config = e.config();
      const kernels::Linear& head = e.weights()->lm_head;
      w.lm_head = head.int4() ? "q4" : head.int8() ? "int8" : "as_stored";
      return w;
    };
    PlanOptions po;
    po.load = engine_->weights()->options;
    po.kv_type = options_.kv_type;
    po.context_size = context_size;
    po.max_batch = options_.max_batch;
    ThreadPool* pool = options_.pool != nullptr ? options_.pool : engine_->pool();
    po.threads = pool != nullptr ? pool->size() : 1;
    po.prompt_lookup = options_.prompt_lookup;
    po.draft_tokens = options_.speculative.adaptive ? options_.speculative.k_max
                                                    : options_.speculative.k;
    const WeightsPlan target = weights_plan(*engine_);
    if (!options_.draft) return plan_session(target, nullptr, po);
    const WeightsPlan draft = weights_plan(*options_.draft);
    return plan_session(target, &draft, po);
  }

  // Holds the session to options_.memory_budget: refuses, or shrinks options_.context_size.
  status fit_budget() {
    constexpr std::string_view where = "Session::create";
    auto budget = resolve_budget(options_.memory_budget);
    if (!budget) return budget.error();
    const std::size_t asked = transformer_options().context_size;
    const SessionPlan p = session_plan(asked);
    if (p.total_bytes() <= *budget) return {};
    if (options_.shrink_context_to_fit) {
      const std::size_t ctx = largest_context_where(
          asked, [&](std::size_t c) { return session_plan(c).total_bytes() <= *budget; });
      if (ctx > 0) {
        options_.context_size = ctx;
        memory_note_ = "context shrunk from " + std::to_string(asked) + " to " +
                       std::to_string(ctx) + " tokens to fit the budget of " + mib(*budget);
        return {};
      }
    }
    return make_error(errc::out_of_memory, where,
                      "needs " + mib(p.total_bytes()) + " (KV " + mib(p.kv_cache_bytes) + " for " +
                          std::to_string(asked) + " tokens " +
                          cache::kv_type_name(options_.kv_type) + ", scratch " +
                          mib(p.scratch_bytes()) + "), budget " + mib(*budget));
  }

  static error no_tokenizer() {
    return make_error(errc::invalid_argument, "Session::generate",
                      "the engine was loaded without a tokenizer (EngineOptions::load_tokenizer)");
  }

  std::shared_ptr<const Engine> engine_;
  SessionOptions options_;
  decode::Sampler sampler_;
  std::unique_ptr<CoreBase> core_;
  std::vector<std::int32_t> last_prompt_;  // the latest generate() call's prompt
  SessionStats totals_;
  std::string memory_note_;
};

/// The PlanOptions of Engine::load(dir, eo) followed by `sessions` Session::create(engine, so)
/// (so.pool's size, else eo.threads, sets the attention scratch; a draft engine is planned with
/// EngineOptions::draft_of(eo) from its directory).
inline PlanOptions plan_options(const EngineOptions& eo, const SessionOptions& so,
                                std::size_t sessions = 1) {
  PlanOptions po;
  po.load = eo.load;
  po.lm_head_fallback = eo.lm_head_fallback;
  po.load_tokenizer = eo.load_tokenizer;
  po.threads = so.pool != nullptr ? so.pool->size() : std::max<std::size_t>(eo.threads, 1);
  po.kv_type = so.kv_type;
  po.context_size = so.context_size;
  po.max_batch = so.max_batch;
  po.sessions = sessions;
  if (so.draft) {
    po.draft_dir = so.draft->dir();
    po.draft_load = so.draft->options().load;
  }
  po.prompt_lookup = so.prompt_lookup;
  po.draft_tokens = so.speculative.adaptive ? so.speculative.k_max : so.speculative.k;
  return po;
}

/// Will Engine::load(dir, eo) and `sessions` Session::create(engine, so) fit? The plan
/// (plan.hpp) from config.json and the safetensors headers, before anything is loaded.
inline result<MemoryPlan> plan_memory(const std::string& dir, const EngineOptions& eo,
                                      const SessionOptions& so, std::size_t sessions = 1) {
  return plan_memory(dir, plan_options(eo, so, sessions));
}


inline result<Session> Session::create(std::shared_ptr<const Engine> engine,
                                       const SessionOptions& options) {
  return edgellm::detail::guard_exceptions("Session::create", [&]() -> result<Session> {
    constexpr std::string_view where = "Session::create";
    if (!engine) return make_error(errc::invalid_argument, where, "engine: null");
    if (options.draft && options.prompt_lookup) {
      return make_error(errc::invalid_argument, where,
                        "draft and prompt_lookup: choose one way of drafting");
    }
    auto sampler = decode::Sampler::create(options.sampling);
    if (!sampler) return sampler.error();
    Session s(std::move(engine), options, std::move(*sampler));
    if (options.memory_budget.enabled()) {
      if (auto st = s.fit_budget(); !st) return st.error();
    }
    const auto build = [&](auto tag) -> status {
      using Cache = typename decltype(tag)::type;
      auto core = Core<model::Transformer<Cache>>::create_cpu(*s.engine_, options,
                                                              s.transformer_options());
      if (!core) return core.error();
      s.core_ = std::move(*core);
      return {};
    };
    if (auto st = cache::with_kv_type(options.kv_type, build); !st) return st.error();
    return s;
  });
}

template <decode::Model Target>
result<Session> Session::adopt(std::shared_ptr<const Engine> engine, const SessionOptions& options,
                               Target&& target, std::optional<Target>&& draft,
                               const std::shared_ptr<const void>& owner, const char* backend_name) {
  return edgellm::detail::guard_exceptions("Session::adopt", [&]() -> result<Session> {
    constexpr std::string_view where = "Session::adopt";
    if (!engine) return make_error(errc::invalid_argument, where, "engine: null");
    if (options.draft && options.prompt_lookup) {
      return make_error(errc::invalid_argument, where,
                        "draft and prompt_lookup: choose one way of drafting");
    }
    if (options.draft.operator bool() != draft.has_value()) {
      return make_error(errc::invalid_argument, where,
                        options.draft ? "draft: options.draft is set but no draft model is given"
                                      : "draft: a draft model is given without options.draft");
    }
    if (target.position() != 0 || (draft && draft->position() != 0)) {
      return make_error(errc::invalid_argument, where, "target, draft: must hold no tokens");
    }
    if (target.vocab_size() != engine->config().vocab_size) {
      return make_error(errc::shape_mismatch, where,
                        "target: vocab_size " + std::to_string(target.vocab_size()) +
                            " but the engine's model has " +
                            std::to_string(engine->config().vocab_size));
    }
    auto sampler = decode::Sampler::create(options.sampling);
    if (!sampler) return sampler.error();
    Session s(std::move(engine), options, std::move(*sampler));
    auto core = Core<Target>::create(std::move(target), std::move(draft), options, backend_name,
                                     owner);
    if (!core) return core.error();
    s.core_ = std::move(*core);
    return s;
  });
}

}  // namespace edgellm

// SPDX-License-Identifier: Apache-2.0
// The C API (include/edgellm/c/edgellm.h) over the session facade: handles that own a
// shared_ptr<const Engine> or a Session, argument checks whose messages name the argument, and a
// try/catch around every entry point so that no C++ exception crosses the ABI.
//
// The last error is one thread_local string per thread (errno-like: a failed call sets it, a
// successful call leaves it as it was), so threads never see each other's messages and nothing
// here is shared mutable state.
#include "edgellm/c/edgellm.h"

#include "edgellm/config.hpp"
#include "edgellm/constrain/constraint.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/result.hpp"
#include "edgellm/session.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace edgellm::c_api {
extern const char* const git_sha;  // bindings/c/git_sha.cpp: configure-time, else "unknown"

// The vocabulary index that constrained decoding walks (constrain::TokenTrie), built once per
// model on the first edgellm_session_set_constraint() over it and shared by the model handle and
// its sessions (a session may outlive the model handle). Building takes ~100 ms on a 150k
// vocabulary: under the lock, so that concurrent first uses build it once.
class Vocabulary {
 public:
  result<std::shared_ptr<const constrain::TokenTrie>> trie(const Engine& engine) {
    std::lock_guard lock(mu_);
    if (trie_) return trie_;
    const model::Tokenizer* tok = engine.tokenizer();
    if (tok == nullptr)
      return make_error(errc::invalid_argument, "vocabulary", "the model has no tokenizer");
    auto t = constrain::TokenTrie::build(*tok, engine.config().vocab_size);
    if (!t) return t.error();
    trie_ = std::move(*t);
    return trie_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<const constrain::TokenTrie> trie_;
};
}  // namespace edgellm::c_api

struct edgellm_model {
  std::shared_ptr<const edgellm::Engine> engine;
  std::shared_ptr<edgellm::c_api::Vocabulary> vocabulary =
      std::make_shared<edgellm::c_api::Vocabulary>();
};

// Immutable once compiled; sessions hold their own references.
struct edgellm_constraint {
  std::shared_ptr<const edgellm::constrain::Constraint> constraint;
};

// The engine is held here as well as inside the Session, so that the model's memory outlives the
// session whatever order the app frees them in.
struct edgellm_session {
  // Who holds the session (SessionClaim): calls on a session do not nest (a token callback that
  // calls back into its session) or overlap (two threads).
  enum : int { idle = 0, in_call = 1, free_after_call = 2 };

  // How the latest generate call went under a constraint (edgellm_session_constraint_result).
  enum class Outcome : std::uint8_t { none, incomplete, complete };

  std::shared_ptr<const edgellm::Engine> engine;
  edgellm::Session session;
  mutable std::atomic<int> use{idle};
  mutable std::atomic<const char*> holder{nullptr};  // the running call's name, for messages
  // Constrained decoding (edgellm_session_set_constraint): the model's vocabulary index, the
  // constraint every generate call starts (null: free text), and the latest call's outcome.
  // Read and written under a SessionClaim.
  std::shared_ptr<edgellm::c_api::Vocabulary> vocabulary;
  std::shared_ptr<const edgellm::constrain::Constraint> constraint{};
  std::shared_ptr<const edgellm::constrain::TokenTrie> trie{};
  Outcome outcome = Outcome::none;
  bool forced = false;
};

namespace {

using edgellm::errc;

// ---- the last error ---------------------------------------------------------------------------

struct LastError {
  std::string text;
  const char* fixed = nullptr;  // used when `text` could not be allocated
};

thread_local LastError t_last_error;

void set_last_error(std::string_view message) noexcept {
  try {
    t_last_error.text.assign(message);
    t_last_error.fixed = nullptr;
  } catch (...) {
    t_last_error.fixed = "out of memory (while recording an error message)";
  }
}

edgellm_status fail(edgellm_status code, std::string_view message) noexcept {
  set_last_error(message);
  return code;
}

// "[where] what detail", as edgellm::make_error words it.
edgellm_status fail(edgellm_status code, std::string_view where, std::string_view what,
                    std::string_view detail = {}) noexcept {
  try {
    std::string m;
    m.reserve(where.size() + what.size() + detail.size() + 3);
    m += '[';
    m += where;
    m += "] ";
    m += what;
    m += detail;
    return fail(code, m);
  } catch (...) {
    return fail(code, "out of memory (while building an error message)");
  }
}

edgellm_status invalid(std::string_view where, std::string_view what) noexcept {
  return fail(EDGELLM_ERR_INVALID_ARGUMENT, where, what);
}

// The one place where library error codes become C status codes.
edgellm_status to_status(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: return EDGELLM_ERR_INVALID_ARGUMENT;
    case errc::shape_mismatch: return EDGELLM_ERR_SHAPE_MISMATCH;
    case errc::io_error: return EDGELLM_ERR_IO;
    case errc::format_error: return EDGELLM_ERR_FORMAT;
    case errc::unsupported: return EDGELLM_ERR_UNSUPPORTED;
    case errc::out_of_range: return EDGELLM_ERR_OUT_OF_RANGE;
    case errc::capacity_exceeded: return EDGELLM_ERR_CAPACITY;
    case errc::out_of_memory: return EDGELLM_ERR_OUT_OF_MEMORY;
    case errc::internal: return EDGELLM_ERR_INTERNAL;
  }
  return EDGELLM_ERR_INTERNAL;
}

// The integer a C caller stored in an enum: C allows any int there, while C++ may assume an enum
// holds only its enumerators' range (reading another value is undefined behaviour), so the
// bytes are read as the underlying type.
template <class Enum>
std::int64_t enum_value(const Enum& e) noexcept {
  std::underlying_type_t<Enum> v;
  static_assert(sizeof v == sizeof e);
  std::memcpy(&v, &e, sizeof v);
  return static_cast<std::int32_t>(v);
}

edgellm_status fail(const edgellm::error& e) noexcept { return fail(to_status(e.code), e.message); }

// Runs `body` (which returns an edgellm_status) with every exception turned into a status.
template <class Body>
edgellm_status guarded(std::string_view where, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(EDGELLM_ERR_OUT_OF_MEMORY, where, "out of memory (an allocation failed)");
  } catch (const std::exception& e) {
    return fail(EDGELLM_ERR_INTERNAL, where, "internal error: ", e.what());
  } catch (...) {
    return fail(EDGELLM_ERR_INTERNAL, where, "internal error: an unknown exception");
  }
}

// ---- one call at a time on a session ----------------------------------------------------------

// Holds `session` for one call. A call that finds it held (re-entered from its own token
// callback, where it would mix the running generation's state, or from another thread) gets
// EDGELLM_ERR_BUSY and changes nothing. edgellm_session_free() on a held session only marks it;
// the claim frees it when the call that holds it returns.
class SessionClaim {
 public:
  SessionClaim(const edgellm_session* session, std::string_view where) noexcept
      : session_(session) {
    int expected = edgellm_session::idle;
    held_ = session->use.compare_exchange_strong(expected, edgellm_session::in_call,
                                                 std::memory_order_acquire);
    if (held_) session->holder.store(where.data(), std::memory_order_relaxed);
  }
  SessionClaim(const SessionClaim&) = delete;
  SessionClaim& operator=(const SessionClaim&) = delete;
  ~SessionClaim() {
    if (!held_) return;
    session_->holder.store(nullptr, std::memory_order_relaxed);
    if (session_->use.exchange(edgellm_session::idle, std::memory_order_acq_rel) ==
        edgellm_session::free_after_call)
      delete session_;
  }

  bool held() const noexcept { return held_; }

  edgellm_status busy(std::string_view where) const noexcept {
    const char* holder = session_->holder.load(std::memory_order_relaxed);
    try {
      return fail(EDGELLM_ERR_BUSY, where,
                  "session: busy in " + std::string(holder != nullptr ? holder : "another call") +
                      " (called from its token callback, or from another thread while it runs);"
                      " nothing was changed");
    } catch (...) {
      return fail(EDGELLM_ERR_BUSY, "session: busy in another call; nothing was changed");
    }
  }

 private:
  const edgellm_session* session_;
  bool held_ = false;
};

// ---- the memory plan -------------------------------------------------------------------------

// A context past the positions the model was trained for is refused: SessionOptions has no
// switch that allows it (the CLI's --force-context is the CLI's own), so neither has the C API.
// `name`: how the caller's options are called in messages.
edgellm_status check_context_size(std::string_view where, const std::string& name,
                                  std::size_t context_size, std::size_t max_position) {
  if (max_position == 0 || context_size <= max_position) return EDGELLM_OK;
  return invalid(where, name + "->context_size: " + std::to_string(context_size) +
                            " is above the model's max_position_embeddings " +
                            std::to_string(max_position) + " (positions it was not trained for)");
}

edgellm_memory_plan to_c(const edgellm::MemoryPlan& plan) noexcept {
  edgellm_memory_plan out{};
  out.weights_mapped_bytes = plan.weights.files_bytes + (plan.has_draft ? plan.draft.files_bytes : 0);
  out.weights_resident_bytes =
      plan.weights.resident_bytes() + (plan.has_draft ? plan.draft.resident_bytes() : 0);
  out.kv_cache_bytes = plan.session.kv_cache_bytes;
  out.scratch_bytes = plan.session.scratch_bytes();
  out.load_peak_bytes = plan.engine_peak_bytes();
  out.peak_bytes = plan.peak_bytes();
  out.context_size = static_cast<uint32_t>(plan.session.context_size);
  return out;
}

// The memory plan (edgellm::plan_memory, edgellm/plan.hpp) in the C struct: edgellm_plan()
// returns it, and edgellm_model_load() with memory_budget_bytes != 0 refuses with
// EDGELLM_ERR_OUT_OF_MEMORY when its peak exceeds the budget. `so_name` as in check_context_size.
edgellm_status make_memory_plan(std::string_view where, const std::string& so_name,
                                const char* model_dir, const edgellm::EngineOptions& eo,
                                const edgellm::SessionOptions& so, edgellm_memory_plan* out) {
  *out = edgellm_memory_plan{};
  auto plan = edgellm::plan_memory(model_dir, eo, so);
  if (!plan) return fail(plan.error());
  if (auto st = check_context_size(where, so_name, so.context_size,
                                   plan->weights.config.max_position_embeddings);
      st != EDGELLM_OK)
    return st;
  *out = to_c(*plan);
  return EDGELLM_OK;
}

// ---- options ----------------------------------------------------------------------------------

// `name`: how the caller's argument is called in messages ("options", "model_options").
edgellm_status to_engine_options(std::string_view where, const std::string& name,
                                 const edgellm_model_options& o, edgellm::EngineOptions& eo) {
  if (o.threads < 0)
    return invalid(where, name + "->threads: " + std::to_string(o.threads) + " is negative");
  if (o.backend != nullptr && std::string_view(o.backend) != "cpu") {
    return fail(EDGELLM_ERR_UNSUPPORTED, where,
                name + "->backend: '" + std::string(o.backend) +
                    "' is not built into this library (available: cpu)");
  }
  if (o.lm_head == nullptr || std::string_view(o.lm_head) == "stored") {
    eo.load.lm_head = edgellm::model::LmHeadFormat::as_stored;
  } else if (std::string_view(o.lm_head) == "q4") {
    eo.load.lm_head = edgellm::model::LmHeadFormat::q4;
    eo.lm_head_fallback = true;
  } else if (std::string_view(o.lm_head) == "int8") {
    eo.load.lm_head = edgellm::model::LmHeadFormat::int8;
    eo.lm_head_fallback = true;
  } else {
    return invalid(where, name + "->lm_head: '" + std::string(o.lm_head) +
                              "' is not one of NULL, \"stored\", \"int8\", \"q4\"");
  }
  if (o.packed_cache != nullptr) eo.load.packed_cache = o.packed_cache;
  eo.load_tokenizer = o.load_tokenizer != 0;
  eo.threads = o.threads > 1 ? static_cast<std::size_t>(o.threads) : 1;
  return EDGELLM_OK;
}

edgellm_status to_sampling(std::string_view where, std::string_view name, const edgellm_sampling& s,
                           edgellm::decode::SamplingOptions& out) {
  if (s.top_k < 0)
    return invalid(where, std::string(name) + ".top_k: " + std::to_string(s.top_k) + " is negative");
  if (s.penalty_last_n < 0) {
    return invalid(where, std::string(name) + ".penalty_last_n: " + std::to_string(s.penalty_last_n) +
                              " is negative");
  }
  out.temperature = s.temperature;
  out.top_k = static_cast<std::size_t>(s.top_k);
  out.top_p = s.top_p;
  out.min_p = s.min_p;
  out.repetition_penalty = s.repetition_penalty;
  out.penalty_last_n = static_cast<std::size_t>(s.penalty_last_n);
  out.seed = s.seed;
  // The float ranges are checked by the sampler; its messages name the field.
  if (auto st = edgellm::decode::validate(out); !st)
    return fail(EDGELLM_ERR_INVALID_ARGUMENT, where, std::string(name) + ": " + st.error().message);
  return EDGELLM_OK;
}

edgellm_status to_session_options(std::string_view where, const std::string& name,
                                  const edgellm_session_options& o, edgellm::SessionOptions& so) {
  switch (enum_value(o.kv_type)) {
    case EDGELLM_KV_INT8: so.kv_type = edgellm::cache::KvType::int8; break;
    case EDGELLM_KV_F16: so.kv_type = edgellm::cache::KvType::f16; break;
    case EDGELLM_KV_F32: so.kv_type = edgellm::cache::KvType::f32; break;
    case EDGELLM_KV_INT4: so.kv_type = edgellm::cache::KvType::int4; break;
    default:
      return invalid(where, name + "->kv_type: " + std::to_string(enum_value(o.kv_type)) +
                                " is not an edgellm_kv_type (EDGELLM_KV_INT8, _F16, _F32, _INT4)");
  }
  so.context_size = o.context_size;
  so.max_batch = o.max_batch != 0 ? o.max_batch : 64;
  if (auto st = to_sampling(where, name + "->sampling", o.sampling, so.sampling); st != EDGELLM_OK)
    return st;
  if (o.draft != nullptr && o.prompt_lookup != 0) {
    return invalid(where, name + "->draft and " + name + "->prompt_lookup: choose one way of drafting");
  }
  if (o.draft != nullptr) so.draft = o.draft->engine;
  so.prompt_lookup = o.prompt_lookup != 0;
  if (o.draft_tokens > edgellm::decode::SpeculativeOptions::kMaxDraft) {
    return invalid(where, name + "->draft_tokens: " + std::to_string(o.draft_tokens) +
                              " is more than " +
                              std::to_string(edgellm::decode::SpeculativeOptions::kMaxDraft));
  }
  if (o.draft_tokens != 0) so.speculative.k = o.draft_tokens;
  return EDGELLM_OK;
}

edgellm_status to_generate_options(std::string_view where, const edgellm_generate_options& o,
                                   edgellm::GenerateOptions& go) {
  if (o.max_new_tokens == 0) return invalid(where, "options->max_new_tokens: 0 (must be > 0)");
  if (o.n_stop_strings > 0 && o.stop_strings == nullptr) {
    return invalid(where, "options->stop_strings: NULL with n_stop_strings = " +
                              std::to_string(o.n_stop_strings));
  }
  for (std::size_t i = 0; i < o.n_stop_strings; ++i) {
    const std::string name = "options->stop_strings[" + std::to_string(i) + "]";
    if (o.stop_strings[i] == nullptr) return invalid(where, name + ": NULL");
    if (o.stop_strings[i][0] == '\0') return invalid(where, name + ": empty");
    go.stop_strings.emplace_back(o.stop_strings[i]);
  }
  go.max_new_tokens = o.max_new_tokens;
  go.ignore_eos = o.ignore_eos != 0;
  go.add_special = o.add_special != 0;
  go.parse_special = o.parse_special != 0;
  return EDGELLM_OK;
}

edgellm_stop_reason to_c(edgellm::decode::StopReason r) noexcept {
  using edgellm::decode::StopReason;
  switch (r) {
    case StopReason::eos: return EDGELLM_STOP_EOS;
    case StopReason::stop_string: return EDGELLM_STOP_STRING;
    case StopReason::max_tokens: return EDGELLM_STOP_MAX_TOKENS;
    case StopReason::context_full: return EDGELLM_STOP_CONTEXT_FULL;
    case StopReason::callback: return EDGELLM_STOP_CALLBACK;
  }
  return EDGELLM_STOP_MAX_TOKENS;
}

// Token ids must index the model's vocabulary; the message names the array and the index.
edgellm_status check_ids(std::string_view where, std::string_view name, const edgellm::Engine& e,
                         const std::int32_t* ids, std::size_t n) {
  const std::size_t vocab = e.config().vocab_size;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab) {
      return fail(EDGELLM_ERR_OUT_OF_RANGE, where,
                  std::string(name) + "[" + std::to_string(i) + "]: " + std::to_string(ids[i]) +
                      " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return EDGELLM_OK;
}

const edgellm::model::Tokenizer* tokenizer_of(const edgellm_model* model) noexcept {
  return model->engine->tokenizer();
}

edgellm_status no_tokenizer(std::string_view where) noexcept {
  return invalid(where, "model: loaded without a tokenizer (edgellm_model_options.load_tokenizer = 0)");
}

std::string make_build_info() {
  std::string s = "edgellm " + std::to_string(EDGELLM_VERSION_MAJOR) + "." +
                  std::to_string(EDGELLM_VERSION_MINOR) + "." +
                  std::to_string(EDGELLM_VERSION_PATCH);
  s += " git ";
  s += edgellm::c_api::git_sha;
#if defined(__clang__)
  s += " clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." +
       std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
  s += " gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
       std::to_string(__GNUC_PATCHLEVEL__);
#else
  s += " compiler unknown";
#endif
#if defined(__x86_64__) || defined(_M_X64)
  s += " arch x86_64";
#elif defined(__aarch64__) || defined(_M_ARM64)
  s += " arch aarch64";
#elif defined(__arm__)
  s += " arch arm";
#else
  s += " arch unknown";
#endif
  s += " int4 ";
  s += edgellm::kernels::isa_name(edgellm::kernels::best_isa());
  return s;
}

}  // namespace

// ---- status and errors ------------------------------------------------------------------------

extern "C" const char* edgellm_last_error(void) {
  return t_last_error.fixed != nullptr ? t_last_error.fixed : t_last_error.text.c_str();
}

extern "C" const char* edgellm_status_string(edgellm_status status) {
  switch (enum_value(status)) {
    case EDGELLM_OK: return "ok";
    case EDGELLM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case EDGELLM_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case EDGELLM_ERR_IO: return "I/O error";
    case EDGELLM_ERR_FORMAT: return "format error";
    case EDGELLM_ERR_UNSUPPORTED: return "unsupported";
    case EDGELLM_ERR_OUT_OF_RANGE: return "out of range";
    case EDGELLM_ERR_CAPACITY: return "capacity exceeded";
    case EDGELLM_ERR_OUT_OF_MEMORY: return "out of memory";
    case EDGELLM_ERR_INTERNAL: return "internal error";
    case EDGELLM_ERR_BUSY: return "session busy";
  }
  return "unknown status";
}

// ---- version and build ------------------------------------------------------------------------

#define EDGELLM_C_STR2(x) #x
#define EDGELLM_C_STR(x) EDGELLM_C_STR2(x)

extern "C" const char* edgellm_version(void) {
  return EDGELLM_C_STR(EDGELLM_VERSION_MAJOR) "." EDGELLM_C_STR(EDGELLM_VERSION_MINOR) "." EDGELLM_C_STR(
      EDGELLM_VERSION_PATCH);
}

extern "C" const char* edgellm_build_info(void) {
  try {
    // Immutable once built (a function-local static is initialised once, thread-safely).
    static const std::string info = make_build_info();
    return info.c_str();
  } catch (...) {
    return "edgellm " EDGELLM_C_STR(EDGELLM_VERSION_MAJOR) "." EDGELLM_C_STR(
        EDGELLM_VERSION_MINOR) "." EDGELLM_C_STR(EDGELLM_VERSION_PATCH);
  }
}

// ---- model ------------------------------------------------------------------------------------

extern "C" edgellm_model_options edgellm_model_options_default(void) {
  edgellm_model_options o;
  o.threads = 1;
  o.backend = nullptr;
  o.lm_head = nullptr;
  o.packed_cache = nullptr;
  o.load_tokenizer = 1;
  o.memory_budget_bytes = 0;
  return o;
}

extern "C" edgellm_status edgellm_model_load(const char* model_dir,
                                             const edgellm_model_options* options,
                                             edgellm_model** out_model) {
  constexpr std::string_view where = "edgellm_model_load";
  return guarded(where, [&]() -> edgellm_status {
    if (out_model == nullptr) return invalid(where, "out_model: NULL");
    *out_model = nullptr;
    if (model_dir == nullptr) return invalid(where, "model_dir: NULL");
    if (model_dir[0] == '\0') return invalid(where, "model_dir: empty");
    const edgellm_model_options o = options != nullptr ? *options : edgellm_model_options_default();
    edgellm::EngineOptions eo;
    if (auto st = to_engine_options(where, "options", o, eo); st != EDGELLM_OK) return st;
    if (o.memory_budget_bytes != 0) {
      edgellm::SessionOptions so;
      if (auto st = to_session_options(where, "the default session options",
                                       edgellm_session_options_default(), so);
          st != EDGELLM_OK)
        return st;
      edgellm_memory_plan plan;
      if (auto st = make_memory_plan(where, "the default session options", model_dir, eo, so,
                                     &plan);
          st != EDGELLM_OK)
        return st;
      if (plan.peak_bytes > o.memory_budget_bytes) {
        return fail(EDGELLM_ERR_OUT_OF_MEMORY, where,
                    "options->memory_budget_bytes: " + std::to_string(o.memory_budget_bytes) +
                        " is less than the plan's peak of " + std::to_string(plan.peak_bytes) +
                        " bytes (weights " + std::to_string(plan.weights_resident_bytes) +
                        ", KV cache " + std::to_string(plan.kv_cache_bytes) + " at " +
                        std::to_string(plan.context_size) + " tokens, scratch " +
                        std::to_string(plan.scratch_bytes) + "); nothing was loaded");
      }
    }
    auto engine = edgellm::Engine::load(model_dir, eo);
    if (!engine) return fail(engine.error());
    *out_model = new edgellm_model{std::move(*engine)};
    return EDGELLM_OK;
  });
}

extern "C" void edgellm_model_free(edgellm_model* model) { delete model; }

extern "C" size_t edgellm_model_vocab_size(const edgellm_model* model) {
  return model != nullptr ? model->engine->config().vocab_size : 0;
}

extern "C" size_t edgellm_model_max_context(const edgellm_model* model) {
  return model != nullptr ? model->engine->config().max_position_embeddings : 0;
}

// ---- tokenizer --------------------------------------------------------------------------------

extern "C" edgellm_status edgellm_tokenize(const edgellm_model* model, const char* text,
                                           size_t text_len, int32_t add_special,
                                           int32_t parse_special, int32_t* out_ids,
                                           size_t capacity, size_t* out_count) {
  constexpr std::string_view where = "edgellm_tokenize";
  return guarded(where, [&]() -> edgellm_status {
    if (out_count == nullptr) return invalid(where, "out_count: NULL");
    *out_count = 0;
    if (model == nullptr) return invalid(where, "model: NULL");
    if (text == nullptr && text_len > 0)
      return invalid(where, "text: NULL with text_len = " + std::to_string(text_len));
    if (out_ids == nullptr && capacity > 0)
      return invalid(where, "out_ids: NULL with capacity = " + std::to_string(capacity));
    const edgellm::model::Tokenizer* tok = tokenizer_of(model);
    if (tok == nullptr) return no_tokenizer(where);
    auto ids = tok->encode(std::string_view(text != nullptr ? text : "", text_len),
                           {.add_special = add_special != 0, .parse_special = parse_special != 0});
    if (!ids) return fail(ids.error());
    *out_count = ids->size();
    const std::size_t n = std::min(ids->size(), capacity);
    if (n > 0) std::memcpy(out_ids, ids->data(), n * sizeof(std::int32_t));
    if (ids->size() > capacity) {
      return fail(EDGELLM_ERR_CAPACITY, where,
                  "out_ids: capacity " + std::to_string(capacity) + " is less than the " +
                      std::to_string(ids->size()) + " ids of the text (*out_count)");
    }
    return EDGELLM_OK;
  });
}

extern "C" edgellm_status edgellm_detokenize(const edgellm_model* model, const int32_t* ids,
                                             size_t n_ids, int32_t skip_special, char* out,
                                             size_t capacity, size_t* out_len) {
  constexpr std::string_view where = "edgellm_detokenize";
  return guarded(where, [&]() -> edgellm_status {
    if (out_len == nullptr) return invalid(where, "out_len: NULL");
    *out_len = 0;
    if (out != nullptr && capacity > 0) out[0] = '\0';
    if (model == nullptr) return invalid(where, "model: NULL");
    if (ids == nullptr && n_ids > 0)
      return invalid(where, "ids: NULL with n_ids = " + std::to_string(n_ids));
    if (out == nullptr && capacity > 0)
      return invalid(where, "out: NULL with capacity = " + std::to_string(capacity));
    const edgellm::model::Tokenizer* tok = tokenizer_of(model);
    if (tok == nullptr) return no_tokenizer(where);
    if (auto st = check_ids(where, "ids", *model->engine, ids, n_ids); st != EDGELLM_OK) return st;
    const std::string text =
        n_ids > 0 ? tok->decode(std::span<const std::int32_t>(ids, n_ids), skip_special != 0)
                  : std::string();
    *out_len = text.size();
    if (capacity > 0) {
      const std::size_t n = std::min(text.size(), capacity - 1);
      std::memcpy(out, text.data(), n);
      out[n] = '\0';
    }
    if (text.size() + 1 > capacity) {
      return fail(EDGELLM_ERR_CAPACITY, where,
                  "out: capacity " + std::to_string(capacity) + " is less than the " +
                      std::to_string(text.size() + 1) +
                      " bytes of the text and its NUL (*out_len + 1)");
    }
    return EDGELLM_OK;
  });
}

// ---- session ----------------------------------------------------------------------------------

extern "C" edgellm_sampling edgellm_sampling_default(void) {
  const edgellm::decode::SamplingOptions d{};
  edgellm_sampling s;
  s.temperature = d.temperature;
  s.top_k = static_cast<int32_t>(d.top_k);
  s.top_p = d.top_p;
  s.min_p = d.min_p;
  s.repetition_penalty = d.repetition_penalty;
  s.penalty_last_n = static_cast<int32_t>(d.penalty_last_n);
  s.seed = d.seed;
  return s;
}

extern "C" edgellm_sampling edgellm_sampling_greedy(void) {
  edgellm_sampling s = edgellm_sampling_default();
  s.temperature = 0.0f;
  return s;
}

extern "C" edgellm_session_options edgellm_session_options_default(void) {
  edgellm_session_options o;
  o.kv_type = EDGELLM_KV_INT8;
  o.context_size = 0;
  o.max_batch = 0;
  o.sampling = edgellm_sampling_default();
  o.draft = nullptr;
  o.prompt_lookup = 0;
  o.draft_tokens = 0;
  return o;
}

extern "C" edgellm_status edgellm_session_create(const edgellm_model* model,
                                                 const edgellm_session_options* options,
                                                 edgellm_session** out_session) {
  constexpr std::string_view where = "edgellm_session_create";
  return guarded(where, [&]() -> edgellm_status {
    if (out_session == nullptr) return invalid(where, "out_session: NULL");
    *out_session = nullptr;
    if (model == nullptr) return invalid(where, "model: NULL");
    const edgellm_session_options o =
        options != nullptr ? *options : edgellm_session_options_default();
    edgellm::SessionOptions so;
    if (auto st = to_session_options(where, "options", o, so); st != EDGELLM_OK) return st;
    if (auto st = check_context_size(where, "options", so.context_size,
                                     model->engine->config().max_position_embeddings);
        st != EDGELLM_OK)
      return st;
    auto s = edgellm::Session::create(model->engine, so);
    if (!s) return fail(s.error());
    *out_session = new edgellm_session{
        .engine = model->engine, .session = std::move(*s), .vocabulary = model->vocabulary};
    return EDGELLM_OK;
  });
}

extern "C" void edgellm_session_free(edgellm_session* session) {
  if (session == nullptr) return;
  int state = edgellm_session::idle;
  for (;;) {
    if (session->use.compare_exchange_weak(state, edgellm_session::free_after_call,
                                           std::memory_order_acq_rel)) {
      if (state == edgellm_session::idle) {
        delete session;
      } else {
        // From the token callback: freeing now would pull the session from under the running
        // call. Its SessionClaim frees it when it returns.
        const char* holder = session->holder.load(std::memory_order_relaxed);
        try {
          set_last_error(std::string("[edgellm_session_free] session: busy in ") +
                         (holder != nullptr ? holder : "another call") +
                         "; generation stops and the session is freed when that call returns");
        } catch (...) {
          set_last_error("[edgellm_session_free] session: busy; freed when its call returns");
        }
      }
      return;
    }
    if (state == edgellm_session::free_after_call) {
      set_last_error("[edgellm_session_free] session: already freed (its free is deferred "
                     "until the running call returns); ignored");
      return;
    }
    // `state` now holds the value seen: in_call (mark it) or idle (free it); try again.
  }
}

extern "C" edgellm_status edgellm_session_reset(edgellm_session* session) {
  constexpr std::string_view where = "edgellm_session_reset";
  return guarded(where, [&]() -> edgellm_status {
    if (session == nullptr) return invalid(where, "session: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    session->outcome = edgellm_session::Outcome::none;
    session->forced = false;
    if (auto st = session->session.reset(); !st) return fail(st.error());
    return EDGELLM_OK;
  });
}

extern "C" edgellm_status edgellm_session_set_sampling(edgellm_session* session,
                                                       const edgellm_sampling* sampling) {
  constexpr std::string_view where = "edgellm_session_set_sampling";
  return guarded(where, [&]() -> edgellm_status {
    if (session == nullptr) return invalid(where, "session: NULL");
    if (sampling == nullptr) return invalid(where, "sampling: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    edgellm::decode::SamplingOptions so;
    if (auto st = to_sampling(where, "sampling", *sampling, so); st != EDGELLM_OK) return st;
    if (auto st = session->session.set_sampling(so); !st) return fail(st.error());
    return EDGELLM_OK;
  });
}

extern "C" size_t edgellm_session_position(const edgellm_session* session) {
  return session != nullptr ? session->session.position() : 0;
}

extern "C" size_t edgellm_session_context_size(const edgellm_session* session) {
  return session != nullptr ? session->session.context_size() : 0;
}

// ---- generation -------------------------------------------------------------------------------

extern "C" edgellm_generate_options edgellm_generate_options_default(void) {
  edgellm_generate_options o;
  o.max_new_tokens = 256;
  o.stop_strings = nullptr;
  o.n_stop_strings = 0;
  o.ignore_eos = 0;
  o.add_special = 1;
  o.parse_special = 0;
  return o;
}

namespace {

// The body of both generate entry points once the prompt is checked: `prompt` is a
// std::string_view (text) or a std::span<const std::int32_t> (ids).
template <class Prompt>
edgellm_status run_generate(std::string_view where, edgellm_session* session, Prompt prompt,
                            const edgellm_generate_options* options,
                            edgellm_token_callback callback, void* user_data,
                            edgellm_generation_stats* out_stats) {
  const edgellm_generate_options o =
      options != nullptr ? *options : edgellm_generate_options_default();
  session->outcome = edgellm_session::Outcome::none;
  session->forced = false;
  edgellm::GenerateOptions go;
  if (auto st = to_generate_options(where, o, go); st != EDGELLM_OK) return st;
  // Under a constraint the prompt is needed as ids (the constraint starts after it).
  std::vector<std::int32_t> encoded;
  std::span<const std::int32_t> prompt_ids;
  std::unique_ptr<edgellm::constrain::DocumentConstraint> constraint;
  if (session->constraint) {
    if (go.ignore_eos) {
      return invalid(where, "options->ignore_eos: set while the session has a constraint "
                            "(edgellm_session_set_constraint): the document could never end");
    }
    const auto eos = session->engine->eos_ids();
    if (eos.empty()) {
      return fail(EDGELLM_ERR_UNSUPPORTED, where,
                  "session: the model has no eos ids, so a constrained document could never "
                  "end; set the constraint to NULL");
    }
    if constexpr (std::is_same_v<Prompt, std::string_view>) {
      auto ids = session->engine->tokenizer()->encode(
          prompt, {.add_special = go.add_special, .parse_special = go.parse_special});
      if (!ids) return fail(ids.error());
      encoded = std::move(*ids);
      prompt_ids = encoded;
    } else {
      prompt_ids = prompt;
    }
    // The budget: max_new_tokens, or the room the context leaves after the prompt when that is
    // less (the session refuses a prompt that does not fit).
    std::size_t budget = go.max_new_tokens;
    const std::size_t context = session->session.context_size();
    if (prompt_ids.size() < context) budget = std::min(budget, context - prompt_ids.size());
    auto c = session->constraint->start(session->trie,
                                        std::vector<std::int32_t>(eos.begin(), eos.end()),
                                        prompt_ids.size(), budget);
    if (!c) return fail(c.error());
    constraint = std::move(*c);
    go.logits_processor = constraint.get();
  }
  edgellm::TokenCallback on_token;
  if (callback != nullptr) {
    on_token = [callback, user_data, session](std::string_view text, std::int32_t token) {
      const bool go_on = callback(text.data(), text.size(), token, user_data) != 0;
      // A session freed from its own callback stops here; its claim frees it on return.
      return go_on && session->use.load(std::memory_order_acquire) !=
                          edgellm_session::free_after_call;
    };
  }
  auto out = constraint ? session->session.generate(prompt_ids, go, on_token)
                        : session->session.generate(prompt, go, on_token);
  if (!out) return fail(out.error());
  if (constraint) {
    // The eos ids pass only where the document is whole: ending at one is ending whole.
    session->outcome = out->stats.stop == edgellm::decode::StopReason::eos
                           ? edgellm_session::Outcome::complete
                           : edgellm_session::Outcome::incomplete;
    session->forced = constraint->forced();
  }
  if (out_stats != nullptr) {
    const edgellm::decode::GenerateStats& s = out->stats;
    out_stats->prompt_tokens = static_cast<uint32_t>(s.prompt_tokens);
    out_stats->new_tokens = static_cast<uint32_t>(s.new_tokens);
    out_stats->prefill_s = s.prefill_s;
    out_stats->decode_s = s.decode_s;
    out_stats->time_to_first_token_s = s.time_to_first_token_s;
    out_stats->stop_reason = to_c(s.stop);
  }
  return EDGELLM_OK;
}

}  // namespace

extern "C" edgellm_status edgellm_generate(edgellm_session* session, const char* prompt,
                                           const edgellm_generate_options* options,
                                           edgellm_token_callback callback, void* user_data,
                                           edgellm_generation_stats* out_stats) {
  constexpr std::string_view where = "edgellm_generate";
  return guarded(where, [&]() -> edgellm_status {
    if (out_stats != nullptr) *out_stats = edgellm_generation_stats{};
    if (session == nullptr) return invalid(where, "session: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    if (prompt == nullptr) return invalid(where, "prompt: NULL");
    if (prompt[0] == '\0') return invalid(where, "prompt: empty");
    if (session->engine->tokenizer() == nullptr) return no_tokenizer(where);
    return run_generate(where, session, std::string_view(prompt), options, callback, user_data,
                        out_stats);
  });
}

extern "C" edgellm_status edgellm_generate_tokens(edgellm_session* session,
                                                  const int32_t* prompt_ids, size_t n_ids,
                                                  const edgellm_generate_options* options,
                                                  edgellm_token_callback callback,
                                                  void* user_data,
                                                  edgellm_generation_stats* out_stats) {
  constexpr std::string_view where = "edgellm_generate_tokens";
  return guarded(where, [&]() -> edgellm_status {
    if (out_stats != nullptr) *out_stats = edgellm_generation_stats{};
    if (session == nullptr) return invalid(where, "session: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    if (prompt_ids == nullptr) return invalid(where, "prompt_ids: NULL");
    if (n_ids == 0) return invalid(where, "n_ids: 0 (the prompt needs at least one token)");
    if (auto st = check_ids(where, "prompt_ids", *session->engine, prompt_ids, n_ids);
        st != EDGELLM_OK)
      return st;
    if (session->engine->tokenizer() == nullptr) return no_tokenizer(where);
    return run_generate(where, session, std::span<const std::int32_t>(prompt_ids, n_ids), options,
                        callback, user_data, out_stats);
  });
}

// ---- constrained decoding ---------------------------------------------------------------------

namespace {

// The enumerator's name in messages.
const char* kind_name(edgellm::constrain::ConstraintKind k) noexcept {
  using edgellm::constrain::ConstraintKind;
  switch (k) {
    case ConstraintKind::json: return "EDGELLM_CONSTRAINT_JSON";
    case ConstraintKind::json_object: return "EDGELLM_CONSTRAINT_JSON_OBJECT";
    case ConstraintKind::json_schema: return "EDGELLM_CONSTRAINT_JSON_SCHEMA";
    case ConstraintKind::grammar: return "EDGELLM_CONSTRAINT_GRAMMAR";
    case ConstraintKind::regex: return "EDGELLM_CONSTRAINT_REGEX";
    case ConstraintKind::choices: return "EDGELLM_CONSTRAINT_CHOICES";
  }
  return "edgellm_constraint_kind";
}

}  // namespace

extern "C" edgellm_status edgellm_constraint_compile(edgellm_constraint_kind kind,
                                                     const char* source,
                                                     const char* const* choices,
                                                     size_t n_choices, edgellm_constraint** out) {
  constexpr std::string_view where = "edgellm_constraint_compile";
  return guarded(where, [&]() -> edgellm_status {
    using edgellm::constrain::ConstraintKind;
    if (out == nullptr) return invalid(where, "out: NULL");
    *out = nullptr;
    edgellm::constrain::ConstraintSpec spec;
    switch (enum_value(kind)) {
      case EDGELLM_CONSTRAINT_JSON: spec.kind = ConstraintKind::json; break;
      case EDGELLM_CONSTRAINT_JSON_OBJECT: spec.kind = ConstraintKind::json_object; break;
      case EDGELLM_CONSTRAINT_JSON_SCHEMA: spec.kind = ConstraintKind::json_schema; break;
      case EDGELLM_CONSTRAINT_GRAMMAR: spec.kind = ConstraintKind::grammar; break;
      case EDGELLM_CONSTRAINT_REGEX: spec.kind = ConstraintKind::regex; break;
      case EDGELLM_CONSTRAINT_CHOICES: spec.kind = ConstraintKind::choices; break;
      default:
        return invalid(where, "kind: " + std::to_string(enum_value(kind)) +
                                  " is not an edgellm_constraint_kind (EDGELLM_CONSTRAINT_JSON, "
                                  "_JSON_OBJECT, _JSON_SCHEMA, _GRAMMAR, _REGEX, _CHOICES)");
    }
    const std::string name = kind_name(spec.kind);
    const bool takes_source = spec.kind == ConstraintKind::json_schema ||
                              spec.kind == ConstraintKind::grammar ||
                              spec.kind == ConstraintKind::regex;
    if (takes_source) {
      const char* what = spec.kind == ConstraintKind::json_schema ? "the schema's JSON text"
                         : spec.kind == ConstraintKind::grammar   ? "the GBNF grammar"
                                                                  : "the regular expression";
      if (source == nullptr) return invalid(where, "source: NULL (" + name + " needs " + what + ")");
      if (source[0] == '\0') return invalid(where, "source: empty (" + name + " needs " + what + ")");
      spec.source = source;
    } else if (source != nullptr) {
      return invalid(where, "source: not NULL, but " + name + " takes no source" +
                                (spec.kind == ConstraintKind::choices ? " (the choices are "
                                                                        "choices[0..n_choices))"
                                                                      : ""));
    }
    if (spec.kind == ConstraintKind::choices) {
      if (choices == nullptr) {
        return invalid(where, "choices: NULL" + (n_choices > 0 ? " with n_choices = " +
                                                                     std::to_string(n_choices)
                                                               : std::string(" (" + name +
                                                                 " needs at least one)")));
      }
      if (n_choices == 0) return invalid(where, "n_choices: 0 (" + name + " needs at least one)");
      for (std::size_t i = 0; i < n_choices; ++i) {
        if (choices[i] == nullptr)
          return invalid(where, "choices[" + std::to_string(i) + "]: NULL");
        spec.choices.emplace_back(choices[i]);
      }
    } else if (choices != nullptr || n_choices != 0) {
      return invalid(where, "choices: only for EDGELLM_CONSTRAINT_CHOICES (" + name +
                                " takes NULL and n_choices 0)");
    }
    auto c = edgellm::constrain::Constraint::compile(spec);
    if (!c) {
      // The source is an argument: a malformed one (a grammar's syntax) is an invalid argument,
      // not a file's bad format.
      const errc code = c.error().code == errc::format_error ? errc::invalid_argument : c.error().code;
      return fail(to_status(code), where,
                  spec.kind == ConstraintKind::choices ? "choices: " : "source: ",
                  c.error().message);
    }
    *out = new edgellm_constraint{std::move(*c)};
    return EDGELLM_OK;
  });
}

extern "C" void edgellm_constraint_free(edgellm_constraint* constraint) { delete constraint; }

extern "C" edgellm_status edgellm_session_set_constraint(edgellm_session* session,
                                                         const edgellm_constraint* constraint) {
  constexpr std::string_view where = "edgellm_session_set_constraint";
  return guarded(where, [&]() -> edgellm_status {
    if (session == nullptr) return invalid(where, "session: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    if (constraint == nullptr) {
      session->constraint.reset();
      return EDGELLM_OK;
    }
    if (session->engine->tokenizer() == nullptr) return no_tokenizer(where);
    if (!session->trie) {
      auto trie = session->vocabulary->trie(*session->engine);
      if (!trie) return fail(trie.error());
      session->trie = std::move(*trie);
    }
    session->constraint = constraint->constraint;
    return EDGELLM_OK;
  });
}

extern "C" edgellm_status edgellm_session_constraint_result(const edgellm_session* session,
                                                            int32_t* out_complete,
                                                            int32_t* out_forced) {
  constexpr std::string_view where = "edgellm_session_constraint_result";
  return guarded(where, [&]() -> edgellm_status {
    if (out_complete != nullptr) *out_complete = 0;
    if (out_forced != nullptr) *out_forced = 0;
    if (session == nullptr) return invalid(where, "session: NULL");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    if (session->outcome == edgellm_session::Outcome::none) {
      return invalid(where, "session: its latest generate call was not constrained "
                            "(edgellm_session_set_constraint), failed, or there was none");
    }
    if (out_complete != nullptr)
      *out_complete = session->outcome == edgellm_session::Outcome::complete ? 1 : 0;
    if (out_forced != nullptr) *out_forced = session->forced ? 1 : 0;
    return EDGELLM_OK;
  });
}

// ---- prompt cache -----------------------------------------------------------------------------

extern "C" edgellm_status edgellm_session_save_prompt_cache(const edgellm_session* session,
                                                            const char* path) {
  constexpr std::string_view where = "edgellm_session_save_prompt_cache";
  return guarded(where, [&]() -> edgellm_status {
    if (session == nullptr) return invalid(where, "session: NULL");
    if (path == nullptr) return invalid(where, "path: NULL");
    if (path[0] == '\0') return invalid(where, "path: empty");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    if (auto st = session->session.save_prompt_cache(path); !st) return fail(st.error());
    return EDGELLM_OK;
  });
}

extern "C" edgellm_status edgellm_session_load_prompt_cache(edgellm_session* session,
                                                            const char* path,
                                                            size_t* out_n_tokens) {
  constexpr std::string_view where = "edgellm_session_load_prompt_cache";
  return guarded(where, [&]() -> edgellm_status {
    if (out_n_tokens != nullptr) *out_n_tokens = 0;
    if (session == nullptr) return invalid(where, "session: NULL");
    if (path == nullptr) return invalid(where, "path: NULL");
    if (path[0] == '\0') return invalid(where, "path: empty");
    const SessionClaim claim(session, where);
    if (!claim.held()) return claim.busy(where);
    auto held = session->session.load_prompt_cache(path);
    if (!held) return fail(held.error());
    if (out_n_tokens != nullptr) *out_n_tokens = held->size();
    return EDGELLM_OK;
  });
}

// ---- memory plan ------------------------------------------------------------------------------

extern "C" edgellm_status edgellm_plan(const char* model_dir,
                                       const edgellm_model_options* model_options,
                                       const edgellm_session_options* session_options,
                                       edgellm_memory_plan* out_plan) {
  constexpr std::string_view where = "edgellm_plan";
  return guarded(where, [&]() -> edgellm_status {
    if (out_plan == nullptr) return invalid(where, "out_plan: NULL");
    *out_plan = edgellm_memory_plan{};
    if (model_dir == nullptr) return invalid(where, "model_dir: NULL");
    if (model_dir[0] == '\0') return invalid(where, "model_dir: empty");
    const edgellm_model_options mo =
        model_options != nullptr ? *model_options : edgellm_model_options_default();
    const edgellm_session_options so =
        session_options != nullptr ? *session_options : edgellm_session_options_default();
    edgellm::EngineOptions eo;
    if (auto st = to_engine_options(where, "model_options", mo, eo); st != EDGELLM_OK) return st;
    edgellm::SessionOptions sso;
    if (auto st = to_session_options(where, "session_options", so, sso); st != EDGELLM_OK) return st;
    return make_memory_plan(where, "session_options", model_dir, eo, sso, out_plan);
  });
}

extern "C" edgellm_status edgellm_fit_budget(const char* model_dir, uint64_t budget_bytes,
                                             edgellm_model_options* model_options,
                                             edgellm_session_options* session_options,
                                             edgellm_memory_plan* out_plan, char* note,
                                             size_t note_capacity) {
  constexpr std::string_view where = "edgellm_fit_budget";
  return guarded(where, [&]() -> edgellm_status {
    if (note != nullptr && note_capacity > 0) note[0] = '\0';
    if (out_plan != nullptr) *out_plan = edgellm_memory_plan{};
    if (model_dir == nullptr) return invalid(where, "model_dir: NULL");
    if (model_dir[0] == '\0') return invalid(where, "model_dir: empty");
    if (model_options == nullptr) return invalid(where, "model_options: NULL");
    if (session_options == nullptr) return invalid(where, "session_options: NULL");
    edgellm::EngineOptions eo;
    if (auto st = to_engine_options(where, "model_options", *model_options, eo); st != EDGELLM_OK)
      return st;
    edgellm::SessionOptions so;
    if (auto st = to_session_options(where, "session_options", *session_options, so);
        st != EDGELLM_OK)
      return st;
    std::uint64_t budget = budget_bytes;
    if (budget == EDGELLM_BUDGET_PHONE) {
      auto b = edgellm::resolve_budget(edgellm::MemoryBudget::phone());
      if (!b) return fail(b.error());
      budget = *b;
    }
    auto c = edgellm::choose_within_budget(model_dir, edgellm::plan_options(eo, so), budget);
    if (!c) return fail(c.error());
    if (auto st = check_context_size(where, "session_options", so.context_size,
                                     c->plan.weights.config.max_position_embeddings);
        st != EDGELLM_OK)
      return st;
    using edgellm::model::LmHeadFormat;
    const LmHeadFormat head = c->options.load.lm_head;
    model_options->lm_head = head == LmHeadFormat::int8 ? "int8" : head == LmHeadFormat::q4 ? "q4" : "stored";
    switch (c->options.kv_type) {
      case edgellm::cache::KvType::int8: session_options->kv_type = EDGELLM_KV_INT8; break;
      case edgellm::cache::KvType::f16: session_options->kv_type = EDGELLM_KV_F16; break;
      case edgellm::cache::KvType::f32: session_options->kv_type = EDGELLM_KV_F32; break;
      case edgellm::cache::KvType::int4: session_options->kv_type = EDGELLM_KV_INT4; break;
    }
    session_options->context_size = static_cast<uint32_t>(c->plan.session.context_size);
    if (out_plan != nullptr) *out_plan = to_c(c->plan);
    if (note != nullptr && note_capacity > 0) {
      const std::size_t n = std::min(c->note.size(), note_capacity - 1);
      std::memcpy(note, c->note.data(), n);
      note[n] = '\0';
    }
    return EDGELLM_OK;
  });
}

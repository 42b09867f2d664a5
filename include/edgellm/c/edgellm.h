/* SPDX-License-Identifier: Apache-2.0 */
/* edgellm's C API: a plain C99 interface over the C++ session facade (edgellm/session.hpp), for
 * apps that reach native code through a C ABI (JNI from Kotlin/Java, Swift, Python ctypes, Rust).
 * Implemented in bindings/c/edgellm_c.cpp, built as libedgellm_c (shared and static; only the
 * edgellm_* symbols are exported).
 *
 * Handles and lifetimes
 *   edgellm_model    a loaded checkpoint directory (weights, tokenizer, stop ids), read-only once
 *                    loaded. edgellm_model_load() creates it, edgellm_model_free() releases it.
 *   edgellm_session  one conversation over a model (its own KV cache, sampler, decoder).
 *                    edgellm_session_create() / edgellm_session_free(). A session keeps its model
 *                    alive: the model's memory is released when the model handle and every session
 *                    over it have been freed, in any order.
 *   edgellm_constraint  a compiled output constraint (JSON, a JSON Schema, a GBNF grammar, a
 *                    regular expression, a list of choices), immutable once compiled.
 *                    edgellm_constraint_compile() / edgellm_constraint_free(). A session it is set
 *                    on keeps it alive: it may be freed while sessions still use it, and one
 *                    constraint may be set on several sessions (on several threads) at once.
 *   Every *_free() accepts NULL. Strings passed in are copied or used only during the call.
 *
 * Errors
 *   Every fallible function returns an edgellm_status (EDGELLM_OK == 0). On failure, the message
 *   that names what failed (file, tensor, argument) is returned by edgellm_last_error() on the
 *   same thread, until the next edgellm_* call on that thread (like errno: one slot per thread,
 *   never shared between threads). No C++ exception crosses this interface.
 *
 * Threads and re-entrancy
 *   A model may be shared by any number of sessions used concurrently on different threads.
 *   A session is used by one thread at a time. The token callback runs on the thread that
 *   called edgellm_generate(). A model loaded with threads > 1 owns a pool of that many
 *   threads that its sessions take turns on.
 *   Calls on one session do not nest: while a call on a session runs (edgellm_generate*, and
 *   the reset, set_sampling, set_constraint, constraint_result and prompt-cache calls), another
 *   call on that session, from the
 *   token callback or from another thread, returns EDGELLM_ERR_BUSY and changes nothing.
 *   edgellm_session_position() and edgellm_session_context_size() only read, and answer from
 *   the callback too. edgellm_session_free() on a busy session defers the free: generation
 *   stops as if the callback had returned 0, and the session is freed when the running call
 *   returns (the session pointer must not be used after edgellm_session_free()).
 */
#ifndef EDGELLM_C_EDGELLM_H
#define EDGELLM_C_EDGELLM_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(EDGELLM_C_BUILD)
#    define EDGELLM_C_API __declspec(dllexport)
#  else
#    define EDGELLM_C_API
#  endif
#else
#  define EDGELLM_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ---------------------------------------------------------------- */

typedef enum edgellm_status {
  EDGELLM_OK = 0,
  EDGELLM_ERR_INVALID_ARGUMENT = 1, /* a value out of range, a NULL handle, a bad option */
  EDGELLM_ERR_SHAPE_MISMATCH = 2,   /* tensor or buffer shapes disagree */
  EDGELLM_ERR_IO = 3,               /* a file could not be opened, mapped, read or written */
  EDGELLM_ERR_FORMAT = 4,           /* a file's content is malformed or lies about itself */
  EDGELLM_ERR_UNSUPPORTED = 5,      /* well-formed, but not handled (architecture, backend) */
  EDGELLM_ERR_OUT_OF_RANGE = 6,     /* an index, token id or position past its limit */
  EDGELLM_ERR_CAPACITY = 7,         /* a buffer (context, or a caller's output array) is full */
  EDGELLM_ERR_OUT_OF_MEMORY = 8,    /* an allocation failed, or the memory budget is exceeded */
  EDGELLM_ERR_INTERNAL = 9,         /* a bug: please report the message */
  EDGELLM_ERR_BUSY = 10             /* the session is inside another call: its own token
                                       callback (or another thread) called it; nothing changed */
} edgellm_status;

/* The message of the latest failed call on this thread ("" if none). The pointer stays valid
 * until the next edgellm_* call on this thread. */
EDGELLM_C_API const char* edgellm_last_error(void);

/* A short name for a status ("ok", "invalid argument", ...); never NULL. */
EDGELLM_C_API const char* edgellm_status_string(edgellm_status status);

/* ---- version and build ----------------------------------------------------------------- */

/* "MAJOR.MINOR.PATCH" of the library. */
EDGELLM_C_API const char* edgellm_version(void);
/* One line: version, git sha (if known at build time), compiler, target architecture and the
 * int4 microkernel the run-time dispatch picks on this CPU. */
EDGELLM_C_API const char* edgellm_build_info(void);

/* ---- model ----------------------------------------------------------------------------- */

typedef struct edgellm_model edgellm_model;

typedef struct edgellm_model_options {
  int32_t threads;              /* > 1: the model owns a pool of this many threads; 0 or 1: none */
  const char* backend;          /* NULL or "cpu" ("vulkan" where built with it); else UNSUPPORTED */
  const char* lm_head;          /* NULL or "stored": as stored; "int8" / "q4": int8 / int4 at
                                   load (falls back to stored) */
  const char* packed_cache;     /* NULL: none; "auto": beside the checkpoint; or a file path */
  int32_t load_tokenizer;       /* nonzero: load tokenizer.json (needed to generate text) */
  uint64_t memory_budget_bytes; /* 0: none; else refuse (OUT_OF_MEMORY) when the plan exceeds it */
} edgellm_model_options;

/* The defaults: threads 1, backend cpu, lm_head stored, no packed cache, tokenizer loaded, no
 * budget. */
EDGELLM_C_API edgellm_model_options edgellm_model_options_default(void);

/* Loads a Hugging Face / AutoAWQ checkpoint directory. options may be NULL (the defaults).
 * On success *out_model is a new handle; on failure it is set to NULL. */
EDGELLM_C_API edgellm_status edgellm_model_load(const char* model_dir,
                                                const edgellm_model_options* options,
                                                edgellm_model** out_model);
EDGELLM_C_API void edgellm_model_free(edgellm_model* model);

/* Model facts (0 for a NULL model). */
EDGELLM_C_API size_t edgellm_model_vocab_size(const edgellm_model* model);
EDGELLM_C_API size_t edgellm_model_max_context(const edgellm_model* model);

/* ---- tokenizer ------------------------------------------------------------------------- */

/* Encodes text[0..text_len) into token ids. Writes at most capacity ids to out_ids (which may be
 * NULL when capacity is 0) and the number of ids the text has to *out_count; when that number
 * exceeds capacity, returns EDGELLM_ERR_CAPACITY (call again with a larger array). add_special:
 * add the tokenizer's bos etc.; parse_special: "<|im_start|>" and the like become special ids. */
EDGELLM_C_API edgellm_status edgellm_tokenize(const edgellm_model* model, const char* text,
                                              size_t text_len, int32_t add_special,
                                              int32_t parse_special, int32_t* out_ids,
                                              size_t capacity, size_t* out_count);

/* Decodes ids into UTF-8 text. Writes at most capacity bytes including a terminating NUL to out
 * and the text's length (without the NUL) to *out_len; when out is too small returns
 * EDGELLM_ERR_CAPACITY (out is left NUL-terminated if capacity > 0). */
EDGELLM_C_API edgellm_status edgellm_detokenize(const edgellm_model* model, const int32_t* ids,
                                                size_t n_ids, int32_t skip_special, char* out,
                                                size_t capacity, size_t* out_len);

/* ---- session --------------------------------------------------------------------------- */

typedef struct edgellm_session edgellm_session;

typedef enum edgellm_kv_type {
  EDGELLM_KV_INT8 = 0, /* per position and head, half the memory of f16 */
  EDGELLM_KV_F16 = 1,
  EDGELLM_KV_F32 = 2,
  EDGELLM_KV_INT4 = 3 /* per position, head and 32 values: 0.28 of f16; CPU only */
} edgellm_kv_type;

typedef struct edgellm_sampling {
  float temperature;        /* >= 0; 0: greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* (0, 1]; 1: off */
  float min_p;              /* [0, 1); 0: off */
  float repetition_penalty; /* > 0; 1: off */
  int32_t penalty_last_n;   /* history window of the penalty; 0: the whole history */
  uint64_t seed;            /* seed of the random stream */
} edgellm_sampling;

/* The library's sampling defaults (temperature 0.8, top_k 40, top_p 0.95, ...). */
EDGELLM_C_API edgellm_sampling edgellm_sampling_default(void);
/* Greedy decoding (temperature 0). */
EDGELLM_C_API edgellm_sampling edgellm_sampling_greedy(void);

typedef struct edgellm_session_options {
  edgellm_kv_type kv_type;
  uint32_t context_size;      /* tokens the session holds; 0: the model's default; at most
                                 the model's max_position_embeddings */
  uint32_t max_batch;         /* most tokens run through the layers at once; 0: default (64) */
  edgellm_sampling sampling;
  const edgellm_model* draft; /* speculative decoding with this draft model (same tokenizer;
                                 load it with load_tokenizer = 0), or NULL */
  int32_t prompt_lookup;      /* nonzero: speculative decoding by n-gram lookup (not with draft) */
  uint32_t draft_tokens;      /* tokens drafted per step; 0: default (5) */
} edgellm_session_options;

/* The defaults: int8 KV, the model's context, batch 64, edgellm_sampling_default(), no drafting. */
EDGELLM_C_API edgellm_session_options edgellm_session_options_default(void);

/* Creates a session over model (the session keeps the model alive). options may be NULL.
 * A context_size above the model's max_position_embeddings (positions it was not trained for)
 * is refused with EDGELLM_ERR_INVALID_ARGUMENT; edgellm_model_max_context() tells the limit. */
EDGELLM_C_API edgellm_status edgellm_session_create(const edgellm_model* model,
                                                    const edgellm_session_options* options,
                                                    edgellm_session** out_session);
/* Frees the session. Called while a call on the session runs (from its token callback), the
 * free is deferred until that call returns, generation stops (stop_reason
 * EDGELLM_STOP_CALLBACK), and edgellm_last_error() says so. */
EDGELLM_C_API void edgellm_session_free(edgellm_session* session);

/* Forgets the conversation (the cache holds no tokens; the sampler restarts from its seed). */
EDGELLM_C_API edgellm_status edgellm_session_reset(edgellm_session* session);
/* New sampling settings for the next calls. */
EDGELLM_C_API edgellm_status edgellm_session_set_sampling(edgellm_session* session,
                                                          const edgellm_sampling* sampling);
/* Tokens the session's cache holds, and how many it can hold (0 for a NULL session). After a
 * generation the cache holds the prompt and every emitted token but the last (which the next
 * call forwards first): prompt + new_tokens - 1. */
EDGELLM_C_API size_t edgellm_session_position(const edgellm_session* session);
EDGELLM_C_API size_t edgellm_session_context_size(const edgellm_session* session);

/* ---- generation ------------------------------------------------------------------------ */

/* Called with each piece of generated text (whole UTF-8 characters, not NUL-terminated: use
 * text_len) and the latest token id. Return nonzero to go on, 0 to stop: edgellm_generate()
 * then returns EDGELLM_OK with stop_reason EDGELLM_STOP_CALLBACK, and the session stays usable. */
typedef int32_t (*edgellm_token_callback)(const char* text, size_t text_len, int32_t token,
                                          void* user_data);

typedef struct edgellm_generate_options {
  uint32_t max_new_tokens;          /* > 0 */
  const char* const* stop_strings;  /* generation ends before the first occurrence; may be NULL */
  size_t n_stop_strings;
  int32_t ignore_eos;               /* nonzero: do not stop at the model's eos ids */
  int32_t add_special;              /* text prompts: add the tokenizer's bos etc. */
  int32_t parse_special;            /* text prompts: special-token text becomes special ids */
} edgellm_generate_options;

/* The defaults: 256 tokens, no stop strings, stop at eos, add_special on, parse_special off. */
EDGELLM_C_API edgellm_generate_options edgellm_generate_options_default(void);

typedef enum edgellm_stop_reason {
  EDGELLM_STOP_EOS = 0,
  EDGELLM_STOP_STRING = 1,
  EDGELLM_STOP_MAX_TOKENS = 2,
  EDGELLM_STOP_CONTEXT_FULL = 3,
  EDGELLM_STOP_CALLBACK = 4
} edgellm_stop_reason;

typedef struct edgellm_generation_stats {
  uint32_t prompt_tokens;
  uint32_t new_tokens;
  double prefill_s;
  double decode_s;
  double time_to_first_token_s;
  edgellm_stop_reason stop_reason;
} edgellm_generation_stats;

/* Encodes prompt (NUL-terminated UTF-8) and generates after it, streaming through callback (may
 * be NULL). options and out_stats may be NULL. A prompt that extends what the session holds (a
 * chat's next turn) forwards only its new tokens. */
EDGELLM_C_API edgellm_status edgellm_generate(edgellm_session* session, const char* prompt,
                                              const edgellm_generate_options* options,
                                              edgellm_token_callback callback, void* user_data,
                                              edgellm_generation_stats* out_stats);
/* The same after token ids. */
EDGELLM_C_API edgellm_status edgellm_generate_tokens(edgellm_session* session,
                                                     const int32_t* prompt_ids, size_t n_ids,
                                                     const edgellm_generate_options* options,
                                                     edgellm_token_callback callback,
                                                     void* user_data,
                                                     edgellm_generation_stats* out_stats);

/* ---- constrained decoding (structured output) ------------------------------------------ */

/* Tokens that would take the output out of the constraint's language are never drawn, and the
 * model's eos ids are allowed only where the output is a whole document, so a generation that
 * ends at eos has produced one (JSON that parses, a sentence of the grammar, a whole match of
 * the pattern, exactly one of the choices). The generation's max_new_tokens (or the room the
 * context leaves, when less) is a budget the document is closed within: near its end only
 * tokens after which the document can still be finished in time are allowed, and the result
 * says when that overrode the model's choice. */

typedef struct edgellm_constraint edgellm_constraint;

typedef enum edgellm_constraint_kind {
  EDGELLM_CONSTRAINT_JSON = 0,        /* any JSON value; source NULL */
  EDGELLM_CONSTRAINT_JSON_OBJECT = 1, /* a JSON object (OpenAI's json_object); source NULL */
  EDGELLM_CONSTRAINT_JSON_SCHEMA = 2, /* JSON valid against source, a JSON Schema (JSON text) */
  EDGELLM_CONSTRAINT_GRAMMAR = 3,     /* a sentence of source, a GBNF grammar (rule "root") */
  EDGELLM_CONSTRAINT_REGEX = 4,       /* a whole match of source, a regular expression */
  EDGELLM_CONSTRAINT_CHOICES = 5      /* exactly one of choices[0..n_choices); source NULL */
} edgellm_constraint_kind;

/* Compiles a constraint. source (NUL-terminated UTF-8) is the schema, the grammar or the
 * pattern, and must be NULL for the JSON kinds and CHOICES; choices and n_choices are for
 * CHOICES only (NULL and 0 otherwise; each choice a non-NULL string). A source the compiler
 * refuses gives EDGELLM_ERR_INVALID_ARGUMENT (EDGELLM_ERR_UNSUPPORTED for a schema keyword or
 * regex feature it does not handle) with a message that starts with the argument ("source: ",
 * "choices: ") and names what is wrong in it: the schema keyword and its JSON pointer, the
 * grammar's line and column, the pattern's offset. On success *out is
 * a new handle; on failure it is set to NULL. Compiling takes no model: one constraint serves any
 * number of sessions over any models. */
EDGELLM_C_API edgellm_status edgellm_constraint_compile(edgellm_constraint_kind kind,
                                                        const char* source,
                                                        const char* const* choices,
                                                        size_t n_choices,
                                                        edgellm_constraint** out);
EDGELLM_C_API void edgellm_constraint_free(edgellm_constraint* constraint);

/* Constrains every following edgellm_generate* call on session until it is set again; NULL
 * returns to free text. The session keeps a reference: the app may free the constraint at once.
 * The first constraint set on a model's sessions builds the model's vocabulary index (about
 * 100 ms on a 150k vocabulary; once per model, shared by its sessions). A constrained
 * generation needs the model's eos ids to end the document: options->ignore_eos is refused
 * (EDGELLM_ERR_INVALID_ARGUMENT). Stop strings still apply (a stop string that ends the output
 * early leaves the document unfinished). edgellm_session_reset() keeps the constraint. */
EDGELLM_C_API edgellm_status edgellm_session_set_constraint(edgellm_session* session,
                                                            const edgellm_constraint* constraint);

/* How the latest edgellm_generate* call on session went under its constraint:
 * *out_complete = 1 when the output is a whole document (the generation ended at an eos id,
 * which the constraint allows only there), else 0 (it stopped at max_new_tokens, a stop
 * string, a full context or the callback first); *out_forced = 1 when the token budget
 * overrode the model's choice at least once to close the document in time, else 0.
 * Either pointer may be NULL. Refused (EDGELLM_ERR_INVALID_ARGUMENT, both outputs 0) when the
 * latest call was not constrained, failed, or there was none since the session was created
 * or reset. */
EDGELLM_C_API edgellm_status edgellm_session_constraint_result(const edgellm_session* session,
                                                               int32_t* out_complete,
                                                               int32_t* out_forced);

/* ---- prompt cache ---------------------------------------------------------------------- */

/* Writes the KV state after the latest generate() call's prompt to path (atomically). */
EDGELLM_C_API edgellm_status edgellm_session_save_prompt_cache(const edgellm_session* session,
                                                               const char* path);
/* Restores a state written by edgellm_session_save_prompt_cache(); *out_n_tokens (may be NULL)
 * gets the number of tokens it holds. A state from another model or KV type is refused and the
 * session is unchanged. Plain decoding only. */
EDGELLM_C_API edgellm_status edgellm_session_load_prompt_cache(edgellm_session* session,
                                                               const char* path,
                                                               size_t* out_n_tokens);

/* ---- memory plan ----------------------------------------------------------------------- */

typedef struct edgellm_memory_plan {
  uint64_t weights_mapped_bytes;   /* checkpoint bytes mapped from files */
  uint64_t weights_resident_bytes; /* weight bytes resident after load (owned + touched mapped) */
  uint64_t kv_cache_bytes;         /* one session's KV cache at its context and KV type */
  uint64_t scratch_bytes;          /* one session's activations, logits, workspace */
  uint64_t load_peak_bytes;        /* the most resident during load */
  uint64_t peak_bytes;             /* the most resident: load, then one session generating */
  uint32_t context_size;           /* the context the plan was made for */
} edgellm_memory_plan;

/* What loading model_dir with model_options and creating one session with session_options will
 * need, computed from config.json and the safetensors headers before anything large is
 * allocated. Either options pointer may be NULL (the defaults). A context_size the session
 * would refuse (above max_position_embeddings) is refused here too. */
EDGELLM_C_API edgellm_status edgellm_plan(const char* model_dir,
                                          const edgellm_model_options* model_options,
                                          const edgellm_session_options* session_options,
                                          edgellm_memory_plan* out_plan);

/* A memory budget for the phone profile: 3.8 GiB, or 90 % of the memory available now when
 * that is less (edgellm::MemoryBudget::phone()). */
#define EDGELLM_BUDGET_PHONE 0

/* Chooses settings that fit budget_bytes (EDGELLM_BUDGET_PHONE: the phone profile), starting
 * from *model_options and *session_options (neither may be NULL; start from the defaults) and
 * changing, in this order and each only when what comes before does not fit: the lm_head
 * format (int8, then stored, then q4: the first that fits), the KV type (f16, int8, int4: never
 * wider than asked), the context (the longest that fits, at least 256 tokens or the one asked).
 * On success both options hold the chosen settings (lm_head a static string; context_size the
 * tokens planned), *out_plan (unless NULL) their plan, and note (unless NULL; note_capacity
 * bytes, NUL-terminated, cut short when longer) what was changed and why ("" when nothing
 * was). When nothing fits: EDGELLM_ERR_OUT_OF_MEMORY, the options unchanged, and
 * edgellm_last_error() gives the smallest plan found. */
EDGELLM_C_API edgellm_status edgellm_fit_budget(const char* model_dir, uint64_t budget_bytes,
                                                edgellm_model_options* model_options,
                                                edgellm_session_options* session_options,
                                                edgellm_memory_plan* out_plan, char* note,
                                                size_t note_capacity);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EDGELLM_C_EDGELLM_H */

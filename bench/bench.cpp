// SPDX-License-Identifier: Apache-2.0
// edgellm-bench: end-to-end prompt processing and generation speed of a checkpoint, in the
// spirit of llama-bench, with the bandwidth roofline measured by the same binary in the run.
//
//   edgellm-bench -m DIR [-m DIR2] [-p 128] [-n 64] [-d 0] [-t 1,2] [--exact] [--lm-head f16|int8|int4]
//                 [--kv-type int8|int4|f16|f32] [--packed-cache auto|FILE] [--packed-cache-copy]
//                 [-o tsv|json|jsonl|md|csv] [--quick]
//                 [--reps N] [--no-lock]
//
// Rows: pp<P> (prefill P tokens from an empty cache; tokens_per_s = P / time, ttft_ms = the
// prefill time including the last token's logits), tg<N> (N single-token forwards after a
// 16-token prompt, greedy; per rep, weight bytes read per token * tokens/s / the read bandwidth
// probed with the same thread count just before and after that rep (their mean); the row gives
// the tokens_per_s, the median share (pct_roofline, only when the weights read per token exceed
// the last-level cache, else null) and the median probe (membw_gbps); ttft_ms = that 16-token
// prefill), start16 (ttft_ms = load time + that prefill: start to first token) and
// prefix512+16 (ttft_ms = prompt-cache time to first token; prefix_speedup = cold / cached).
// Every *_median / *_mean / *_stddev triple is over the reps (stddev null for one rep); a
// column that does not apply to a row is null (empty in tsv/csv).
//
// -d D[,D...] (depth, as llama-bench's -d; default 0): pp and tg run after D tokens of context
// are in the KV cache, filled by an untimed prefill of D tokens (ids made as pp's); each rep
// truncates back to D, so pp appends its P tokens at positions D.., tg its 16-token prompt and
// N steps. start and prefix rows are measured at depth 0 only. Every row has `depth`. tg rows:
// kv_bytes_per_token = K and V bytes (int8 scales included) one step reads, layers x kv_heads x
// 2 x (head_dim x element bytes [+ 4]) x the positions it attends, averaged over the N steps
// (D + 16 + (N + 1) / 2); pct_roofline_kv = (weight + KV bytes per token) * tokens/s / the
// probe, null when they fit the last-level cache (pct_roofline stays weights only). A depth
// whose pp or tg would run past the model's context is refused.
// pp rows: int8_macs_per_s = the int8 multiply-adds of the decoder's int4/int8 linears (P x
// in x out each; lm_head left out: pp computes it for the last token only) / the prefill's
// time; int8_peak_macs_per_s = the compute probe (bench::measure_int8_peak: the GEMM's int8
// instruction, named by the `int8_instruction` field, in independent chains on the row's
// thread count); pct_compute = their ratio in %. Null with --exact (fp32 GEMM) and where the
// instruction is "none" (the generic kernel).
// Weight bytes per token: every decoder linear (packed int4 or dense) + lm_head + norms; the
// embedding row and the KV cache are not counted. Weights are owned memory (repacked) plus the
// mmapped checkpoint; --no-lock skips mlock of the owned weights (the `weights` column says
// which happened).
//
// --backend vulkan [--device N] (builds with the Vulkan backend): the pp and tg rows of the whole
// model on a Vulkan device (backend/vulkan/backend.hpp, the KV cache on the device, int8 or
// f16), with membw_gbps / pct_roofline against the Vulkan bandwidth probe on the same device and
// submits_per_token (queue submissions per decode step: 1 when a step is one command buffer).
// Rows carry `backend` and `device` (the CPU model, or the driver's device name), and on the
// device `gemv`: the int4 decode GEMVs' shader build (vk::Backend::gemv_variant(): subgroup or
// portable with fp32 activations, int8-dot or int8-portable for W4A8; null on the CPU and for a
// model without int4 linears). --vk-gemv auto|fp32|int8|int8-dot chooses it (auto: W4A8 where
// the device accelerates integer dot products and --exact is not given; the prefill of pp stays
// fp32 either way).
//
// --profile: instead of those rows, one tg<N> decode per thread count with every op timed
// (backend::Profile) and the pool's fork-joins counted; one row per op kind (op: its name,
// ms_per_token, pct_token = its share of the token's wall time, calls_per_token,
// forkjoins_per_token), an `untimed` row (the time between ops: the Transformer's
// sequencing) and a `total` row (the token's wall time, all calls, all fork-joins, and the
// profiled tokens_per_s). Timing each op adds a little time: its rows are never timing rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "edgellm/backend/profile.hpp"
#include "edgellm/backend/vulkan/gemv_choice.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/decode/model.hpp"
#include "edgellm/decode/prompt_cache.hpp"
#include "edgellm/model/transformer.hpp"
#include "edgellm/model/weights.hpp"
#include "edgellm/session.hpp"
#include "edgellm/thread_pool.hpp"
#include "harness.hpp"
#include "vulkan.hpp"

#if EDGELLM_BENCH_VULKAN
#include "edgellm/backend/vulkan/backend.hpp"
#include "edgellm/session/vulkan.hpp"
#endif

namespace bench = edgellm::bench;
using namespace edgellm;

namespace {

std::size_t linear_bytes(const model::Linear& l) {
  return l.weight_bytes();
}

std::size_t bytes_per_token(const model::TransformerWeights& w) {
  std::size_t b = linear_bytes(w.lm_head) + w.norm.size() * 4;
  for (const auto& l : w.layers) {
    b += (l.input_layernorm.size() + l.post_attention_layernorm.size()) * 4;
    for (const model::Linear* p : l.linears()) b += linear_bytes(*p);
  }
  return b;
}

void lock_weights(const model::TransformerWeights& w, bool& ok) {
  for (const std::span<const std::byte> r : w.streamed_ranges())
    ok = bench::lock_memory(r.data(), r.size(), "weights") && ok;
}

constexpr std::size_t kSystem = 512, kUser = 16;  // prefix-cache row: system + user tokens
constexpr std::size_t kStart = 16;                // tg: prompt before the generated tokens

// int8 multiply-adds per token of the decoder's linears that run on int8 dot products (int4
// on the fast path, int8): in_features x out_features each. lm_head is left out: pp computes
// its logits for the last token only.
std::size_t int8_macs_per_token(const model::TransformerWeights& w) {
  std::size_t macs = 0;
  for (const auto& l : w.layers)
    for (const model::Linear* p : l.linears())
      if (p->quantized()) macs += p->k() * p->n();
  return macs;
}

// Bytes of K and V (scales included) one position of the cache holds over all layers: what a
// decode step reads per position it attends.
template <class Cache>
std::size_t kv_bytes_per_position(const model::ModelConfig& c) {
  return c.num_hidden_layers * c.num_key_value_heads * 2 * Cache::row_bytes(c.head_dim);
}

template <class Cache>
int run_model(const std::string& dir, const bench::options& opts, std::size_t P, std::size_t N,
              const std::vector<std::size_t>& depths, bool exact, const model::LoadOptions& load,
              bool lock, const std::string& kv_name, std::size_t llc_bytes, bench::table& out) {
  EngineOptions eo;
  eo.load = load;
  eo.load_tokenizer = false;  // synthetic token ids
  auto engine = Engine::load(dir, eo);
  if (!engine) {
    bench::note("{}", engine.error().message);
    return 1;
  }
  if (!(*engine)->lm_head_note().empty()) bench::note("[bench] {}: {}", dir, (*engine)->lm_head_note());
  const double load_s = (*engine)->load_seconds();
  const std::shared_ptr<const model::TransformerWeights>& weights = (*engine)->weights();
  const model::TransformerWeights& w = *weights;
  const std::size_t per_token = bytes_per_token(w);
  std::size_t model_bytes = w.owned_bytes();
  if (!w.lm_head.quantized() && w.lm_head.dense.owned_bytes() == 0)  // a view of the file
    model_bytes += linear_bytes(w.lm_head);
  // The model's context: a depth whose tests would run past it is refused, not extrapolated.
  std::size_t model_ctx = w.config.max_position_embeddings;
  if (w.config.sliding_window) model_ctx = std::min(model_ctx, *w.config.sliding_window);
  const std::size_t S = std::min(kStart, P);  // tg's prompt
  const std::size_t depth_max = *std::max_element(depths.begin(), depths.end());
  for (const std::size_t d : depths) {
    if (d > 0 && d + std::max(P, S + N) > model_ctx) {
      bench::note("-d {}: the depth plus the pp{} prompt or the {}-token prompt and tg{} steps "
                  "({} positions) exceeds the {}-position context of {}",
                  d, P, S, N, d + std::max(P, S + N), model_ctx, dir);
      return 2;
    }
  }
  bool locked = lock;
  if (lock) lock_weights(w, locked);
  if (!w.packed_cache_note.empty()) bench::note("[bench] packed cache: {}", w.packed_cache_note);
  bench::note("[bench] {}: loaded in {:.2f} s, {:.3f} GB owned, {:.3f} GB read per token ({})",
              dir, load_s, static_cast<double>(w.owned_bytes()) / 1e9,
              static_cast<double>(per_token) / 1e9, locked ? "mlocked" : "not locked");
  // Below the last-level cache the weights stay in cache between tokens: DRAM bandwidth is no
  // roofline for them.
  const bool roofline_applies = llc_bytes != 0 && per_token > llc_bytes;
  if (!roofline_applies) {
    bench::note("[bench] {}: pct_roofline is null: {}", dir,
                llc_bytes == 0 ? std::string("the last-level cache size is unknown")
                               : fmt::format("the {:.1f} MiB read per token fit in the {:.1f} MiB "
                                             "last-level cache",
                                             static_cast<double>(per_token) / (1 << 20),
                                             static_cast<double>(llc_bytes) / (1 << 20)));
  }
  const std::size_t V = w.config.vocab_size;
  const auto mb = static_cast<long long>(model_bytes);
  const char* weights_state = locked ? "mlocked" : "resident";
  const int reps = opts.reps_or(opts.quick ? 1 : 3);
  const std::vector<int> threads_list = opts.threads_or({1, 2});
  // Deterministic prompt ids (the content does not change the work); the depth's tokens are
  // made the same way.
  const auto token_ids = [V](std::size_t n) {
    std::vector<std::int32_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
    return ids;
  };
  const std::vector<std::int32_t> prompt = token_ids(P), depth_ids = token_ids(depth_max);
  const std::size_t kv_per_position = kv_bytes_per_position<Cache>(w.config);
  // pct_compute: the fast path's GEMMs only (--exact dequantises to fp32).
  const std::size_t macs_per_token = exact ? 0 : int8_macs_per_token(w);

  for (int threads : threads_list) {
    auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
    if (!pool) {
      bench::note("{}", pool.error().message);
      return 2;
    }
    model::TransformerOptions to;
    to.pool = pool->get();
    to.path = exact ? kernels::MatmulPath::exact : kernels::MatmulPath::fast;
    to.context_size =
        std::max(depth_max + std::max(P, S + N), std::max<std::size_t>(P, kSystem + kUser)) + N +
        8;
    to.max_batch = std::max<std::size_t>(P, 64);
    auto tr = model::Transformer<Cache>::create(weights, to);
    if (!tr) {
      bench::note("{}", tr.error().message);
      return 1;
    }
    std::vector<float> logits(V);
    const std::string path = exact ? "exact" : "fast";
    const auto check = [](const status& st) {
      if (!st) std::exit((bench::note("{}", st.error().message), 1));
    };
    // The peak of the GEMM's int8 instruction on this thread count (pct_compute of pp).
    const bench::int8_peak peak =
        bench::measure_int8_peak(threads, opts.quick ? 0.01 : 0.02, opts.quick ? 3 : 5);
    const bench::value peak_cell =
        peak.macs_per_s > 0 ? bench::value(peak.macs_per_s) : bench::value();
    bench::note("[bench] t={} int8 peak: {} {:.1f} GMAC/s", threads, peak.instruction,
                peak.macs_per_s / 1e9);

    for (const std::size_t depth : depths) {
      // The depth: an untimed prefill of `depth` tokens; each rep below truncates back to it,
      // which keeps those positions' keys and values, and appends its own tokens after them.
      const auto fill_start = std::chrono::steady_clock::now();
      check(tr->truncate(0));
      if (depth > 0)
        check(tr->forward(std::span(depth_ids).first(depth), decode::LogitsMode::last, logits));
      if (depth > 0)
        bench::note("[bench] t={} depth {}: filled in {:.1f} ms", threads, depth,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              fill_start)
                        .count());
      const auto expect_position = [&](std::size_t n, const char* test) {
        if (tr->position() != n) {
          bench::note("[bench] {} at depth {}: {} positions in the cache, expected {}", test,
                      depth, tr->position(), n);
          std::exit(1);
        }
      };

      // pp: prefill P tokens after the depth.
      const auto pp = bench::measure(
          [&] {
            check(tr->truncate(depth));
            check(tr->forward(prompt, decode::LogitsMode::last, logits));
            bench::do_not_optimize(logits[0]);
          },
          reps, 1);
      expect_position(depth + P, "pp");
      std::vector<double> pp_tps_reps, pp_ms_reps;
      for (const double us : pp.samples_us) {
        pp_tps_reps.push_back(static_cast<double>(P) / (us * 1e-6));
        pp_ms_reps.push_back(us / 1e3);
      }
      const bench::stats pp_tps = bench::summarize(pp_tps_reps),
                         pp_ms = bench::summarize(pp_ms_reps);
      // int8 MACs/s of the GEMMs over the whole prefill (attention, norms, activation
      // quantisation included in its time), against the probe's peak.
      const double macs_per_s = static_cast<double>(macs_per_token) * pp_tps.median;
      const bench::value macs_cell = macs_per_token > 0 ? bench::value(macs_per_s) : bench::value();
      const bench::value pct_compute = macs_per_token > 0 && peak.macs_per_s > 0
                                           ? bench::value(macs_per_s / peak.macs_per_s * 100)
                                           : bench::value();
      if (macs_per_token > 0 && peak.macs_per_s > 0)
        bench::note("[bench] t={} pp{} d={}: {:.1f} GMAC/s of int8 GEMM, {:.1f}% of the peak",
                    threads, P, depth, macs_per_s / 1e9, macs_per_s / peak.macs_per_s * 100);
      out.row({dir, "pp" + std::to_string(P), threads, path, kv_name, pp_tps.median, pp_tps.mean,
               pp_tps.stddev, pp_ms.median, pp_ms.mean, pp_ms.stddev, mb,
               static_cast<long long>(bench::peak_rss_bytes()), bench::null, bench::null,
               weights_state, bench::null, "cpu", bench::cpu_model(), bench::null, bench::null,
               depth, bench::null, bench::null, macs_cell, peak_cell, pct_compute});

      // tg: N greedy single-token steps after the depth and a kStart-token prompt. The read
      // bandwidth is probed before each rep and after the last (this host's drifts by tens of
      // percent between minutes), and each rep's share of the roofline uses the mean of the
      // probes beside it; the row gives the medians over reps.
      const std::span<const std::int32_t> start(prompt.data(), S);
      // Step i attends depth + S + i + 1 positions: the mean over the N steps.
      const double kv_per_token =
          static_cast<double>(kv_per_position) *
          (static_cast<double>(depth + S) + static_cast<double>(N + 1) / 2);
      const bool roofline_kv_applies =
          llc_bytes != 0 && static_cast<double>(per_token) + kv_per_token > static_cast<double>(llc_bytes);
      std::vector<double> ttfts_ms, decodes_s, probes;  // per rep: prompt prefill, N steps, GB/s
      const std::size_t bw_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
      const auto probe = [&] {
        probes.push_back(bench::measure_read_bandwidth_gbps(
            threads, bw_bytes / static_cast<std::size_t>(threads), 3));
      };
      for (int r = 0; r < reps; ++r) {
        probe();
        check(tr->truncate(depth));
        const auto t0 = std::chrono::steady_clock::now();
        check(tr->forward(start, decode::LogitsMode::last, logits));
        const auto t1 = std::chrono::steady_clock::now();
        ttfts_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        for (std::size_t i = 0; i < N; ++i) {
          const auto next = static_cast<std::int32_t>(
              std::max_element(logits.begin(), logits.end()) - logits.begin());
          check(tr->forward(std::span<const std::int32_t>(&next, 1), decode::LogitsMode::last,
                            logits));
        }
        decodes_s.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
      }
      expect_position(depth + S + N, "tg");
      probe();
      using bench::median;
      // per rep: % of the roofline (weights; weights + KV), tokens/s
      std::vector<double> shares, shares_kv, tg_tps_reps;
      for (std::size_t r = 0; r < decodes_s.size(); ++r) {
        const double bw = 0.5 * (probes[r] + probes[r + 1]);
        const double tps = static_cast<double>(N) / std::max(1e-9, decodes_s[r]);
        tg_tps_reps.push_back(tps);
        if (bw > 0) {
          shares.push_back(static_cast<double>(per_token) * tps / (bw * 1e9) * 100);
          shares_kv.push_back((static_cast<double>(per_token) + kv_per_token) * tps / (bw * 1e9) *
                              100);
        }
        bench::note("[bench] t={} tg{} d={} rep {}: {:.2f} tok/s, bandwidth {:.1f} / {:.1f} GB/s "
                    "-> {:.0f}% (weights), {:.0f}% (weights + KV)",
                    threads, N, depth, r, tps, probes[r], probes[r + 1],
                    bw > 0 ? shares.back() : std::nan(""), bw > 0 ? shares_kv.back() : std::nan(""));
      }
      const bench::stats ttft = bench::summarize(ttfts_ms), tg_tps = bench::summarize(tg_tps_reps);
      const double ttft_ms = ttft.median;
      const double membw = median(probes);
      const double roofline = shares.empty() ? std::nan("") : median(shares);  // NaN: null
      const double roofline_kv = shares_kv.empty() ? std::nan("") : median(shares_kv);
      bench::note("[bench] t={} d={} pp{} {:.1f} tok/s, tg{} {:.1f} tok/s ({:.0f}% of {:.1f} GB/s; "
                  "{:.0f}% with {:.2f} MB of KV per token)",
                  threads, depth, P, pp_tps.median, N, tg_tps.median, roofline, membw, roofline_kv,
                  kv_per_token / 1e6);
      out.row({dir, "tg" + std::to_string(N), threads, path, kv_name, tg_tps.median, tg_tps.mean,
               tg_tps.stddev, ttft.median, ttft.mean, ttft.stddev, mb,
               static_cast<long long>(bench::peak_rss_bytes()),
               membw > 0 ? bench::value(membw) : bench::value(),
               roofline_applies ? bench::value(roofline) : bench::value(), weights_state,
               bench::null, "cpu", bench::cpu_model(), bench::null, bench::null, depth,
               static_cast<long long>(std::llround(kv_per_token)),
               roofline_kv_applies ? bench::value(roofline_kv) : bench::value(), bench::null,
               bench::null, bench::null});
      if (depth != 0) continue;  // start and prefix rows: from an empty cache only

      // start16: from the start of loading to the first token of the 16-token prompt (load time
      // plus that prefill; mlock excluded), the figure an app sees at launch.
      const double start_ms = load_s * 1e3 + ttft_ms;
      bench::note("[bench] t={} start to first token of a {}-token prompt: {:.0f} ms (load {:.0f} "
                  "+ prefill {:.0f})",
                  threads, start.size(), start_ms, load_s * 1e3, ttft_ms);
      out.row({dir, "start" + std::to_string(start.size()), threads, path, kv_name, bench::null,
               bench::null, bench::null, start_ms, load_s * 1e3 + ttft.mean, ttft.stddev, mb,
               static_cast<long long>(bench::peak_rss_bytes()), bench::null, bench::null,
               weights_state, bench::null, "cpu", bench::cpu_model(), bench::null, bench::null,
               depth, bench::null, bench::null, bench::null, bench::null, bench::null});

      // Prefix cache: time to first token for a kSystem-token system prompt + a kUser-token
      // user message, cold (both prefilled) and with the system prompt's state restored from an
      // in-memory prompt cache (restore + kUser tokens). prefix_speedup = cold / cached.
      std::vector<std::int32_t> chat(kSystem + kUser);
      for (std::size_t i = 0; i < chat.size(); ++i)
        chat[i] = static_cast<std::int32_t>((i * 104729 + 7) % V);
      const std::span<const std::int32_t> sys(chat.data(), kSystem),
          user(chat.data() + kSystem, kUser);
      decode::PromptCache pc;
      if (auto st = tr->truncate(0); !st) return 1;
      if (auto st = tr->forward(sys, decode::LogitsMode::last, logits); !st) return 1;
      if (auto st = decode::save_prompt_cache(*tr, sys, pc); !st)
        return (bench::note("{}", st.error().message), 1);
      const auto cold = bench::measure(
          [&] {
            if (!tr->truncate(0) || !tr->forward(chat, decode::LogitsMode::last, logits))
              std::exit(1);
            bench::do_not_optimize(logits[0]);
          },
          reps, 0);
      const auto warm = bench::measure(
          [&] {
            if (!decode::restore_prompt_cache(*tr, pc) ||
                !tr->forward(user, decode::LogitsMode::last, logits))
              std::exit(1);
            bench::do_not_optimize(logits[0]);
          },
          reps, 0);
      bench::note("[bench] t={} prefix cache: ttft {:.1f} ms cold, {:.1f} ms from the cache "
                  "({:.1f}x; {:.1f} MB of KV state)",
                  threads, cold.median_us / 1e3, warm.median_us / 1e3,
                  cold.median_us / warm.median_us, static_cast<double>(pc.state.size()) / 1e6);
      out.row({dir, fmt::format("prefix{}+{}", kSystem, kUser), threads, path, kv_name,
               bench::null, bench::null, bench::null, warm.median_us / 1e3, warm.mean_us / 1e3,
               warm.stddev_us / 1e3, mb, static_cast<long long>(bench::peak_rss_bytes()),
               bench::null, bench::null, weights_state, cold.median_us / warm.median_us, "cpu",
               bench::cpu_model(), bench::null, bench::null, depth, bench::null, bench::null,
               bench::null, bench::null, bench::null});
    }
  }
  return 0;
}

#if EDGELLM_BENCH_VULKAN
// --backend vulkan: pp and tg rows of the model on a Vulkan device (see the top of this file).
int run_model_vulkan(const std::string& dir, const bench::options& opts, std::size_t P,
                     std::size_t N, bool exact, model::LoadOptions load, cache::KvType kv,
                     const std::string& kv_name, int device_index, backend::vk::GemvChoice gemv,
                     bench::table& out) {
  namespace vk = backend::vk;
  const auto format = vk::kv_format_of(kv, "--kv-type", "vulkan");
  if (!format) return (bench::note("{}", format.error().message), 2);
  if (load.lm_head == model::LmHeadFormat::int8) {
    bench::note("[vulkan] the int8 lm_head has no shader: running the stored (f16) one");
    load.lm_head = model::LmHeadFormat::as_stored;
  }
  const auto t_load = std::chrono::steady_clock::now();
  auto weights = model::load_weights(dir, load);
  if (!weights) return (bench::note("{}", weights.error().message), 1);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const model::TransformerWeights& w = **weights;
  const std::size_t per_token = bytes_per_token(w), V = w.config.vocab_size;
  int rc = 0;
  auto dev = bench::vulkan::open_device(device_index, rc);
  if (!dev) return rc;
  const std::string device_name = dev->info().name;
  // A CPU implementation (lavapipe) keeps weights that fit the last-level cache there, as the
  // CPU backend does: no DRAM roofline for them.
  const std::size_t llc = bench::last_level_cache_bytes();
  const bool roofline_applies =
      dev->info().type != VK_PHYSICAL_DEVICE_TYPE_CPU || (llc != 0 && per_token > llc);
  model::TransformerOptions to;
  to.context_size = P + N + 24;
  to.max_batch = std::max<std::size_t>(P, 64);
  to.path = exact ? kernels::MatmulPath::exact : kernels::MatmulPath::fast;
  vk::BackendOptions bo;
  bo.gemv = gemv;
  auto tr = make_vulkan_transformer(
      *dev, *weights, to, *format, bo);
  if (!tr) return (bench::note("[vulkan] {} (run with --backend cpu)", tr.error().message), 1);
  const std::string variant = tr->backend().gemv_variant();
  const bench::value gemv_cell = variant.empty() ? bench::value() : bench::value(variant);
  bench::note("[vulkan] {} on {}: loaded in {:.2f} s, {:.3f} GB read per token, decode GEMVs {}",
              dir, device_name, load_s, static_cast<double>(per_token) / 1e9,
              variant.empty() ? "(no int4 linears)" : variant);
  const int reps = opts.reps_or(opts.quick ? 1 : 3);
  std::vector<std::int32_t> prompt(P);
  for (std::size_t i = 0; i < P; ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
  std::vector<float> logits(V);
  const auto mb = static_cast<long long>(w.owned_bytes());
  const auto fail = [](const status& st) {
    bench::note("[vulkan] {}", st.error().message);
    std::exit(1);
  };
  const auto pp = bench::measure(
      [&] {
        if (auto st = tr->truncate(0); !st) fail(st);
        if (auto st = tr->forward(prompt, decode::LogitsMode::last, logits); !st) fail(st);
        bench::do_not_optimize(logits[0]);
      },
      reps, 1);
  std::vector<double> pp_tps_reps, pp_ms_reps;
  for (const double us : pp.samples_us) {
    pp_tps_reps.push_back(static_cast<double>(P) / (us * 1e-6));
    pp_ms_reps.push_back(us / 1e3);
  }
  const bench::stats pp_tps = bench::summarize(pp_tps_reps), pp_ms = bench::summarize(pp_ms_reps);
  out.row({dir, "pp" + std::to_string(P), bench::null, "vulkan", kv_name, pp_tps.median,
           pp_tps.mean, pp_tps.stddev, pp_ms.median, pp_ms.mean, pp_ms.stddev, mb,
           static_cast<long long>(bench::peak_rss_bytes()), bench::null, bench::null,
           "device", bench::null, "vulkan", device_name, bench::null, gemv_cell});
  // tg: N greedy steps after a 16-token prompt, the Vulkan probe before each rep and after the
  // last; submissions counted over the steps.
  const std::size_t probe_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
  std::vector<double> probes, decodes_s, ttfts_ms;
  const auto probe = [&] { probes.push_back(bench::vulkan::probe_gbps(*dev, probe_bytes)); };
  const std::vector<std::int32_t> start(prompt.begin(),
                                        prompt.begin() + std::min<std::size_t>(16, P));
  std::size_t submits = 0;
  for (int r = 0; r < reps; ++r) {
    probe();
    if (auto st = tr->truncate(0); !st) fail(st);
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = tr->forward(start, decode::LogitsMode::last, logits); !st) fail(st);
    const auto t1 = std::chrono::steady_clock::now();
    ttfts_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const std::size_t s0 = tr->backend().submits();
    for (std::size_t i = 0; i < N; ++i) {
      const auto next = static_cast<std::int32_t>(
          std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (auto st = tr->forward(std::span(&next, 1), decode::LogitsMode::last, logits); !st)
        fail(st);
    }
    decodes_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    submits += tr->backend().submits() - s0;
  }
  probe();
  std::vector<double> shares, tps_reps;
  for (std::size_t r = 0; r < decodes_s.size(); ++r) {
    const double bw = 0.5 * (probes[r] + probes[r + 1]);
    const double tps = static_cast<double>(N) / std::max(1e-9, decodes_s[r]);
    tps_reps.push_back(tps);
    if (bw > 0) shares.push_back(static_cast<double>(per_token) * tps / (bw * 1e9) * 100);
  }
  const bench::stats tg = bench::summarize(tps_reps), ttft = bench::summarize(ttfts_ms);
  const double membw = bench::median(probes);
  const double roofline = shares.empty() ? std::nan("") : bench::median(shares);
  const double spt = static_cast<double>(submits) / static_cast<double>(N * static_cast<std::size_t>(reps));
  bench::note("[vulkan] pp{} {:.1f} tok/s, tg{} {:.2f} tok/s ({:.0f}% of the {:.2f} GB/s Vulkan "
              "probe), {:.2f} submissions per token",
              P, pp_tps.median, N, tg.median, roofline, membw, spt);
  out.row({dir, "tg" + std::to_string(N), bench::null, "vulkan", kv_name, tg.median, tg.mean,
           tg.stddev, ttft.median, ttft.mean, ttft.stddev, mb,
           static_cast<long long>(bench::peak_rss_bytes()),
           membw > 0 ? bench::value(membw) : bench::value(),
           roofline_applies ? bench::value(roofline) : bench::value(), "device", bench::null,
           "vulkan", device_name, spt, gemv_cell});
  return 0;
}
#endif

// --profile: N greedy single-token steps after a 16-token prompt and 2 warm-up steps, with
// every op of the steps timed; the rows are described at the top of this file.
template <class Cache>
int run_profile(const std::string& dir, const bench::options& opts, std::size_t N, bool exact,
                const model::LoadOptions& load, const std::string& kv_name, bench::table& out) {
  EngineOptions eo;
  eo.load = load;
  eo.load_tokenizer = false;
  auto engine = Engine::load(dir, eo);
  if (!engine) return (bench::note("{}", engine.error().message), 1);
  const std::shared_ptr<const model::TransformerWeights>& weights = (*engine)->weights();
  const std::size_t V = weights->config.vocab_size;
  const std::string path = exact ? "exact" : "fast";
  for (const int threads : opts.threads_or({1, 2})) {
    auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
    if (!pool) return (bench::note("{}", pool.error().message), 2);
    backend::Profile profile;
    model::TransformerOptions to;
    to.pool = pool->get();
    to.path = exact ? kernels::MatmulPath::exact : kernels::MatmulPath::fast;
    to.context_size = 16 + 2 + N + 8;
    to.profile = &profile;
    auto tr = model::Transformer<Cache>::create(weights, to);
    if (!tr) return (bench::note("{}", tr.error().message), 1);
    std::vector<float> logits(V);
    std::vector<std::int32_t> start(16);
    for (std::size_t i = 0; i < start.size(); ++i)
      start[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
    if (auto st = tr->forward(start, decode::LogitsMode::last, logits); !st)
      return (bench::note("{}", st.error().message), 1);
    std::uint64_t regions0 = 0;
    std::chrono::steady_clock::duration wall{};
    for (std::size_t i = 0; i < 2 + N; ++i) {
      if (i == 2) {  // after the warm-up steps: count from here
        profile.reset();
        regions0 = (*pool)->regions();
        wall = {};
      }
      const auto next = static_cast<std::int32_t>(
          std::max_element(logits.begin(), logits.end()) - logits.begin());
      const auto t0 = std::chrono::steady_clock::now();
      if (auto st = tr->forward(std::span<const std::int32_t>(&next, 1),
                                decode::LogitsMode::last, logits);
          !st)
        return (bench::note("{}", st.error().message), 1);
      wall += std::chrono::steady_clock::now() - t0;
    }
    const double n = static_cast<double>(N);
    const double wall_ns = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(wall).count());
    const double regions = static_cast<double>((*pool)->regions() - regions0);
    const backend::OpStats total = profile.total();
    const auto row = [&](std::string_view op, double ns, bench::value calls, bench::value forks,
                         bench::value tps) {
      out.row({dir, "tg" + std::to_string(N), threads, path, kv_name, std::string(op),
               ns / n / 1e6, wall_ns > 0 ? bench::value(ns / wall_ns * 100) : bench::value(),
               calls, forks, tps});
    };
    bench::note("[bench] {} t={} profile of tg{}: {:.3f} ms/token, {:.1f} fork-joins/token", dir,
                threads, N, wall_ns / n / 1e6, regions / n);
    for (std::size_t k = 0; k < backend::kOpKinds; ++k) {
      const auto kind = static_cast<backend::OpKind>(k);
      const backend::OpStats& s = profile[kind];
      bench::note("[bench]   {:<10} {:8.3f} ms/token {:5.1f} % {:6.1f} calls/token {:6.1f} "
                  "fork-joins/token",
                  backend::op_kind_name(kind), static_cast<double>(s.ns) / n / 1e6,
                  wall_ns > 0 ? static_cast<double>(s.ns) / wall_ns * 100 : 0.0,
                  static_cast<double>(s.calls) / n, static_cast<double>(s.regions) / n);
      row(backend::op_kind_name(kind), static_cast<double>(s.ns),
          static_cast<double>(s.calls) / n, static_cast<double>(s.regions) / n, bench::null);
    }
    // Between ops: what the step's wall time holds beyond its timed ops; fork-joins outside
    // ops (none expected).
    row("untimed", std::max(0.0, wall_ns - static_cast<double>(total.ns)), bench::null,
        std::max(0.0, regions - static_cast<double>(total.regions)) / n, bench::null);
    row("total", wall_ns, static_cast<double>(total.calls) / n, regions / n,
        wall_ns > 0 ? bench::value(n / (wall_ns * 1e-9)) : bench::value());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  std::size_t P = 128, N = 64;
  std::vector<std::size_t> depths{0};
  bool exact = false, lock = true, packed_copy = false, force = false, allow_extra = false;
  bool profile = false;
  std::string kv = "int8", backend_arg = "cpu";
  int device_index = -1;
  backend::vk::GemvChoice vk_gemv = backend::vk::GemvChoice::automatic;
  model::LmHeadFormat lm_head = model::LmHeadFormat::int8;  // the CLIs' default
  std::string packed_cache;
  bench::options o;
  using bench::flag;
  bench::parse_options(
      argc, argv, o,
      {
          flag::strings({"-m", "--model"}, "DIR", "checkpoint directory (repeatable)", models),
          flag::number<std::size_t>({"-p"}, "N", "prompt tokens for the pp test", P, 1, 1000000),
          flag::number<std::size_t>({"-n"}, "N", "generated tokens for the tg test", N, 1,
                                    1000000),
          flag::list<std::size_t>(
              {"-d", "--depth"}, "N[,N...]",
              "depths: pp and tg run after N tokens of context are in the KV cache\n"
              "(an untimed prefill); start and prefix rows at depth 0 only. tg rows:\n"
              "kv_bytes_per_token, and pct_roofline_kv counting weights + KV bytes\n"
              "(pct_roofline: weights only). pp rows: pct_compute (int8 GEMM MACs/s\n"
              "against the int8_instruction probe)",
              depths, std::size_t{0}, std::size_t{1} << 24),
          flag::threads({"-t"}, "thread counts; same as --threads", o.threads)
              .shows_default("1,2"),
          flag::boolean({"--exact"}, "exact fp32 int4 path instead of the fast W4A8 path", exact),
          flag::choice({"--lm-head"},
                       "lm_head as stored (f16) or quantised at load to int8 / int4 (aliases: "
                       "as_stored, q4)",
                       lm_head,
                       {{"f16", model::LmHeadFormat::as_stored},
                        {"int8", model::LmHeadFormat::int8},
                        {"int4", model::LmHeadFormat::q4},
                        {"as_stored", model::LmHeadFormat::as_stored},
                        {"q4", model::LmHeadFormat::q4}}),
          flag::string({"--packed-cache"}, "auto|FILE",
                       "map the int4 weights from a packed cache (written if missing)",
                       packed_cache),
          flag::boolean({"--packed-cache-copy"},
                        "copy them out of it into owned 2 MiB-page memory instead", packed_copy),
          flag::boolean({"--force"},
                        "with --packed-cache FILE: replace a file there of another model", force),
          flag::boolean({"--allow-extra-tensors"},
                        "load checkpoints holding tensors their config.json does not use",
                        allow_extra),
          flag::string({"--kv-type", "--kv"}, "int8|int4|f16|f32", "KV cache type", kv),
          flag::boolean({"--no-lock"}, "do not mlock the packed weights", lock, false),
          flag::string({"--backend"}, "cpu|vulkan",
                       "where the model runs: the CPU backend, or every op and the KV cache\n"
                       "on a Vulkan device (builds with the Vulkan backend)",
                       backend_arg),
          flag::number<int>({"--device"}, "N",
                            "Vulkan device index (-1: discrete > integrated > CPU)",
                            device_index, -1, 1024),
          flag::choice({"--vk-gemv"},
                       "with --backend vulkan, the int4 decode GEMVs: auto (W4A8 where the\n"
                       "device accelerates integer dot products, unless --exact), fp32, int8\n"
                       "(W4A8 everywhere) or int8-dot (refused without integer dot products)",
                       vk_gemv,
                       {{"auto", backend::vk::GemvChoice::automatic},
                        {"fp32", backend::vk::GemvChoice::fp32},
                        {"int8", backend::vk::GemvChoice::int8},
                        {"int8-dot", backend::vk::GemvChoice::int8_dot}}),
          flag::boolean({"--profile"},
                        "instead of the timing rows: ms, calls and fork-joins per token\nper "
                        "op kind of a tg decode",
                        profile),
      },
      "End-to-end prompt processing and generation speed of checkpoints (rows pp, tg, start, "
      "prefix).");
  if (models.empty()) {
    bench::note("{}: no model: pass -m DIR (--help lists the flags)", argv[0]);
    return 2;
  }
  const auto kv_type = cache::parse_kv_type(kv);
  if (!kv_type) return (bench::note("--kv-type: {}", kv_type.error().message), 2);
  kv = cache::kv_type_name(*kv_type);
  if (o.quick) {
    P = std::min<std::size_t>(P, 32);
    N = std::min<std::size_t>(N, 8);
  }
  model::LoadOptions load;
  load.lm_head = lm_head;
  load.packed_cache = packed_cache;
  load.packed_cache_copy = packed_copy;
  load.packed_cache_overwrite = force;
  load.allow_extra_tensors = allow_extra;
  const bool deep = std::any_of(depths.begin(), depths.end(), [](std::size_t d) { return d > 0; });
  if (deep && (profile || backend_arg != "cpu")) {
    bench::note("-d: depths other than 0 apply to the CPU timing rows (not --profile or "
                "--backend vulkan)");
    return 2;
  }
  if (profile) {
    bench::table prof(o, {"model", "test", "threads", "path", "kv_type", "op", "ms_per_token",
                          "pct_token", "calls_per_token", "forkjoins_per_token",
                          "tokens_per_s"});
    for (const auto& dir : models) {
      const int rc = cache::with_kv_type(*kv_type, [&](auto tag) {
        return run_profile<typename decltype(tag)::type>(dir, o, N, exact, load, kv, prof);
      });
      if (rc != 0) return rc;
    }
    return 0;
  }
  if (backend_arg != "cpu" && backend_arg != "vulkan") {
    bench::note("--backend {}: expected cpu or vulkan", backend_arg);
    return 2;
  }
  if (backend_arg != "vulkan" && o.was_given("--vk-gemv")) {
    bench::note("--vk-gemv: applies to --backend vulkan only");
    return 2;
  }
  if (backend_arg == "vulkan") {
#if EDGELLM_BENCH_VULKAN
    if (profile) return (bench::note("--profile times the CPU backend's ops; drop --backend vulkan"), 2);
    bench::table vout(o, {"model", "test", "threads", "path", "kv_type", "tokens_per_s_median",
                          "tokens_per_s_mean", "tokens_per_s_stddev", "ttft_ms_median",
                          "ttft_ms_mean", "ttft_ms_stddev", "model_bytes", "peak_rss_bytes",
                          "membw_gbps", "pct_roofline", "weights", "prefix_speedup", "backend",
                          "device", "submits_per_token", "gemv"});
    for (const auto& dir : models)
      if (const int rc = run_model_vulkan(dir, o, P, N, exact, load, *kv_type, kv, device_index,
                                          vk_gemv, vout);
          rc != 0)
        return rc;
    return 0;
#else
    bench::note("--backend vulkan: {}", bench::vulkan::kNotBuilt);
    return 2;
#endif
  }
  bench::table out(o, {"model", "test", "threads", "path", "kv_type", "tokens_per_s_median",
                       "tokens_per_s_mean", "tokens_per_s_stddev", "ttft_ms_median",
                       "ttft_ms_mean", "ttft_ms_stddev", "model_bytes", "peak_rss_bytes",
                       "membw_gbps", "pct_roofline", "weights", "prefix_speedup", "backend",
                       "device", "submits_per_token", "gemv", "depth", "kv_bytes_per_token",
                       "pct_roofline_kv", "int8_macs_per_s", "int8_peak_macs_per_s",
                       "pct_compute"});
  // The instruction of the compute probe (int8_peak_macs_per_s): the prefill GEMM's.
  out.add_metadata("int8_instruction", bench::int8_gemm_instruction().instruction);
  const std::size_t llc = bench::last_level_cache_bytes();
  for (const auto& dir : models) {
    const int rc = cache::with_kv_type(*kv_type, [&](auto tag) {
      using Cache = typename decltype(tag)::type;
      return run_model<Cache>(dir, o, P, N, depths, exact, load, lock, kv, llc, out);
    });
    if (rc != 0) return rc;
  }
  return 0;
}

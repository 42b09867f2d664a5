// SPDX-License-Identifier: Apache-2.0
// edgellm-bench-attention: one decode step's attention over the KV cache, for each KV type
// (f32, f16, int8, int4), at several context lengths, with the attention shapes of Qwen2-7B
// (28 query heads, 4 KV heads, head_dim 128, 28 layers) and Llama-3-8B (32 / 8 / 128, 32 layers).
//
// A decode step reads every layer's cache once, so a rep attends one query (at position
// context - 1) in every layer of a cache holding `context` positions per layer: the working
// set is the whole multi-layer cache (0.1-2 GB), not one layer's, which would sit in the CPU
// cache. median_us (and p10, p90, mean, stddev, min) is per layer (the rep's figure / layers).
// kv_bytes: bytes of K/V (scales included) that one layer's step reads, i.e. context positions
// of every kv head; gbps = kv_bytes / median time per layer; membw_gbps: the read bandwidth this
// binary measures with the same thread count (pct_membw = gbps / membw_gbps); speedup_vs_f16:
// the f16 row's median over this row's, same model, context and threads (types are measured in
// turn in the same run; null without an f16 row). The cache memory is mlocked when
// RLIMIT_MEMLOCK allows (`cache` column).
//
// --backend vulkan: the same step on a Vulkan device (backend/vulkan/attention.hpp) over its
// int8 and f16 caches (the device has no f32 cache): a rep is one submission of `layers`
// attention dispatches; membw_gbps is the Vulkan read probe on the same device, measured before
// and after the rows of each model (their mean); threads is null, `cache` says "device".
// Every row names its backend and device (the CPU model, or the driver's device name).
#include <xsimd/xsimd.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "edgellm/cache/quantized_kv_cache.hpp"
#include "edgellm/thread_pool.hpp"
#include "harness.hpp"
#include "vulkan.hpp"

#if EDGELLM_BENCH_VULKAN
#include "edgellm/backend/vulkan/attention.hpp"
#include "edgellm/backend/vulkan/kv_cache.hpp"
#endif

namespace bench = edgellm::bench;
using namespace edgellm;
using namespace edgellm::cache;

namespace {

struct ModelShape {
  const char* name;
  std::size_t layers, heads, kv_heads, head_dim;
};

// One cache of each type, filled to the largest context, type-erased for the timing loop.
struct AnyCache {
  KvType type;
  std::unique_ptr<KVCacheF32> f32;
  std::unique_ptr<KVCacheF16> f16;
  std::unique_ptr<KVCacheQ8> q8;
  std::unique_ptr<KVCacheQ4> q4;
  bool locked = false;

  template <class Fn>
  decltype(auto) visit(Fn&& fn) {
    switch (type) {
      case KvType::f32: return fn(*f32);
      case KvType::f16: return fn(*f16);
      case KvType::int4: return fn(*q4);
      case KvType::int8: break;
    }
    return fn(*q8);
  }
};

// Bytes one layer's decode step reads at `context` positions.
std::size_t step_bytes(KvType t, const ModelShape& m, std::size_t context) {
  return with_kv_type(t, [&](auto tag) {
    using Cache = typename decltype(tag)::type;
    return m.kv_heads * context * 2 * Cache::row_bytes(m.head_dim);
  });
}

// Fills every layer of c with `positions` positions of pseudo-random keys/values (one block of
// data, appended repeatedly: the content does not change the work).
template <class Cache>
bool fill(Cache& c, std::size_t positions) {
  const std::size_t row = c.kv_heads() * c.head_dim(), block = 256;
  std::vector<float> k(block * row), v(block * row);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (std::size_t l = 0; l < c.layers(); ++l) {
    for (std::size_t p = 0; p < positions; p += block) {
      const std::size_t n = std::min(block, positions - p);
      auto st = c.append(l, p, n, std::span(k).first(n * row), std::span(v).first(n * row));
      if (!st) {
        bench::note("{}", st.error().message);
        return false;
      }
    }
  }
  return true;
}

#if EDGELLM_BENCH_VULKAN
// --backend vulkan: every model's rows on the device `device_index`.
int run_vulkan(const std::vector<ModelShape>& models, const std::vector<KvType>& types,
               const std::vector<std::size_t>& contexts, const bench::options& opts,
               int device_index, const std::string& build_arg, bench::table& out) {
  namespace vk = edgellm::backend::vk;
  int rc = 0;
  auto dev = bench::vulkan::open_device(device_index, rc);
  if (!dev) return rc;
  const std::string device_name = dev->info().name;
  const auto fail = [](const error& e) { return bench::note("[vulkan] {}", e.message), 1; };
  auto append = vk::KvAppend::create(*dev);
  vk::AttentionOptions attention_options;
  for (vk::AttentionBuild b : {vk::AttentionBuild::best, vk::AttentionBuild::portable,
                               vk::AttentionBuild::subgroup, vk::AttentionBuild::storage})
    if (build_arg == vk::attention_build_name(b)) attention_options.build = b;
  auto attention = vk::Attention::create(*dev, attention_options);
  if (!append) return fail(append.error());
  if (!attention) return fail(attention.error());
  bench::note("[attention] the {} build of the shader, {} invocations x {} positions a block",
              attention->variant(), attention->workgroup_size(),
              attention->positions_per_invocation());
  const int reps = opts.reps_or(opts.quick ? 3 : 9);
  const std::size_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  const std::size_t probe_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
  for (const ModelShape& m : models) {
    // Fill chunk: `block` rows of pseudo-random keys and values, appended repeatedly.
    const std::size_t row = m.kv_heads * m.head_dim, block = 256;
    std::vector<float> kv_rows(block * row), q(m.heads * m.head_dim);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : kv_rows) x = nd(rng);
    for (auto& x : q) x = nd(rng);
    auto k = vk::Buffer::create(*dev, kv_rows.size() * 4, "bench k", {vk::BufferKind::host_io});
    auto qb = vk::Buffer::create(*dev, q.size() * 4, "bench q", {vk::BufferKind::host_io});
    auto ob = vk::Buffer::create(*dev, q.size() * 4, "bench out");
    if (!k) return fail(k.error());
    if (!qb) return fail(qb.error());
    if (!ob) return fail(ob.error());
    if (auto st = k->write(std::as_bytes(std::span(kv_rows))); !st) return fail(st.error());
    if (auto st = qb->write(std::as_bytes(std::span(q))); !st) return fail(st.error());
    const double bw_before = bench::vulkan::probe_gbps(*dev, probe_bytes);
    struct Row {
      KvType type;
      std::size_t ctx;
      bench::timing t;
    };
    std::vector<Row> rows;
    for (const KvType t : types) {
      const auto format = vk::kv_format_of(t, "kv type", "vulkan");
      if (!format) {
        bench::note("[vulkan] {}: {}; skipped", m.name, format.error().message);
        continue;
      }
      auto cache = vk::KVCache::create(*dev, *format,
                                       m.layers, m.kv_heads, m.head_dim, max_ctx);
      if (!cache) return fail(cache.error());
      for (std::size_t l = 0; l < m.layers; ++l) {
        auto seq = vk::CommandSequence::create(*dev, "bench fill");
        if (!seq) return fail(seq.error());
        for (std::size_t p = 0; p < max_ctx; p += block) {
          const std::size_t n = std::min(block, max_ctx - p);
          if (auto st = append->record(*seq, *cache, *k, *k, l, p, n); !st) return fail(st.error());
        }
        if (auto st = seq->submit(); !st) return fail(st.error());
      }
      bench::note("[attention] {} {} on {}: {:.1f} MB of device memory", m.name,
                  kv_type_name(t), device_name, static_cast<double>(cache->bytes()) / 1e6);
      for (const std::size_t ctx : contexts) {
        // One query at position ctx - 1 in every layer: one submission per rep.
        auto seq = vk::CommandSequence::create(*dev, "bench attention");
        if (!seq) return fail(seq.error());
        for (std::size_t l = 0; l < m.layers; ++l)
          if (auto st = attention->record(*seq, *cache, *qb, *ob, m.heads, l, ctx - 1, 1); !st)
            return fail(st.error());
        const auto timing = bench::vulkan::time_submits(*seq, reps);
        if (!timing) return 1;
        rows.push_back({t, ctx, *timing});
      }
    }
    const double bw_after = bench::vulkan::probe_gbps(*dev, probe_bytes);
    const double bw = (bw_before + bw_after) / 2;
    bench::note("[attention] {}: Vulkan probe {:.2f} / {:.2f} GB/s", m.name, bw_before, bw_after);
    for (const Row& r : rows) {
      double f16_us = 0.0;
      for (const Row& o : rows)
        if (o.type == KvType::f16 && o.ctx == r.ctx) f16_us = o.t.median_us;
      const double L = static_cast<double>(m.layers);
      const std::size_t bytes = step_bytes(r.type, m, r.ctx);
      const double us = r.t.median_us / L, gbps = static_cast<double>(bytes) / (us * 1e3);
      const double speedup =
          f16_us > 0 ? f16_us / r.t.median_us : std::numeric_limits<double>::quiet_NaN();
      const std::string name = fmt::format("{} {} {} vulkan", m.name, kv_type_name(r.type), r.ctx);
      if (!opts.selected(name)) continue;
      bench::note("[attention] {}: {:.1f} us/layer, {:.2f} GB/s, {:.2f}x f16", name, us, gbps,
                  speedup);
      out.row({m.name, kv_type_name(r.type), r.ctx, m.layers, m.heads, m.kv_heads, m.head_dim,
               bench::null, r.t.reps, us, r.t.p10_us / L, r.t.p90_us / L, r.t.mean_us / L,
               r.t.stddev_us / L, r.t.min_us / L, bytes, gbps,
               bw > 0 ? bench::value(bw) : bench::value(),
               bw > 0 ? bench::value(100 * gbps / bw) : bench::value(), speedup, "device",
               "vulkan", device_name});
    }
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string model_arg = "all", kv_arg = "f32,f16,int8,int4", backend_arg = "cpu",
              build_arg = "best";
  int device_index = -1;
  std::vector<std::size_t> contexts{512, 2048, 4096, 8192};
  bool lock = true;
  bench::options opts;
  using bench::flag;
  bench::parse_options(
      argc, argv, opts,
      {
          flag::string({"--model"}, "qwen2-7b|llama3-8b|all", "attention shapes", model_arg),
          flag::list<std::size_t>({"--context", "-c"}, "N[,N...]", "context lengths", contexts, 1,
                                  std::size_t{1} << 24),
          flag::string({"--kv-types"}, "f32,f16,int8,int4", "KV types", kv_arg),
          flag::boolean({"--no-lock"}, "do not mlock the caches", lock, false),
          flag::string({"--backend"}, "cpu|vulkan",
                       "where attention runs: the CPU caches, or a Vulkan device's (int8, f16)",
                       backend_arg),
          flag::number<int>({"--device"}, "N",
                            "Vulkan device index (-1: discrete > integrated > CPU)",
                            device_index, -1, 1024),
          flag::string({"--attention-build"}, "best|portable|subgroup|storage",
                       "the Vulkan attention shader's build (best: the device's fastest)",
                       build_arg),
      },
      "One decode step's attention over the KV cache, per KV type and context length.");
  std::vector<KvType> types;
  for (const std::string_view s : bench::flag::split_list(kv_arg)) {
    auto t = parse_kv_type(s);
    if (!t) {
      bench::note("--kv-types: {}", t.error().message);
      return 2;
    }
    types.push_back(*t);
  }
  std::vector<ModelShape> models;
  const ModelShape qwen{"qwen2-7b", 28, 28, 4, 128}, llama{"llama3-8b", 32, 32, 8, 128};
  if (model_arg == "qwen2-7b" || model_arg == "all") models.push_back(qwen);
  if (model_arg == "llama3-8b" || model_arg == "all") models.push_back(llama);
  if (models.empty()) {
    bench::note("{}: --model: '{}' is not one of 'qwen2-7b', 'llama3-8b', 'all'", argv[0],
                model_arg);
    return 2;
  }
  if (opts.quick) {
    // Smoke run: 4 layers at two short contexts (~10 MB), a second or two in all.
    contexts = {256, 1024};
    for (auto& m : models) m.layers = 4;
  }
  if (backend_arg != "cpu" && backend_arg != "vulkan") {
    bench::note("{}: --backend {}: expected cpu or vulkan", argv[0], backend_arg);
    return 2;
  }
  if (build_arg != "best" && build_arg != "portable" && build_arg != "subgroup" &&
      build_arg != "storage") {
    bench::note("{}: --attention-build {}: expected best, portable, subgroup or storage", argv[0],
                build_arg);
    return 2;
  }
  if (device_index >= 0 && backend_arg != "vulkan") {
    bench::note("{}: --device: applies to --backend vulkan only", argv[0]);
    return 2;
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> default_threads{1};
  if (hw > 1) default_threads.push_back(2);
  const std::vector<int> thread_counts = opts.threads_or(default_threads);
  const int reps = opts.reps_or(opts.quick ? 3 : 9);
  const std::size_t max_ctx = *std::max_element(contexts.begin(), contexts.end());

  bench::table out(opts, {"model", "kv_type", "context", "layers", "heads", "kv_heads", "head_dim",
                          "threads", "reps", "median_us", "p10_us", "p90_us", "mean_us",
                          "stddev_us", "min_us", "kv_bytes", "gbps", "membw_gbps", "pct_membw",
                          "speedup_vs_f16", "cache", "backend", "device"});
  out.add_metadata("arch", xsimd::default_arch::name());
  out.add_metadata("time_columns", "us per layer: one decode step's attention (1 query)");
  if (backend_arg == "vulkan") {
#if EDGELLM_BENCH_VULKAN
    return run_vulkan(models, types, contexts, opts, device_index, build_arg, out);
#else
    bench::note("{}: --backend vulkan: {}", argv[0], bench::vulkan::kNotBuilt);
    return 2;
#endif
  }
  const std::string cpu_name = bench::cpu_model();

  std::map<int, double> membw;
  for (int threads : thread_counts) {
    const std::size_t bw_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
    membw[threads] = bench::measure_read_bandwidth_gbps(
        threads, bw_bytes / static_cast<std::size_t>(threads), 3);
    bench::note("[attention] read bandwidth, {} thread(s): {:.1f} GB/s", threads, membw[threads]);
  }

  for (const ModelShape& m : models) {
    std::vector<AnyCache> caches;
    for (KvType t : types) {
      AnyCache c;
      c.type = t;
      bool ok = false;
      with_kv_type(t, [&](auto tag) {
        using Cache = typename decltype(tag)::type;
        auto r = Cache::create(m.layers, m.kv_heads, m.head_dim, max_ctx);
        if (!r) {
          bench::note("{}", r.error().message);
          return;
        }
        auto p = std::make_unique<Cache>(std::move(*r));
        ok = fill(*p, max_ctx);
        if constexpr (std::is_same_v<Cache, KVCacheF32>) c.f32 = std::move(p);
        if constexpr (std::is_same_v<Cache, KVCacheF16>) c.f16 = std::move(p);
        if constexpr (std::is_same_v<Cache, KVCacheQ8>) c.q8 = std::move(p);
        if constexpr (std::is_same_v<Cache, KVCacheQ4>) c.q4 = std::move(p);
      });
      if (!ok) return 1;
      if (lock) {
        // The cache's storage is one block per K and V; lock the address range of each layer
        // view (k, v and scales of all layers are contiguous per array).
        c.locked = c.visit([&](auto& cache) {
          const auto v = cache.layer_view(0);
          using E = std::remove_cv_t<std::remove_pointer_t<decltype(v.k)>>;
          using C = std::remove_cvref_t<decltype(cache)>;
          const std::size_t rows = cache.layers() * v.kv_heads * v.slots;
          const std::size_t n = rows * v.head_dim / C::values_per_element * sizeof(E);
          bool locked = bench::lock_memory(v.k, n, "keys") && bench::lock_memory(v.v, n, "values");
          if (v.k_scale) {
            using S = std::remove_cv_t<std::remove_pointer_t<decltype(v.k_scale)>>;
            const std::size_t s = rows * cache.scales_per_row() * sizeof(S);
            locked = bench::lock_memory(v.k_scale, s, "key scales") &&
                     bench::lock_memory(v.v_scale, s, "value scales") && locked;
          }
          return locked;
        });
      }
      bench::note("[attention] {} {}: {:.1f} MB, {}", m.name, kv_type_name(t),
                  static_cast<double>(c.visit([](auto& x) { return x.bytes(); })) / 1e6,
                  c.locked ? "mlocked" : "resident");
      caches.push_back(std::move(c));
    }

    std::vector<float> q(m.heads * m.head_dim), o(q.size());
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : q) x = nd(rng);
    for (int threads : thread_counts) {
      auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
      if (!pool) {
        bench::note("{}", pool.error().message);
        return 2;
      }
      for (std::size_t ctx : contexts) {
        // Types in turn, then the rows (speedup needs the f16 time).
        std::vector<bench::timing> times;
        for (AnyCache& c : caches) {
          times.push_back(bench::measure(
              [&] {
                c.visit([&](auto& cache) {
                  for (std::size_t l = 0; l < m.layers; ++l) {
                    auto st = cache.attend(l, q, 1, ctx - 1, m.heads, o, pool->get());
                    if (!st) {
                      bench::note("{}", st.error().message);
                      std::exit(1);
                    }
                  }
                });
                bench::do_not_optimize(o[0]);
              },
              reps));
        }
        double f16_us = 0.0;
        for (std::size_t i = 0; i < caches.size(); ++i)
          if (caches[i].type == KvType::f16) f16_us = times[i].median_us;
        for (std::size_t i = 0; i < caches.size(); ++i) {
          const double L = static_cast<double>(m.layers);
          const bench::timing& t = times[i];
          const std::size_t bytes = step_bytes(caches[i].type, m, ctx);
          const double us = t.median_us / L;
          const double gbps = static_cast<double>(bytes) / (us * 1e3);
          const double bw = membw[threads];
          const double speedup = f16_us > 0 ? f16_us / t.median_us
                                            : std::numeric_limits<double>::quiet_NaN();
          const std::string name = fmt::format("{} {} {} t={}", m.name, kv_type_name(caches[i].type), ctx, threads);
          if (!opts.selected(name)) continue;
          bench::note("[attention] {}: {:.1f} us/layer, {:.1f} GB/s, {:.2f}x f16", name, us, gbps, speedup);
          out.row({m.name, kv_type_name(caches[i].type), ctx, m.layers, m.heads, m.kv_heads,
                   m.head_dim, threads, t.reps, us, t.p10_us / L, t.p90_us / L, t.mean_us / L,
                   t.stddev_us / L, t.min_us / L, bytes, gbps,
                   bw > 0 ? bench::value(bw) : bench::value(),
                   bw > 0 ? bench::value(100 * gbps / bw) : bench::value(), speedup,
                   caches[i].locked ? "mlocked" : "resident", "cpu", cpu_name});
        }
      }
    }
    for (AnyCache& c : caches) {
      if (!lock) continue;
      c.visit([&](auto& cache) {
        const auto v = cache.layer_view(0);
        using E = std::remove_cv_t<std::remove_pointer_t<decltype(v.k)>>;
        const std::size_t n = cache.layers() * v.kv_heads * v.slots * v.head_dim * sizeof(E);
        bench::unlock_memory(v.k, n);
        bench::unlock_memory(v.v, n);
        if (v.k_scale) {
          const std::size_t s = cache.layers() * v.kv_heads * v.slots * sizeof(float);
          bench::unlock_memory(v.k_scale, s);
          bench::unlock_memory(v.v_scale, s);
        }
      });
    }
  }
  return 0;
}

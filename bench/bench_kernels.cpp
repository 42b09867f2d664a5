// SPDX-License-Identifier: Apache-2.0
// edgellm-bench-kernels: int4 GEMV (decode) and GEMM (prefill) speed, exact and fast paths,
// against the memory read bandwidth this binary measures in the same run; with --weights int8
// or all, the same GEMV rows for the int8 format (Q8Matrix::byte_size: codes and fp32 scales,
// 8.25 bits per weight at group 128).
//
// Bytes moved (gbps column) = packed weight bytes read per call (Q4Matrix::byte_size: codes,
// fp16 scales and zero points; 4.25 bits per weight at group 128); activations and outputs are
// small and cache resident. pct_membw = gbps / membw_gbps, where membw_gbps is the read
// bandwidth measured with the same thread count just before and just after the GEMV rows.
// --read-row adds two rows per GEMV case: read_weights[_q8], the same weight bytes read by the
// probe's loop over the same pool (pct_membw against the probe), then gemv[_q8]_vs_read, GEMV
// passes timed in alternation with those reads (pct_membw against that read, not the probe):
// how close the kernel comes to a plain read of its own bytes on a host whose bandwidth drifts.
// Columns that do not apply to a row are null (empty in tsv/csv): k of a multi-shape case,
// membw_gbps, pct_membw and cost_vs_m1 of the gemm row, cost_vs_m1 without an m = 1 row.
//
// --backend vulkan (a build with the Vulkan backend): the same int4 GEMV working set uploaded
// to a Vulkan device once, every matrix's GEMV recorded in one CommandSequence and the pass timed
// as one submission (host wall time, submit to fence); membw_gbps is the Vulkan bandwidth probe
// (backend/vulkan/membw_probe.hpp, best of its repetitions) on the same device in the same run.
// Rows carry `backend` (cpu or vulkan) and `device` (the CPU model, or the driver's device name).
// Vulkan rows per shader build (isa column): path exact, fp32 activations (spirv-subgroup or
// spirv-portable); path fast, int8 activations (W4A8: a quantise dispatch before each matrix's
// GEMV), spirv-int8-dot where the device has shaderIntegerDotProduct and spirv-int8-portable
// on every device. Each build uploads the working set again and has its own pair of probes.
//
// --op gemm_f32: the fp32 GEMM of the AWQ search (kernels/gemm_f32.hpp: W packed into panels,
// broadcast register blocks; path "panels") against the dense kernel it replaced there
// (kernels/dense_matmul.hpp, path "dense"), same shape and pool, in one run: the ratio of the
// rows' gflops is the speed-up (also on stderr). Default shape: Qwen2-0.5B's gate_proj over the
// search's 4,096 loss tokens (--gemm-f32 M,N,K). Compute-bound: gflops is the figure.
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "edgellm/kernels/dense_matmul.hpp"
#include "edgellm/kernels/gemm_f32.hpp"
#include "edgellm/kernels/gemm_q8.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/q4_arena.hpp"
#include "edgellm/thread_pool.hpp"
#include "harness.hpp"
#include "vulkan.hpp"

#if EDGELLM_BENCH_VULKAN
#include "edgellm/backend/vulkan/gemv_q4.hpp"
#endif

namespace bench = edgellm::bench;
using namespace edgellm;
using namespace edgellm::kernels;

namespace {

// Fills a packed matrix with random codes, scale ~0.01 and zero point 8 (contents do not change
// the work done, but keep the fp32 arithmetic away from denormals and NaN).
void fill_random(Q4Matrix& m, std::uint64_t seed) {
  std::byte* p = m.mutable_data();
  const std::size_t tb = m.tile_bytes(), tiles = m.byte_size() / tb;
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t t = 0; t < tiles; ++t) {
    std::byte* tp = p + t * tb;
    for (std::size_t r = 0; r < 16; ++r) {
      const std::uint16_t scale = 0x211F;  // ~0.01 in fp16
      std::memcpy(tp + 2 * r, &scale, 2);
      tp[32 + r] = std::byte{8};
    }
    for (std::size_t i = 64; i < tb; i += 8) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      std::memcpy(tp + i, &s, 8);
    }
  }
}

// Fills an int8 matrix with random codes in [-127, 127] and scales 0.01.
void fill_random(Q8Matrix& m, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t r = 0; r < m.n(); ++r) {
    std::int8_t* q = m.mutable_codes(r);
    for (std::size_t c = 0; c < m.k(); ++c) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      q[c] = static_cast<std::int8_t>(static_cast<int>(s % 255) - 127);
    }
    std::fill_n(m.mutable_scales(r), m.n_groups(), 0.01f);
  }
}

struct Shape {
  std::size_t n, k;
};

// The GEMV working set: one --gemv shape, the quick smoke set, or Qwen2-7B's decode matrices.
struct WorkingSet {
  std::vector<Shape> shapes;  // one layer's
  std::size_t layers = 1;
  std::string name;
};

WorkingSet gemv_working_set(const std::vector<std::size_t>& gemv_shape, bool quick,
                            const std::string& set) {
  if (!gemv_shape.empty()) return {{{gemv_shape[0], gemv_shape[1]}}, 1, "single"};
  const bool attention_only = set == "attention";
  // Qwen2-7B's attention linears alone (q, k, v, o of 28 layers, ~0.8 GB in int8): the int8 part
  // of an attention-int8 / MLP-int4 checkpoint's decode (edgellm-quantize --modules-bits
  // self_attn=8).
  if (attention_only && !quick)
    return {{{3584, 3584}, {512, 3584}, {512, 3584}, {3584, 3584}}, 28, "qwen2-7b-attn-28x4"};
  // Smoke run: two layers of a 1/4-width model (~40 MB), still past L2.
  if (quick)
    return {{{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4736, 896}, {4736, 896}, {896, 4736}},
            2,
            "quick-2x7"};
  // TinyLlama-1.1B: q, k, v, o, gate, up, down of 22 layers (~0.5 GB): matrices of 0.3-6 MB,
  // where the start and end of each product weigh more than in a 7B model.
  if (set == "tinyllama" && !quick)
    return {{{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048}, {5632, 2048}, {5632, 2048},
             {2048, 5632}},
            22,
            "tinyllama-22x7"};
  // Qwen2-7B: q, k, v, o, gate, up, down (n x k) for each of 28 layers: ~3.5 GB.
  return {{{3584, 3584}, {512, 3584}, {512, 3584}, {3584, 3584}, {18944, 3584}, {18944, 3584},
           {3584, 18944}},
          28,
          "qwen2-7b-28x7"};
}

}  // namespace

int main(int argc, char** argv) {
  std::string op = "all", path_arg = "all", isa_arg = "best", weights_arg = "int4",
              backend_arg = "cpu";
  int device_index = -1;  // -1: the Vulkan backend's device rule
  std::vector<std::size_t> gemv_shape, gemm_shape{512, 4096, 4096}, sweep_rows{1},
      gemm_f32_shape{4096, 4864, 896};
  std::size_t group = 128;
  bool lock = true, read_row = false;
  std::string set_arg = "decode";
  bench::options opts;
  using bench::flag;
  constexpr std::size_t kMaxDim = std::size_t{1} << 24;
  bench::parse_options(
      argc, argv, opts,
      {
          flag::string({"--op"}, "gemv|gemm|gemm_f32|all",
                       "which kernels (all: gemv and gemm; gemm_f32 only when named)", op),
          flag::string({"--path"}, "exact|fast|all", "which paths", path_arg),
          flag::string({"--weights"}, "int4|int8|all",
                       "GEMV weight format: int4 (ops gemv, gemm_sweep) or int8\n"
                       "(kernels/q8_matrix.hpp; ops gemv_q8, gemm_q8_sweep)",
                       weights_arg),
          flag::string({"--isa"}, "best|generic|avx2|avx_vnni|avx512_vnni|neon|neon_dotprod|neon_i8mm|all",
                       "fast-path microkernels", isa_arg),
          flag::list<std::size_t>({"--gemv"}, "N,K",
                                  "one GEMV shape instead of the Qwen2-7B decode sweep",
                                  gemv_shape, 1, kMaxDim),
          flag::list<std::size_t>({"--rows"}, "LIST",
                                  "activation rows over the GEMV working set: m > 1\n"
                                  "runs GEMM there (op gemm_sweep), as speculative verification\n"
                                  "of m - 1 drafted tokens does; cost_vs_m1 compares with m = 1",
                                  sweep_rows, 1, 4096),
          flag::list<std::size_t>({"--gemm"}, "M,N,K", "GEMM shape", gemm_shape, 1, kMaxDim),
          flag::list<std::size_t>({"--gemm-f32"}, "M,N,K", "fp32 GEMM shape (op gemm_f32)",
                                  gemm_f32_shape, 1, kMaxDim),
          flag::number<std::size_t>({"--group"}, "G", "group size 32|64|128", group, 1, 4096),
          flag::boolean({"--no-lock"}, "do not mlock the weights", lock, false),
          flag::string({"--set"}, "decode|attention|tinyllama",
                       "the GEMV working set without --gemv: Qwen2-7B's decode matrices (q, k, v,\n"
                       "o, gate, up, down of 28 layers), its attention linears alone (the\n"
                       "int8 part of an attention-8 / MLP-4 mix), or TinyLlama-1.1B's decode\n"
                       "matrices (22 layers of 0.3-6 MB each)",
                       set_arg),
          flag::boolean({"--read-row"},
                        "after each GEMV case, time a plain read of the same weights (op\n"
                        "read_weights[_q8]) in alternation with GEMV passes (op gemv[_q8]_vs_read,\n"
                        "pct_membw against that read)",
                        read_row, true),
          flag::string({"--backend"}, "cpu|vulkan|all",
                       "where the GEMV runs: the CPU kernels, or the int4 GEMV shader on a\n"
                       "Vulkan device (builds with the Vulkan backend; GEMV rows only)",
                       backend_arg),
          flag::number<int>({"--device"}, "N",
                            "Vulkan device index (-1: the backend's rule, discrete > integrated\n"
                            "> CPU implementations)",
                            device_index, -1, 1024),
      },
      "int4 GEMV (decode) and GEMM (prefill) speed against the measured read bandwidth.");
  if (weights_arg != "int4" && weights_arg != "int8" && weights_arg != "all") {
    bench::note("{}: --weights {}: expected int4, int8 or all", argv[0], weights_arg);
    return 2;
  }
  if (set_arg != "decode" && set_arg != "attention" && set_arg != "tinyllama") {
    bench::note("{}: --set {}: expected decode, attention or tinyllama", argv[0], set_arg);
    return 2;
  }
  if (backend_arg != "cpu" && backend_arg != "vulkan" && backend_arg != "all") {
    bench::note("{}: --backend {}: expected cpu, vulkan or all", argv[0], backend_arg);
    return 2;
  }
#if !EDGELLM_BENCH_VULKAN
  if (backend_arg != "cpu") {
    bench::note("{}: --backend {}: {}", argv[0], backend_arg, bench::vulkan::kNotBuilt);
    return 2;
  }
#endif
  const bool on_cpu = backend_arg != "vulkan";
  if (op != "gemv" && op != "gemm" && op != "gemm_f32" && op != "all") {
    bench::note("{}: --op {}: expected gemv, gemm, gemm_f32 or all", argv[0], op);
    return 2;
  }
  if ((!gemv_shape.empty() && gemv_shape.size() != 2) || gemm_shape.size() != 3 ||
      gemm_f32_shape.size() != 3 ||
      !is_supported_group_size(group) || sweep_rows.empty() ||
      std::find(sweep_rows.begin(), sweep_rows.end(), 0) != sweep_rows.end()) {
    bench::note("{}: bad --gemv (N,K), --gemm or --gemm-f32 (M,N,K) or --group (32, 64 or 128)",
                argv[0]);
    return 2;
  }

  std::vector<MatmulPath> paths;
  if (path_arg == "exact" || path_arg == "all") paths.push_back(MatmulPath::exact);
  if (path_arg == "fast" || path_arg == "all") paths.push_back(MatmulPath::fast);
  std::vector<Isa> isas;
  if (isa_arg == "all") {
    for (Isa i : kAllIsas)
      if (isa_supported(i)) isas.push_back(i);
  } else {
    Isa chosen = best_isa();
    for (Isa i : kAllIsas)
      if (isa_arg == isa_name(i)) chosen = i;
    if (!isa_supported(chosen)) {
      bench::note("--isa {}: not supported on this CPU", isa_arg);
      return 2;
    }
    isas.push_back(chosen);
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> default_threads{1};
  if (hw > 1) default_threads.push_back(std::min(hw, 2));
  const std::vector<int> thread_counts = opts.threads_or(default_threads);

  bench::table out(opts, {"op", "case", "path", "isa", "m", "n", "k", "group", "threads", "reps",
                          "median_us", "p10_us", "p90_us", "mean_us", "stddev_us", "min_us",
                          "gflops", "gbps", "membw_gbps", "pct_membw", "weights", "cost_vs_m1",
                          "backend", "device"});
  out.add_metadata("exact_arch", xsimd::default_arch::name());
  out.add_metadata("best_isa", isa_name(best_isa()));
  const std::string cpu_name = bench::cpu_model();

  // ---- GEMV: the decode working set -------------------------------------------------------
  // Run once per weight format: int4 (ops gemv / gemm_sweep) and int8 (gemv_q8 / gemm_q8_sweep).
  const auto run_gemv = [&](auto format_tag) -> int {
    using Matrix = typename decltype(format_tag)::type;
    constexpr bool kInt8 = std::is_same_v<Matrix, Q8Matrix>;
    const char* op_gemv = kInt8 ? "gemv_q8" : "gemv";
    const char* op_sweep = kInt8 ? "gemm_q8_sweep" : "gemm_sweep";
    const char* op_read = kInt8 ? "read_weights_q8" : "read_weights";
    const char* op_alt = kInt8 ? "gemv_q8_vs_read" : "gemv_vs_read";
    const WorkingSet set = gemv_working_set(gemv_shape, opts.quick, set_arg);
    const std::vector<Shape>& shapes = set.shapes;
    const std::string& case_name = set.name;
    const std::size_t layers = set.layers;
    std::vector<Matrix> mats;
    std::size_t bytes = 0, flops = 0, rows = 0, kmax = 0, nmax = 0;
    bench::note("[{}] allocating {} matrices...", op_gemv, layers * shapes.size());
    for (std::size_t l = 0; l < layers; ++l) {
      for (const Shape& s : shapes) {
        auto m = Matrix::allocate(s.n, s.k, group);
        if (!m) {
          bench::note("{}", m.error().message);
          return 1;
        }
        fill_random(*m, l * 16 + mats.size());
        bytes += m->byte_size();
        flops += 2 * s.n * s.k;
        rows += s.n;
        kmax = std::max(kmax, s.k);
        nmax = std::max(nmax, s.n);
        mats.push_back(std::move(*m));
      }
    }
    // The int4 set lies as load_weights leaves a model's matrices: in one arena of 2 MiB pages,
    // locked as one range (a lock ending inside a 2 MiB page would split it).
    Q4Arena arena;
    if constexpr (!kInt8) {
      std::vector<Q4Matrix*> order;
      for (auto& m : mats) order.push_back(&m);
      arena = gather_q4_matrices(order);
    }
    std::vector<std::span<const std::byte>> ranges;
    if (!arena.empty()) ranges.push_back(arena.pages());
    else
      for (auto& m : mats) ranges.emplace_back(m.data(), m.byte_size());
    bool locked = lock;
    if (lock)
      for (const auto r : ranges) locked = bench::lock_memory(r.data(), r.size(), "weights") && locked;
    const std::string weights = locked ? "mlocked" : "resident";
    bench::note("[{}] {:.2f} GB of packed weights ({})", op_gemv, static_cast<double>(bytes) / 1e9,
                weights);
    const std::size_t max_rows = *std::max_element(sweep_rows.begin(), sweep_rows.end());
    std::vector<float> x(max_rows * kmax), y(max_rows * nmax);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    const int reps = opts.reps_or(opts.quick ? 3 : 7);
    for (int threads : thread_counts) {
      auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
      if (!pool) {
        bench::note("{}", pool.error().message);
        return 2;
      }
      for (MatmulPath path : paths) {
        for (Isa isa : (path == MatmulPath::exact ? std::vector<Isa>{Isa::best} : isas)) {
          Workspace ws;
          MatmulOptions mo{pool->get(), path, isa, &ws};
          const std::string isa_str =
              path == MatmulPath::exact ? std::string(xsimd::default_arch::name()) : isa_name(isa);
          const std::size_t bw_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
          const double bw_before = bench::measure_read_bandwidth_gbps(
              threads, bw_bytes / static_cast<std::size_t>(threads), 3);
          // One pass over the working set with m rows: gemv for one row (decode), gemm for more
          // (a speculative verification). m = 1 is timed first when listed, as the unit.
          std::vector<bench::timing> times;
          for (std::size_t m : sweep_rows) {
            times.push_back(bench::measure(
                [&] {
                  for (const auto& w : mats) {
                    auto st = m == 1 ? gemv(w, std::span<const float>(x.data(), w.k()),
                                            std::span<float>(y.data(), w.n()), {}, mo)
                                     : gemm(w, std::span<const float>(x.data(), m * w.k()), m,
                                            std::span<float>(y.data(), m * w.n()), {}, mo);
                    if (!st) {
                      bench::note("{}", st.error().message);
                      std::exit(1);
                    }
                  }
                  bench::do_not_optimize(y[0]);
                },
                reps));
          }
          // The same weight bytes read by the probe's loop (uint64 sums), each matrix split over
          // the same pool as the GEMV: the ceiling for any kernel over these bytes. Timed
          // alternately with GEMV passes, so that both see the same state of a drifting host.
          const bool with_read_row = read_row;
          bench::timing read_t, gemv_t;
          if (with_read_row) {
            const auto read_pass = [&] {
              std::atomic<std::uint64_t> total{0};
              for (const auto& w : mats) {
                const auto* p = reinterpret_cast<const std::uint64_t*>(w.data());
                pool->get()->parallel_for(w.byte_size() / 64, [&](std::size_t b0, std::size_t b1) {
                  std::uint64_t s[8] = {};
                  for (std::size_t i = b0 * 8; i < b1 * 8; i += 8)
                    for (std::size_t j = 0; j < 8; ++j) s[j] += p[i + j];
                  total.fetch_add(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7],
                                  std::memory_order_relaxed);
                });
              }
              bench::do_not_optimize(total.load());
            };
            const auto gemv_pass = [&] {
              for (const auto& w : mats)
                (void)gemv(w, std::span<const float>(x.data(), w.k()),
                           std::span<float>(y.data(), w.n()), {}, mo);
              bench::do_not_optimize(y[0]);
            };
            std::vector<double> r_us, g_us;
            for (int rep = 0; rep < reps; ++rep) {
              r_us.push_back(bench::measure(read_pass, 1, rep == 0 ? 1 : 0).median_us);
              g_us.push_back(bench::measure(gemv_pass, 1, rep == 0 ? 1 : 0).median_us);
            }
            const auto to_timing = [&](const std::vector<double>& us) {
              const bench::stats st = bench::summarize(us);
              return bench::timing{st.median, st.p10, st.p90, st.min, reps, st.mean, st.stddev, us};
            };
            read_t = to_timing(r_us);
            gemv_t = to_timing(g_us);
          }
          const double bw_after = bench::measure_read_bandwidth_gbps(
              threads, bw_bytes / static_cast<std::size_t>(threads), 3);
          const double membw = (bw_before + bw_after) / 2;
          double unit_us = 0;
          for (std::size_t j = 0; j < sweep_rows.size(); ++j)
            if (sweep_rows[j] == 1) unit_us = times[j].median_us;
          for (std::size_t j = 0; j < sweep_rows.size(); ++j) {
            const std::size_t m = sweep_rows[j];
            const bench::timing& t = times[j];
            const double gbps = static_cast<double>(bytes) / (t.median_us * 1e3);
            const double cost = unit_us > 0 ? t.median_us / unit_us : std::nan("");  // NaN: null
            bench::note("[{}] {} {} t={} m={} : {:.1f} GB/s, membw {:.1f}/{:.1f} GB/s -> {:.0f}%{}",
                        op_gemv, path == MatmulPath::fast ? "fast" : "exact", isa_str, threads, m, gbps,
                        bw_before, bw_after, 100 * gbps / membw,
                        m > 1 && unit_us > 0 ? fmt::format(", {:.2f}x the m=1 time", cost) : "");
            out.row({m == 1 ? op_gemv : op_sweep, case_name,
                     path == MatmulPath::fast ? "fast" : "exact", isa_str,
                     static_cast<long long>(m), static_cast<long long>(rows),
                     shapes.size() == 1 ? bench::value(kmax) : bench::value(),  // k varies
                     static_cast<long long>(group), threads, t.reps, t.median_us, t.p10_us,
                     t.p90_us, t.mean_us, t.stddev_us, t.min_us,
                     static_cast<double>(flops * m) / (t.median_us * 1e3), gbps,
                     membw > 0 ? bench::value(membw) : bench::value(),
                     membw > 0 ? bench::value(100 * gbps / membw) : bench::value(), weights, cost,
                     "cpu", cpu_name});
          }
          if (with_read_row) {
            const double read_gbps = static_cast<double>(bytes) / (read_t.median_us * 1e3);
            const double gemv_gbps = static_cast<double>(bytes) / (gemv_t.median_us * 1e3);
            bench::note("[{}] read of the same weights t={} : {:.1f} GB/s; GEMV in alternation "
                        "{:.1f} GB/s -> {:.0f}% of the read",
                        op_gemv, threads, read_gbps, gemv_gbps, 100 * gemv_gbps / read_gbps);
            // Two rows: the read (pct_membw against the probe), then the GEMV passes timed in
            // alternation with it (pct_membw against that read, not the probe).
            for (int which = 0; which < 2; ++which) {
              const bench::timing& t = which == 0 ? read_t : gemv_t;
              const double gbps = which == 0 ? read_gbps : gemv_gbps;
              const double ref = which == 0 ? membw : read_gbps;
              out.row({which == 0 ? op_read : op_alt, case_name,
                       which == 0 ? "read" : (path == MatmulPath::fast ? "fast" : "exact"),
                       which == 0 ? std::string("u64") : isa_str, 1LL,
                       static_cast<long long>(rows),
                       shapes.size() == 1 ? bench::value(kmax) : bench::value(),
                       static_cast<long long>(group), threads, t.reps, t.median_us, t.p10_us,
                       t.p90_us, t.mean_us, t.stddev_us, t.min_us,
                       which == 0 ? bench::value() : bench::value(static_cast<double>(flops) /
                                                                  (t.median_us * 1e3)),
                       gbps, ref > 0 ? bench::value(ref) : bench::value(),
                       ref > 0 ? bench::value(100 * gbps / ref) : bench::value(), weights,
                       bench::value(), "cpu", cpu_name});
            }
          }
        }
      }
    }
    if (lock)
      for (const auto r : ranges) bench::unlock_memory(r.data(), r.size());
    return 0;
  };
#if EDGELLM_BENCH_VULKAN
  // ---- GEMV on a Vulkan device: the int4 working set, one submission per pass ---------------
  // One shader build over the working set: upload, record one pass, time it, one row.
  const auto run_gemv_vulkan_build = [&](edgellm::backend::vk::Device& dev, const WorkingSet& set,
                                         const edgellm::backend::vk::GemvQ4Options& build) -> int {
    namespace vk = edgellm::backend::vk;
    const vk::DeviceInfo& info = dev.info();
    std::vector<vk::GemvQ4> ops;
    std::size_t bytes = 0, flops = 0, rows = 0, kmax = 0, nmax = 0;
    bench::note("[vulkan] {}: uploading {} int4 matrices...", info.name,
                set.layers * set.shapes.size());
    for (std::size_t l = 0; l < set.layers; ++l) {
      for (const Shape& sh : set.shapes) {
        // One host matrix at a time: the device copy is the only one kept.
        auto m = Q4Matrix::allocate(sh.n, sh.k, group);
        if (!m) return bench::note("{}", m.error().message), 1;
        fill_random(*m, l * 16 + ops.size());
        auto op_q4 = vk::GemvQ4::create(dev, *m, build);
        if (!op_q4) return bench::note("[vulkan] {}", op_q4.error().message), 1;
        bytes += m->byte_size();
        flops += 2 * sh.n * sh.k;
        rows += sh.n;
        kmax = std::max(kmax, sh.k);
        nmax = std::max(nmax, sh.n);
        ops.push_back(std::move(*op_q4));
      }
    }
    auto x = vk::Buffer::create(dev, kmax * 4, "bench x", {vk::BufferKind::host_io});
    auto y = vk::Buffer::create(dev, nmax * 4, "bench y");
    if (!x || !y) return bench::note("[vulkan] {}", (!x ? x : y).error().message), 1;
    std::vector<float> xs(kmax);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : xs) v = nd(rng);
    if (auto st = x->write(std::as_bytes(std::span(xs))); !st)
      return bench::note("[vulkan] {}", st.error().message), 1;
    auto seq = vk::CommandSequence::create(dev, "bench gemv");
    if (!seq) return bench::note("[vulkan] {}", seq.error().message), 1;
    for (const auto& o : ops)
      if (auto st = o.record(*seq, *x, *y); !st)
        return bench::note("[vulkan] {}", st.error().message), 1;
    const std::size_t probe_bytes = opts.quick ? (std::size_t{64} << 20) : (std::size_t{1} << 30);
    const auto probe_gbps = [&] { return bench::vulkan::probe_gbps(dev, probe_bytes); };
    const int reps = opts.reps_or(opts.quick ? 3 : 7);
    const double bw_before = probe_gbps();
    const std::size_t submits_before = seq->submits();
    const auto timed = bench::vulkan::time_submits(*seq, reps);
    if (!timed) return 1;
    const bench::timing& t = *timed;
    const double passes = static_cast<double>(seq->submits() - submits_before);
    const double bw_after = probe_gbps();
    const double membw = (bw_before + bw_after) / 2;
    const double gbps = static_cast<double>(bytes) / (t.median_us * 1e3);
    bench::note("[vulkan] gemv {} on {}: {:.2f} GB/s over {} dispatches in 1 submission per pass "
                "({:.0f} passes), probe {:.2f}/{:.2f} GB/s -> {:.0f}%",
                set.name, info.name, gbps, seq->dispatches(), passes, bw_before, bw_after,
                membw > 0 ? 100 * gbps / membw : 0.0);
    const bool int8 = build.activations != vk::GemvActivations::fp32;
    out.row({"gemv", set.name, int8 ? "fast" : "exact", std::string("spirv-") + ops.front().variant(), 1LL,
             static_cast<long long>(rows),
             set.shapes.size() == 1 ? bench::value(kmax) : bench::value(),
             static_cast<long long>(group), bench::null, t.reps, t.median_us, t.p10_us, t.p90_us,
             t.mean_us, t.stddev_us, t.min_us, static_cast<double>(flops) / (t.median_us * 1e3),
             gbps, membw > 0 ? bench::value(membw) : bench::value(),
             membw > 0 ? bench::value(100 * gbps / membw) : bench::value(),
             info.unified_memory() ? "device-local, host-visible" : "device-local", bench::null,
             "vulkan", info.name});
    return 0;
  };
  const auto run_gemv_vulkan = [&]() -> int {
    namespace vk = edgellm::backend::vk;
    if (group != 128) {
      bench::note("[vulkan] the int4 GEMV shader is for group 128 (--group {})", group);
      return 2;
    }
    int rc = 0;
    auto dev = bench::vulkan::open_device(device_index, rc);
    if (!dev) return rc;
    const vk::DeviceInfo& info = dev->info();
    const WorkingSet set = gemv_working_set(gemv_shape, opts.quick, set_arg);
    // fp32 activations (the exact path), then int8 (the fast path) with integer dot products
    // where the device has them and with plain int multiply-adds.
    std::vector<vk::GemvQ4Options> builds;
    const auto wants = [&](MatmulPath p) {
      return std::find(paths.begin(), paths.end(), p) != paths.end();
    };
    if (wants(MatmulPath::exact)) builds.emplace_back();
    if (wants(MatmulPath::fast)) {
      vk::GemvQ4Options o;
      o.activations = vk::GemvActivations::int8;
      if (info.integer_dot_product) builds.push_back(o);
      o.portable = true;
      builds.push_back(o);
    }
    for (const vk::GemvQ4Options& build : builds)
      if (const int rc_build = run_gemv_vulkan_build(*dev, set, build); rc_build != 0)
        return rc_build;
    return 0;
  };
#endif

  if ((op == "gemv" || op == "all") && !on_cpu) {
#if EDGELLM_BENCH_VULKAN
    return run_gemv_vulkan();
#endif
  }
  if ((op == "gemv" || op == "all") && backend_arg == "all") {
#if EDGELLM_BENCH_VULKAN
    if (const int rc = run_gemv_vulkan(); rc != 0) return rc;
#endif
  }
  if (!on_cpu) return 0;
  if (op == "gemv" || op == "all") {
    if (weights_arg == "int4" || weights_arg == "all")
      if (const int rc = run_gemv(std::type_identity<Q4Matrix>{}); rc != 0) return rc;
    if (weights_arg == "int8" || weights_arg == "all")
      if (const int rc = run_gemv(std::type_identity<Q8Matrix>{}); rc != 0) return rc;
  }

  // ---- GEMM: prefill ------------------------------------------------------------------------
  if (op == "gemm" || op == "all") {
    const std::size_t M = opts.quick ? 64 : gemm_shape[0], N = opts.quick ? 512 : gemm_shape[1],
                      K = opts.quick ? 1024 : gemm_shape[2];
    auto w = Q4Matrix::allocate(N, K, group);
    if (!w) {
      bench::note("{}", w.error().message);
      return 2;
    }
    fill_random(*w, 7);
    std::vector<float> x(M * K), y(M * N);
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : x) v = nd(rng);
    const int reps = opts.reps_or(opts.quick ? 2 : 5);
    for (int threads : thread_counts) {
      auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
      if (!pool) return 2;
      for (MatmulPath path : paths) {
        for (Isa isa : (path == MatmulPath::exact ? std::vector<Isa>{Isa::best} : isas)) {
          Workspace ws;
          MatmulOptions mo{pool->get(), path, isa, &ws};
          const std::string isa_str =
              path == MatmulPath::exact ? std::string(xsimd::default_arch::name()) : isa_name(isa);
          const auto t = bench::measure(
              [&] {
                auto st = gemm(*w, x, M, y, {}, mo);
                if (!st) {
                  bench::note("{}", st.error().message);
                  std::exit(1);
                }
                bench::do_not_optimize(y[0]);
              },
              reps);
          const double gflops = 2.0 * static_cast<double>(M * N * K) / (t.median_us * 1e3);
          const double gbps = static_cast<double>(w->byte_size()) / (t.median_us * 1e3);
          bench::note("[gemm] {} {} t={} m={} : {:.0f} GFLOP/s",
                      path == MatmulPath::fast ? "fast" : "exact", isa_str, threads, M, gflops);
          out.row({"gemm", "single", path == MatmulPath::fast ? "fast" : "exact", isa_str,
                   static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                   static_cast<long long>(group), threads, t.reps, t.median_us, t.p10_us, t.p90_us,
                   t.mean_us, t.stddev_us, t.min_us, gflops, gbps, bench::null, bench::null,
                   "resident", bench::null, "cpu", cpu_name});
        }
      }
    }
  }

  // ---- fp32 GEMM: the AWQ search's products ---------------------------------------------------
  if (op == "gemm_f32") {
    const std::size_t M = opts.quick ? 256 : gemm_f32_shape[0],
                      N = opts.quick ? 512 : gemm_f32_shape[1],
                      K = opts.quick ? 320 : gemm_f32_shape[2];
    std::vector<float> w(N * K), x(M * K), y(M * N);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : w) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    std::vector<float, xsimd::aligned_allocator<float, 64>> packed(gemm_f32_packed_floats(N, K));
    const int reps = opts.reps_or(opts.quick ? 2 : 5);
    for (int threads : thread_counts) {
      auto pool = ThreadPool::create(static_cast<std::size_t>(threads));
      if (!pool) return 2;
      double dense_us = 0.0;
      for (const bool panels : {false, true}) {
        // As the search calls it: the panels path packs W on every call (its weights change).
        const auto t = bench::measure(
            [&] {
              if (panels) {
                (*pool)->parallel_for_balanced(gemm_f32_panels(N), 1, [&](std::size_t p0,
                                                                          std::size_t p1) {
                  gemm_f32_pack(w.data(), K, N, K, p0, p1, packed.data());
                  gemm_f32_rows(packed.data(), N, K, x.data(), K, M, nullptr, y.data(), N, p0, p1);
                });
              } else {
                // As the search ran it before: tokens in chunks whose rows stay in L2.
                const auto* wb = reinterpret_cast<const std::byte*>(w.data());
                const std::size_t chunk =
                    std::max<std::size_t>(8, (std::size_t{256} << 10) / (4 * K) / 8 * 8);
                (*pool)->parallel_for_balanced(N, 16, [&](std::size_t r0, std::size_t r1) {
                  for (std::size_t t0 = 0; t0 < M; t0 += chunk)
                    dense_matmul_rows(DenseType::f32, wb, K, x.data() + t0 * K, K,
                                      std::min(chunk, M - t0), nullptr, y.data() + t0 * N, N, r0,
                                      r1);
                });
              }
              bench::do_not_optimize(y[0]);
            },
            reps);
        const double gflops = 2.0 * static_cast<double>(M * N * K) / (t.median_us * 1e3);
        if (!panels) dense_us = t.median_us;
        bench::note("[gemm_f32] {} t={} {}x{}x{} : {:.0f} GFLOP/s{}", panels ? "panels" : "dense",
                    threads, M, N, K, gflops,
                    panels ? fmt::format(", {:.2f}x dense", dense_us / t.median_us) : "");
        out.row({"gemm_f32", "single", panels ? "panels" : "dense",
                 std::string(xsimd::default_arch::name()), static_cast<long long>(M),
                 static_cast<long long>(N), static_cast<long long>(K), bench::null, threads, t.reps,
                 t.median_us, t.p10_us, t.p90_us, t.mean_us, t.stddev_us, t.min_us, gflops,
                 bench::null, bench::null, bench::null, "resident",
                 bench::null, "cpu", cpu_name});
      }
    }
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// Embedding edgellm's int4 kernels: quantise an fp32 weight matrix to AWQ-style int4 (group 128),
// pack it once, then run decode-style GEMV and prefill-style GEMM on the app's own thread pool,
// on the exact and the fast (int8-activation) paths.
#include <edgellm/edgellm.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  using namespace edgellm;
  using namespace edgellm::kernels;

  const std::size_t n = 1024, k = 2048, m = 16;  // W: [n][k], X: [m][k]
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n * k), x(m * k);
  for (auto& v : w) v = normal(rng);
  for (auto& v : x) v = normal(rng) * 50.0f;

  // 1. Quantise (round to nearest, one fp16 scale and 4-bit zero per 128 inputs) and pack once.
  auto q = quantize_rtn(w, n, k, 128);
  if (!q) return std::fprintf(stderr, "%s\n", q.error().message.c_str()), 1;
  auto packed = pack_q4(*q);
  if (!packed) return std::fprintf(stderr, "%s\n", packed.error().message.c_str()), 1;
  std::printf("W: %zu x %zu -> %zu bytes packed (%.2f bits/weight)\n", n, k, packed->byte_size(),
              8.0 * static_cast<double>(packed->byte_size()) / static_cast<double>(n * k));

  // 2. The app owns the threads and the scratch memory.
  auto pool = ThreadPool::create(2);
  if (!pool) return std::fprintf(stderr, "%s\n", pool.error().message.c_str()), 1;
  Workspace workspace;

  // 3. Decode: y = W x for one token, exact and fast paths.
  std::vector<float> y_exact(n), y_fast(n);
  MatmulOptions exact{pool->get()};
  MatmulOptions fast{pool->get(), MatmulPath::fast, Isa::best, &workspace};
  auto x0 = std::span<const float>(x.data(), k);
  if (auto st = gemv(*packed, x0, y_exact, {}, exact); !st)
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  if (auto st = gemv(*packed, x0, y_fast, {}, fast); !st)
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  double max_diff = 0, max_abs = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(y_exact[i] - y_fast[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(y_exact[i])));
  }
  std::printf("gemv: fast path (%s) vs exact: max |diff| %.2e of max |y| %.2e\n",
              isa_name(best_isa()), max_diff, max_abs);

  // 4. Prefill: Y = X W^T for m tokens at once.
  std::vector<float> y_batch(m * n);
  if (auto st = gemm(*packed, x, m, y_batch, {}, fast); !st)
    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
  std::printf("gemm: Y[0][0] = %.5f (gemv gave %.5f)\n", y_batch[0], y_fast[0]);

  // 5. Bad input is an error value, never a crash.
  auto st = gemv(*packed, std::span<const float>(x.data(), 10), y_fast);
  std::printf("short x -> %s\n", st ? "ok?!" : st.error().message.c_str());
  return 0;
}

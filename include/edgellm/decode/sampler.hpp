// SPDX-License-Identifier: Apache-2.0
// Token sampling: greedy, temperature, top-k, top-p, min-p and repetition penalty, with a
// portable seeded random generator so that a seed gives the same tokens on every platform.
#pragma once

#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/decode/logits_processor.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::decode {

/// xoshiro256** seeded through splitmix64: the same stream for a seed on every platform and
/// standard library (std::uniform_real_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) noexcept { reseed(seed); }

  void reseed(std::uint64_t seed) noexcept {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }

  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

/// Sampling knobs. The defaults are a common chat setting; `temperature = 0` is greedy.
///
/// Order of operations on the logits of one step (the order of HF's and llama.cpp's samplers):
///   1. repetition penalty over the distinct tokens among the last `penalty_last_n` of the
///      history: a logit l > 0 becomes l / penalty, l <= 0 becomes l * penalty (CTRL rule);
///   2. greedy (temperature == 0): the highest logit wins, ties to the lowest id; stop here;
///   3. divide by temperature;
///   4. top-k: keep the k highest (ties broken by lower id), softmax over them (in double);
///   5. top-p: keep the smallest prefix of the sorted tokens whose mass reaches top_p (at least
///      one token);
///   6. min-p: drop tokens with p < min_p * p_max;
///   7. renormalise the kept tokens and draw one with a single uniform number (inverse CDF in
///      descending-probability order).
struct SamplingOptions {
  float temperature = 0.8f;        ///< >= 0; 0 = greedy
  std::size_t top_k = 40;          ///< 0 = off
  float top_p = 0.95f;             ///< in (0, 1]; 1 = off
  float min_p = 0.0f;              ///< in [0, 1); 0 = off
  float repetition_penalty = 1.0f; ///< > 0; 1 = off
  std::size_t penalty_last_n = 64; ///< history window of the penalty; 0 = the whole history
  std::uint64_t seed = 0;          ///< seed of the random stream

  static SamplingOptions greedy() noexcept {
    SamplingOptions o;
    o.temperature = 0.0f;
    return o;
  }
};

/// Checks every field of `o`; errors name the field and its valid range.
inline status validate(const SamplingOptions& o) {
  constexpr std::string_view where = "SamplingOptions";
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    return make_error(errc::invalid_argument, where,
                      "temperature: " + std::to_string(o.temperature) + " is not a finite number >= 0");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
    return make_error(errc::invalid_argument, where,
                      "top_p: " + std::to_string(o.top_p) + " is not in (0, 1]");
  if (!(o.min_p >= 0.0f && o.min_p < 1.0f))
    return make_error(errc::invalid_argument, where,
                      "min_p: " + std::to_string(o.min_p) + " is not in [0, 1)");
  if (!(o.repetition_penalty > 0.0f) || !std::isfinite(o.repetition_penalty))
    return make_error(errc::invalid_argument, where,
                      "repetition_penalty: " + std::to_string(o.repetition_penalty) +
                          " is not a finite number > 0");
  return {};
}

/// A distribution over a subset of the vocabulary, in descending probability (ties: lower id
/// first). Probabilities sum to 1 (in double).
struct SparseDistribution {
  std::vector<std::int32_t> ids;
  std::vector<double> probs;

  /// p(id), 0 for ids outside the kept set.
  double prob(std::int32_t id) const noexcept {
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == id) return probs[i];
    return 0.0;
  }
  /// Writes the dense form: out[vocab] = p (zeros elsewhere).
  void to_dense(std::span<float> out) const noexcept {
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (static_cast<std::size_t>(ids[i]) < out.size()) out[static_cast<std::size_t>(ids[i])] = static_cast<float>(probs[i]);
  }
};

/// Turns logits into tokens. Holds its options, its random stream and scratch buffers; one
/// thread at a time. Deterministic: the same seed, logits and history give the same tokens.
class Sampler {
 public:
  static result<Sampler> create(const SamplingOptions& options) {
    if (auto st = validate(options); !st) return st.error();
    return Sampler(options);
  }

  const SamplingOptions& options() const noexcept { return options_; }
  bool is_greedy() const noexcept { return options_.temperature == 0.0f; }
  Rng& rng() noexcept { return rng_; }

  /// The distribution this sampler draws from after steps 1-6 above (greedy: one token with
  /// p = 1). logits: [vocab] scores; history: tokens so far (for the penalty), ids must be in
  /// range. Errors: empty logits, non-finite logits (NaN / +inf, which mean a broken model).
  status distribution(std::span<const float> logits, std::span<const std::int32_t> history,
                      SparseDistribution& out) {
    const std::size_t n = logits.size();
    if (n == 0) return make_error(errc::invalid_argument, "Sampler", "logits: empty");
    if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      return make_error(errc::invalid_argument, "Sampler", "logits: too many entries");
    if (is_greedy() && processor_ == nullptr &&
        (options_.repetition_penalty == 1.0f || history.empty())) {
      // The common greedy step (each verified position of a speculative step is one): one pass
      // over the logits, no copy. Same answer as the general path below: the lowest id of the
      // largest score, and an error on NaN / +inf (left to that path to name).
      if (const std::size_t best = greedy_argmax(logits); best < n) {
        out.ids.assign(1, static_cast<std::int32_t>(best));
        out.probs.assign(1, 1.0);
        return {};
      }
    }
    work_.assign(logits.begin(), logits.end());
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(work_[i]) || work_[i] == std::numeric_limits<float>::infinity())
        return make_error(errc::invalid_argument, "Sampler",
                          "logits[" + std::to_string(i) + "] is " + std::to_string(work_[i]) +
                              " (the model produced a non-finite score)");
    }
    apply_penalty(history);
    if (processor_ != nullptr) {
      if (auto st = processor_->apply(work_, history); !st) return st;
      if (std::all_of(work_.begin(), work_.end(), [](float x) {
            return x == -std::numeric_limits<float>::infinity();
          }))
        return make_error(errc::invalid_argument, "Sampler",
                          "the logits processor allowed no token");
    }
    out.ids.clear();
    out.probs.clear();
    if (is_greedy()) {
      std::size_t best = 0;
      for (std::size_t i = 1; i < n; ++i)
        if (work_[i] > work_[best]) best = i;
      out.ids.push_back(static_cast<std::int32_t>(best));
      out.probs.push_back(1.0);
      return {};
    }
    // Softmax at the temperature, over all tokens (in double).
    const double inv_t = 1.0 / static_cast<double>(options_.temperature);
    const float mx = *std::max_element(work_.begin(), work_.end());
    if (mx == -std::numeric_limits<float>::infinity())
      return make_error(errc::invalid_argument, "Sampler", "logits: every score is -inf");
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    // Candidates in descending order of logit (ties: lower id), only as many as needed.
    const auto before = [&](std::int32_t a, std::int32_t b) {
      const float la = work_[static_cast<std::size_t>(a)], lb = work_[static_cast<std::size_t>(b)];
      return la > lb || (la == lb && a < b);
    };
    std::size_t keep = n;
    if (options_.top_k > 0 && options_.top_k < n) {
      keep = options_.top_k;
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep) - 1,
                       order_.end(), before);
    }
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), before);
    out.ids.reserve(keep);
    out.probs.reserve(keep);
    double total = 0.0;
    for (std::size_t i = 0; i < keep; ++i) {
      const std::int32_t id = order_[i];
      const double e = std::exp((static_cast<double>(work_[static_cast<std::size_t>(id)]) - mx) * inv_t);
      if (e == 0.0) break;  // -inf logits (and underflow) are never drawn
      out.ids.push_back(id);
      out.probs.push_back(e);
      total += e;
    }
    for (double& p : out.probs) p /= total;  // softmax over the top-k set (HF's order)
    // top-p over the sorted, renormalised top-k candidates.
    if (options_.top_p < 1.0f) {
      double mass = 0.0;
      std::size_t cut = out.ids.size();
      for (std::size_t i = 0; i < out.ids.size(); ++i) {
        mass += out.probs[i];
        if (mass >= static_cast<double>(options_.top_p)) {
          cut = i + 1;
          break;
        }
      }
      out.ids.resize(cut);
      out.probs.resize(cut);
    }
    if (options_.min_p > 0.0f) {
      const double floor = static_cast<double>(options_.min_p) * out.probs.front();
      std::size_t cut = 1;
      while (cut < out.probs.size() && out.probs[cut] >= floor) ++cut;
      out.ids.resize(cut);
      out.probs.resize(cut);
    }
    double kept = 0.0;
    for (double p : out.probs) kept += p;
    for (double& p : out.probs) p /= kept;
    return {};
  }

  /// Applies `processor` (or none: null) to the logits of every later distribution(), after the
  /// repetition penalty and before the temperature; it must outlive its use here.
  void set_logits_processor(LogitsProcessor* processor) noexcept { processor_ = processor; }
  LogitsProcessor* logits_processor() const noexcept { return processor_; }

  /// Draws one token of `d` with one uniform number from the stream.
  std::int32_t draw(const SparseDistribution& d) noexcept {
    if (d.ids.size() == 1) return d.ids.front();
    const double u = rng_.uniform();
    double c = 0.0;
    for (std::size_t i = 0; i < d.ids.size(); ++i) {
      c += d.probs[i];
      if (u < c) return d.ids[i];
    }
    return d.ids.back();  // rounding: u above the summed mass
  }

  /// One step: distribution() then draw(). Greedy consumes no random numbers.
  result<std::int32_t> sample(std::span<const float> logits, std::span<const std::int32_t> history) {
    if (auto st = distribution(logits, history, dist_); !st) return st.error();
    return draw(dist_);
  }

 private:
  explicit Sampler(const SamplingOptions& o) : options_(o), rng_(o.seed) {}

  /// The lowest index of the largest logit, or logits.size() when one is NaN or +inf: one
  /// vector pass for the maximum and the check, one for the first index that holds it.
  static std::size_t greedy_argmax(std::span<const float> logits) noexcept {
    using batch = xsimd::batch<float>;
    constexpr std::size_t L = batch::size;
    constexpr float inf = std::numeric_limits<float>::infinity();
    const std::size_t n = logits.size();
    const float* x = logits.data();
    batch vmax(-inf);
    auto vgood = batch(0.0f) == batch(0.0f);  // all true
    std::size_t i = 0;
    for (; i + L <= n; i += L) {
      const batch v = batch::load_unaligned(x + i);
      vgood = vgood & (v < batch(inf));  // false for NaN and +inf (an ordered comparison)
      vmax = xsimd::max(vmax, v);
    }
    if (!xsimd::all(vgood)) return n;
    alignas(64) float lanes[L];
    vmax.store_aligned(lanes);
    float mx = -inf;
    for (std::size_t j = 0; j < L; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
    for (; i < n; ++i) {
      if (!(x[i] < inf)) return n;
      mx = x[i] > mx ? x[i] : mx;
    }
    i = 0;
    for (; i + L <= n && !xsimd::any(batch::load_unaligned(x + i) == batch(mx)); i += L) {
    }
    for (; i < n; ++i)
      if (x[i] == mx) return i;  // reached: every value is finite or -inf, mx is one of them
    return n;
  }

  void apply_penalty(std::span<const std::int32_t> history) {
    const float pen = options_.repetition_penalty;
    if (pen == 1.0f || history.empty()) return;
    std::size_t from = 0;
    if (options_.penalty_last_n > 0 && history.size() > options_.penalty_last_n)
      from = history.size() - options_.penalty_last_n;
    seen_.assign(work_.size(), 0);
    for (std::size_t i = from; i < history.size(); ++i) {
      const auto id = static_cast<std::size_t>(history[i]);
      if (id >= work_.size() || seen_[id]) continue;  // out-of-range ids: not this model's
      seen_[id] = 1;
      work_[id] = work_[id] > 0.0f ? work_[id] / pen : work_[id] * pen;
    }
  }

  SamplingOptions options_;
  Rng rng_;
  std::vector<float> work_;            // [vocab] penalised logits
  std::vector<std::int32_t> order_;    // [vocab] candidate ids
  std::vector<unsigned char> seen_;    // [vocab] penalty marks
  SparseDistribution dist_;
  LogitsProcessor* processor_ = nullptr;  // not owned; see set_logits_processor
};

}  // namespace edgellm::decode

EDGELLM_SUPPRESS_GCC105593_END

// SPDX-License-Identifier: Apache-2.0
// The cost model of speculative decoding and the adaptive draft length built on it: expected
// tokens per step under a geometric acceptance model, projected speedup from measured costs, and
// the controller that picks k before each step. Independent of any model; SpeculativeDecoder
// (decode/speculative.hpp) feeds it its timings.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

namespace edgellm::decode {

/// Expected tokens emitted by one speculative step with k drafted tokens when each drafted token
/// is accepted with probability `acceptance` (independently, given the ones before it were):
/// the accepted run plus the target's own token, sum_{i=0..k} a^i = (1 - a^(k+1)) / (1 - a).
/// k = 0 is plain decoding: 1.
inline double expected_tokens(double acceptance, std::size_t k) noexcept {
  const double a = std::clamp(acceptance, 0.0, 1.0);
  double term = 1.0, sum = 1.0;
  for (std::size_t i = 0; i < k; ++i) sum += (term *= a);
  return sum;
}

/// Tokens per unit of time of a speculative step with k drafts relative to plain decoding:
/// E[tokens](k) * decode_cost / (verify_cost + k * draft_cost), with verify_cost the cost of one
/// target forward over k + 1 tokens and decode_cost that of a one-token target forward (all in
/// the same unit; pass decode_cost = 1 when the costs are in units of a decode step).
inline double projected_speedup(double acceptance, std::size_t k, double verify_cost,
                                double draft_cost, double decode_cost = 1.0) noexcept {
  const double cost = verify_cost + static_cast<double>(k) * draft_cost;
  return cost > 0.0 ? expected_tokens(acceptance, k) * decode_cost / cost : 0.0;
}

/// The draft length with the highest projected speedup. verify_cost[k] (k = 0 .. size() - 1) is
/// the cost of a target forward over k + 1 tokens, so verify_cost[0] is one plain decode step;
/// draft_cost is the cost of proposing one token. Returns the best k >= 1, or 0 when
/// `allow_plain` and no k >= 1 beats plain decoding (speculation would cost more than it saves).
/// Costs must be positive; an empty span or one of size 1 gives 0.
inline std::size_t best_draft_length(double acceptance, std::span<const double> verify_cost,
                                     double draft_cost, bool allow_plain = true) noexcept {
  if (verify_cost.size() < 2) return 0;
  const double decode = verify_cost[0];
  std::size_t best = 1;
  double best_speedup = projected_speedup(acceptance, 1, verify_cost[1], draft_cost, decode);
  for (std::size_t k = 2; k < verify_cost.size(); ++k) {
    const double s = projected_speedup(acceptance, k, verify_cost[k], draft_cost, decode);
    if (s > best_speedup) {
      best_speedup = s;
      best = k;
    }
  }
  return allow_plain && !(best_speedup > 1.0) ? 0 : best;
}

/// The adaptive draft length: keeps estimates of the acceptance rate and of the costs, measured
/// by the decoder with steady_clock, and before each step picks the k that maximises expected
/// tokens per second, E[tokens](k) / (cost_target(k + 1) + k * cost_draft) (see
/// best_draft_length()), or k = 0 (plain decoding through the target alone) when no k beats
/// plain decoding. Public so that benches and tests can drive it with their own costs.
///
/// - Acceptance: a geometric model fitted by exponentially weighted counts (decay 0.97 per
///   judged draft, a window of ~33 whatever k is): each step adds its accepted drafts and, when it
///   stopped at a rejection, one failure, so drafts never judged (after a rejection) are not
///   mistaken for evidence of a lower rate. Prior: 0.5 of 1 (0.5). Decisions use the optimistic
///   (accepted + 1) / (judged + 1), so that early bad luck does not shelve a good draft.
/// - Target cost: one estimate per forward length n = 1 .. k_max + 1. Timing noise is mostly
///   upwards (preemption: a 4 ms time slice on a busy machine), so a sample above the estimate
///   enters an EMA (weight 0.2) clipped to 1.5x the estimate, one below it at weight 0.75. The
///   estimates are then made physically consistent: not above a longer forward's (more tokens
///   never cost less) and not above m / j times a shorter forward's over j tokens (batching
///   never costs more than separate forwards), which undoes an outlier as soon as a neighbour is
///   measured. Lengths not yet measured are interpolated linearly, extrapolated upwards with the
///   slope of the two largest measured lengths (flat when there is only one), flat downwards.
/// - Draft cost: the same kind of estimate of draft seconds per drafted token.
/// - Speculation starts when it projects >= 2 % more tokens per second than plain decoding and
///   stops when it projects fewer (hysteresis against flipping near break-even).
/// - Exploration: the first step is plain (it measures cost_target(1), the baseline), the second
///   drafts k_initial. While plain, every `probe_interval` steps one speculative step probes
///   the draft: the interval doubles after each probe that leaves speculation projecting < 0.9x
///   of plain decoding (up to 16x), and is a quarter of it above 0.97x (near break-even, where
///   probes cost next to nothing and each moves the estimates little). While speculating, every
///   64th step is plain to keep cost_target(1) current, and every 8th step tries another k (one
///   whose cost was measured only once, else k - 1 or k + 1 alternately, every 4th time the next k
///   of a round over 1 .. k_max), so that no k stays ruled out by a stale or unlucky timing; a
///   second sample below the first replaces it.
class AdaptiveDraftLength {
 public:
  AdaptiveDraftLength(std::size_t k_initial = 5, std::size_t k_max = 8,
                      std::size_t probe_interval = 16)
      : k_initial_(std::max<std::size_t>(k_initial, 1)),
        k_max_(std::max<std::size_t>(k_max, 1)),
        probe_base_(std::max<std::size_t>(probe_interval, 1)),
        probe_every_(probe_base_),
        cost_(k_max_ + 2, 0.0),
        clean_(k_max_ + 2, 0.0),
        known_(k_max_ + 2, 0) {}

  /// The draft length for the next step, at most `room` (what the contexts allow) and k_max.
  std::size_t next(std::size_t room) {
    probing_ = false;
    const std::size_t kmax = std::min(room, k_max_);
    if (kmax == 0) return 0;
    if (!known_[1]) return 0;                              // measure the baseline first
    if (!draft_known_) return std::min(k_initial_, kmax);  // then the draft
    const std::size_t best = choose(kmax, /*allow_plain=*/false);
    if (plain_) {
      if (++since_probe_ < probe_every_) return 0;
      since_probe_ = 0;
      probing_ = true;
      return best;
    }
    if (!beats_plain(best, kStay)) {
      plain_ = true;
      since_probe_ = 0;
      return 0;
    }
    ++since_refresh_;
    if (since_refresh_ >= kRefreshInterval) {
      since_refresh_ = 0;
      return 0;
    }
    // Explore now and then, so that a cost estimate that is wrong (spoiled by an outlier, or
    // extrapolated) gets measured again instead of ruling its k out for good.
    if (since_refresh_ % kExploreInterval == 0 && kmax > 1) {
      // First the lengths measured only once, then neighbours and a round over all k.
      for (std::size_t k = 1; k <= kmax; ++k)
        if (known_[k + 1] == 1 && k != best) return k;
      ++explorations_;
      if (explorations_ % 4 == 0) {
        round_ = round_ % kmax + 1;
        return round_;
      }
      const bool up = explorations_ % 2 == 0 ? best < kmax : best == 1;
      return up ? best + 1 : best - 1;
    }
    return best;
  }

  /// Records one step: `drafted` tokens proposed (0: a plain step), `accepted` of them accepted,
  /// `target_seconds` for the target forward over drafted + 1 tokens and its verification,
  /// `draft_seconds` for proposing them (excluding any catching up on tokens the draft
  /// skipped while decoding was plain).
  void record(std::size_t drafted, std::size_t accepted, double draft_seconds,
              double target_seconds) {
    const std::size_t n = drafted + 1;
    if (n < cost_.size() && target_seconds > 0.0) {
      // A second sample below the first replaces it: one sample may be an outlier.
      cost_[n] = !known_[n]       ? target_seconds
                 : known_[n] == 1 ? std::min(cost_[n], target_seconds)
                                  : smooth(cost_[n], target_seconds);
      known_[n] = static_cast<unsigned char>(std::min(known_[n] + 1, 2));
      make_consistent();
    }
    if (drafted > 0) {
      // Decay per judged draft: the same window of evidence whatever k is.
      const std::size_t judged = accepted + (accepted < drafted ? 1 : 0);
      const double decay = std::pow(kAcceptDecay, static_cast<double>(judged));
      accepted_ = decay * accepted_ + static_cast<double>(accepted);
      trials_ = decay * trials_ + static_cast<double>(judged);
      if (draft_seconds > 0.0) {
        const double per = draft_seconds / static_cast<double>(drafted);
        draft_cost_ = !draft_known_       ? per
                      : draft_known_ == 1 ? std::min(draft_cost_, per)
                                          : smooth(draft_cost_, per);
        draft_known_ = static_cast<unsigned char>(std::min(draft_known_ + 1, 2));
      }
    }
    if (probing_) {
      probing_ = false;
      const double s = draft_known_ ? speedup(choose(k_max_, false)) : 0.0;
      if (s > kEnter) {
        plain_ = false;
        probe_every_ = probe_base_;
        since_refresh_ = 0;
      } else if (s > kNearBreakEven) {
        // Near break-even a probe costs next to nothing and one judged draft moves the
        // estimate little: probe often.
        probe_every_ = std::max<std::size_t>(probe_base_ / 4, 1);
      } else if (s > kHopeless) {
        probe_every_ = probe_base_;
      } else {
        probe_every_ = std::min(probe_every_ * 2, probe_base_ * 16);
      }
    }
  }

  /// Estimated probability that a drafted token is accepted.
  double acceptance() const noexcept { return trials_ > 0.0 ? accepted_ / trials_ : 0.0; }
  /// The acceptance the decisions use: one extra success, (accepted + 1) / (judged + 1), an
  /// optimistic estimate while little is known (a few unlucky rejections at the start do not
  /// shelve a good draft) that tends to acceptance() as evidence accumulates (within 3 % at
  /// the window's ~33 judged drafts).
  double optimistic_acceptance() const noexcept { return (accepted_ + 1.0) / (trials_ + 1.0); }
  /// Estimated seconds of a target forward over n tokens (with verification); 0 if nothing is
  /// measured yet. Never more than the estimate for a longer forward: a forward over more tokens
  /// does not cost less, so a higher value is noise (timing noise is mostly upwards).
  double target_cost(std::size_t n) const noexcept {
    if (n == 0) return 0.0;
    if (n < clean_.size() && known_[n]) return clean_[n];
    std::size_t lo = 0, lo2 = 0, hi = 0;
    for (std::size_t i = 1; i < clean_.size(); ++i) {
      if (!known_[i]) continue;
      if (i < n) {
        lo2 = lo;
        lo = i;
      } else if (hi == 0) {
        hi = i;
      }
    }
    if (lo && hi) {
      const double t = static_cast<double>(n - lo) / static_cast<double>(hi - lo);
      return clean_[lo] + t * (clean_[hi] - clean_[lo]);
    }
    if (hi) return clean_[hi];
    if (!lo) return 0.0;
    double slope = 0.0;
    if (lo2) slope = (clean_[lo] - clean_[lo2]) / static_cast<double>(lo - lo2);
    return clean_[lo] + slope * static_cast<double>(n - lo);
  }
  /// Estimated seconds per drafted token; 0 if not measured yet.
  double draft_cost() const noexcept { return draft_known_ ? draft_cost_ : 0.0; }
  /// True while the controller has given up drafting (apart from probes).
  bool plain() const noexcept { return plain_; }
  std::size_t k_max() const noexcept { return k_max_; }

 private:
  static constexpr double kAcceptDecay = 0.97;  // per judged draft: a window of ~33
  static constexpr double kCostDecay = 0.8;
  static constexpr std::size_t kRefreshInterval = 64;
  static constexpr std::size_t kExploreInterval = 8;
  // Hysteresis: start speculating when it projects >= 2 % faster than plain decoding, stop when
  // it projects slower, so that estimates near break-even do not flip the mode every step.
  static constexpr double kEnter = 1.02;
  static constexpr double kStay = 1.0;
  static constexpr double kNearBreakEven = 0.97;
  static constexpr double kHopeless = 0.9;

  // Timing noise is mostly upwards (preemption, interrupts): a sample below the estimate is
  // taken at weight 0.75, one above it at the EMA's weight and clipped to 1.5x the estimate, so
  // one preempted step (a 5x outlier on a busy machine) moves the estimate by 10 % and an
  // estimate spoiled by an outlier recovers at its next sample.
  static double smooth(double estimate, double sample) noexcept {
    if (sample < estimate) return 0.25 * estimate + 0.75 * sample;
    return kCostDecay * estimate + (1.0 - kCostDecay) * std::min(sample, 1.5 * estimate);
  }

  // clean_ = cost_ bounded by the physics (see the class comment); monotone in n.
  void make_consistent() {
    clean_ = cost_;
    for (std::size_t n = 2; n < clean_.size(); ++n) {
      if (!known_[n]) continue;
      for (std::size_t j = 1; j < n; ++j)
        if (known_[j])
          clean_[n] =
              std::min(clean_[n], clean_[j] * static_cast<double>(n) / static_cast<double>(j));
    }
    double next = std::numeric_limits<double>::infinity();
    for (std::size_t n = clean_.size(); n-- > 1;) {
      if (!known_[n]) continue;
      clean_[n] = std::min(clean_[n], next);
      next = clean_[n];
    }
  }

  std::size_t choose(std::size_t kmax, bool allow_plain) {
    verify_.resize(kmax + 1);
    for (std::size_t k = 0; k <= kmax; ++k) verify_[k] = target_cost(k + 1);
    return best_draft_length(optimistic_acceptance(), verify_, draft_cost(), allow_plain);
  }
  double speedup(std::size_t k) const noexcept {
    return k > 0 ? projected_speedup(optimistic_acceptance(), k, target_cost(k + 1), draft_cost(),
                                     target_cost(1))
                 : 1.0;
  }
  bool beats_plain(std::size_t k, double margin) const noexcept {
    return k > 0 && speedup(k) > margin;
  }

  std::size_t k_initial_, k_max_, probe_base_, probe_every_;
  std::vector<double> cost_;          // [n] EMA seconds of a target forward over n tokens
  std::vector<double> clean_;         // [n] cost_ made consistent (make_consistent())
  std::vector<unsigned char> known_;  // [n] samples of cost_[n]: 0, 1 or 2 (= more than 1)
  std::vector<double> verify_;        // scratch for choose()
  double accepted_ = 0.5, trials_ = 1.0;
  double draft_cost_ = 0.0;
  unsigned char draft_known_ = 0;  // samples of draft_cost_: 0, 1 or 2 (= more than 1)
  bool plain_ = false, probing_ = false;
  std::size_t since_probe_ = 0, since_refresh_ = 0, explorations_ = 0, round_ = 0;
};

}  // namespace edgellm::decode

// SPDX-License-Identifier: Apache-2.0
// Speculative decoding over any pair of decode::Model: a cheap draft proposes tokens, the target
// checks them all in one forward, and the output is exactly what the target alone would emit
// (token for token under greedy decoding, in distribution under sampling). The draft length is
// fixed or chosen before each step by AdaptiveDraftLength (decode/speculative_cost.hpp).
#pragma once

#include "edgellm/decode/model.hpp"
#include "edgellm/decode/sampler.hpp"
#include "edgellm/decode/speculative_cost.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::decode {

/// Options of SpeculativeDecoder::create().
struct SpeculativeOptions {
  /// Tokens drafted per step (fixed mode), or the first draft length (adaptive mode); in
  /// [1, kMaxDraft]. 0 is rejected: decoding without drafts is PlainDecoder's job (and
  /// adaptive mode falls back to it by itself when drafting does not pay). When the contexts
  /// have less room, a step drafts fewer (k is clamped, never an error, until not even the
  /// target's next token fits).
  std::size_t k = 5;
  /// Choose k before every step from measured acceptance and costs (AdaptiveDraftLength).
  bool adaptive = false;
  /// Adaptive mode: the largest k tried; in [k, kMaxDraft]. Ignored in fixed mode.
  std::size_t k_max = 8;
  /// Adaptive mode: steps of plain decoding between probes of the draft (the base interval;
  /// AdaptiveDraftLength stretches it up to 16x for a hopeless draft); >= 1.
  std::size_t probe_interval = 16;

  static constexpr std::size_t kMaxDraft = 32;
};

/// Counters of a SpeculativeDecoder since creation (or reset_stats()).
struct SpeculativeStats {
  std::size_t steps = 0;            ///< step() calls that succeeded
  std::size_t plain_steps = 0;      ///< of those, steps that drafted nothing
  std::size_t drafted = 0;          ///< tokens proposed by the draft
  std::size_t accepted = 0;         ///< drafted tokens the target accepted
  std::size_t rejected = 0;         ///< steps that stopped at a rejected draft
  std::size_t target_forwards = 0;  ///< verification forwards (one per step; prefill excluded)
  std::size_t emitted = 0;          ///< tokens appended to `out` by step()
  std::size_t prompt_tokens = 0;    ///< tokens forwarded by begin() (target), i.e. not reused
  double draft_seconds = 0.0;       ///< draft forwards and sampling from q
  double target_seconds = 0.0;      ///< target forwards and verification (sampling from p)
  double prefill_seconds = 0.0;     ///< begin(): both models' prompt forwards
  std::size_t last_k = 0;           ///< draft length asked for by the latest step

  /// accepted / drafted (0 when nothing was drafted).
  double acceptance_rate() const noexcept {
    return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
  /// The per-token acceptance probability of the geometric model behind expected_tokens():
  /// accepted / (accepted + rejected). Drafts after a rejection were never judged, so this is
  /// higher than acceptance_rate() (0 when nothing was judged).
  double acceptance_per_token() const noexcept {
    return accepted + rejected
               ? static_cast<double>(accepted) / static_cast<double>(accepted + rejected)
               : 0.0;
  }
  /// emitted / target_forwards: 1 for plain decoding, up to k + 1.
  double tokens_per_forward() const noexcept {
    return target_forwards ? static_cast<double>(emitted) / static_cast<double>(target_forwards)
                           : 0.0;
  }
};

/// A draft that can tell it has nothing worth proposing after the tokens it consumed (e.g.
/// LookupDraft without an n-gram match). Optional: SpeculativeDecoder stops drafting early when
/// the draft has it and it returns false, and drafts blindly otherwise.
template <class D>
concept DraftWithProposalHint = requires(const D& d) {
  { d.has_proposal() } -> std::convertible_to<bool>;
};

/// Speculative decoding: each step the draft proposes up to k tokens d1..dk, the target scores
/// [pending, d1..dk] in one forward (LogitsMode::all), the longest acceptable prefix plus one
/// token of the target's is emitted, and both models are rolled back with truncate() to what
/// was emitted. Uses only the decode::Model concept, so any KV cache (and any draft: a small
/// transformer, LookupDraft) works, and a token source for decode::generate().
///
/// Acceptance rule. p_i is the Sampler's distribution (penalty, temperature, top-k, top-p,
/// min-p: Sampler::distribution) of the target's row i, with the history extended by
/// d1..d_{i-1}; q_i is the same Sampler's distribution of the draft's logits at that point, and
/// d_i was drawn from q_i with the sampler's random stream. For i = 1, 2, ...: accept d_i with
/// probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a token drawn from
/// r_i = normalise(max(0, p_i - q_i)) and stop; if all drafts are accepted, emit a bonus token
/// drawn from p_{k+1}.
///
/// Why it is exact (Leviathan et al. 2023, Chen et al. 2023): for any token x,
///   P(emit x at i) = q_i(x) min(1, p_i(x) / q_i(x)) + P(reject) r_i(x)
///                  = min(q_i(x), p_i(x)) + (sum_y max(0, q_i(y) - p_i(y))) r_i(x)
///                  = min(q_i(x), p_i(x)) + max(0, p_i(x) - q_i(x)) = p_i(x),
/// because sum_y max(0, q - p) = sum_y max(0, p - q) is r_i's normaliser. So each emitted token
/// has the target's distribution given the tokens before it, whatever q is and whatever k was:
/// k, and whether to draft position i at all, only depend on tokens already emitted, and the
/// bonus token is drawn from p directly. Greedy decoding is the one-hot case: p and q are the
/// argmaxes, a draft is accepted iff it equals the target's argmax, a rejection emits the
/// target's argmax, and the output is token for token that of greedy decoding with the target
/// alone (up to the floating-point rounding of a batched forward versus one token at a time,
/// which the Model contract allows: only top-two logits tied within rounding could differ).
/// Greedy steps draw no random numbers.
///
/// State. The decoder keeps the sequence (prompt + emitted tokens). Its last token is "pending":
/// emitted but not yet forwarded through the target, which happens as the first token of the
/// next verification forward. So stopping wastes no forward and the last prompt token is
/// forwarded together with the first drafts. The draft lags behind as it likes and catches up by
/// forwarding what it lacks in one call when it next drafts (nothing is forwarded through the
/// draft while adaptive mode decodes plainly). In adaptive mode a model draft that lags by more
/// than kCatchUpWindow tokens (after plain decoding) is not replayed over the whole gap, which
/// would cost a prefill of every plainly decoded token: it restarts on the last kCatchUpWindow
/// tokens of the sequence (at positions from 0). A draft only proposes, so its shorter context
/// can cost acceptance, never exactness.
///
/// Context. A step needs the target to hold the sequence minus the pending token plus k more,
/// and the draft the sequence plus k - 1: k is clamped to what both contexts allow (0 if only
/// the draft is full). When the target has no room for the pending token, step() fails with
/// errc::capacity_exceeded ("context full"): the sequence can reach context_size() + 1 tokens,
/// as with plain decoding.
///
/// Errors leave the decoder usable: a failed step() emits nothing and rolls both models back.
/// The models are borrowed (they must outlive the decoder) and, between begin() and the end of
/// generation, only the decoder may forward or truncate them. One thread at a time.
template <Model Target, Model Draft>
class SpeculativeDecoder {
 public:
  /// Longest gap a lagging model draft replays in adaptive mode (see the class comment).
  static constexpr std::size_t kCatchUpWindow = 64;

  /// A decoder over `target` and `draft`. Errors (errc::invalid_argument): the draft's
  /// vocab_size() differs from the target's (they must share the tokenizer), draft and target
  /// are the same object, options out of range (see SpeculativeOptions).
  static result<SpeculativeDecoder> create(Target& target, Draft& draft,
                                           const SpeculativeOptions& options = {}) {
    constexpr std::string_view where = "SpeculativeDecoder::create";
    if (draft.vocab_size() != target.vocab_size()) {
      return make_error(errc::invalid_argument, where,
                        "draft: vocab_size " + std::to_string(draft.vocab_size()) +
                            " differs from the target's vocab_size " +
                            std::to_string(target.vocab_size()) +
                            " (the draft must use the target's tokenizer)");
    }
    if (static_cast<const void*>(&target) == static_cast<const void*>(&draft)) {
      return make_error(errc::invalid_argument, where,
                        "draft: is the target object itself (use a second instance, e.g. over "
                        "the same weights)");
    }
    if (target.vocab_size() == 0)
      return make_error(errc::invalid_argument, where, "target: vocab_size is 0");
    constexpr std::size_t kmax = SpeculativeOptions::kMaxDraft;
    if (options.k == 0 || options.k > kmax) {
      return make_error(errc::invalid_argument, where,
                        "options.k: " + std::to_string(options.k) + " is not in [1, " +
                            std::to_string(kmax) +
                            "] (for decoding without drafts use PlainDecoder; adaptive mode "
                            "stops drafting by itself when drafting does not pay)");
    }
    if (options.adaptive && (options.k_max < options.k || options.k_max > kmax)) {
      return make_error(errc::invalid_argument, where,
                        "options.k_max: " + std::to_string(options.k_max) + " is not in [k = " +
                            std::to_string(options.k) + ", " + std::to_string(kmax) + "]");
    }
    if (options.adaptive && options.probe_interval == 0)
      return make_error(errc::invalid_argument, where, "options.probe_interval: must be >= 1");
    SpeculativeDecoder d(target, draft, options);
    if (auto st = d.allocate(); !st) return st.error();
    return d;
  }

  SpeculativeDecoder(SpeculativeDecoder&&) noexcept = default;
  SpeculativeDecoder& operator=(SpeculativeDecoder&&) noexcept = default;

  /// Starts generating after `prompt`: both models consume it, except its last token, which
  /// becomes the pending token of the first step.
  ///
  /// Precondition on the first call: each model's first position() tokens are a prefix of
  /// `prompt` (a fresh model holds none; the caller may have restored a cached prefix); only the
  /// rest is forwarded. On later calls the decoder knows what the models hold and reuses the
  /// common prefix of the previous sequence and `prompt` (a chat's next turn; a model that was
  /// only truncated meanwhile is fine too: what it still holds is reused). A model that already
  /// holds the whole prompt is truncated by one (the last token is forwarded by step(), with the
  /// first drafts). Errors: empty prompt (invalid_argument); a token id outside
  /// [0, vocab_size()) (out_of_range); a prompt longer than the target's or the draft's context
  /// (capacity_exceeded); on the first call, a model holding more tokens than the prompt
  /// (invalid_argument); model errors (then step() refuses to run until a begin() succeeds).
  status begin(std::span<const std::int32_t> prompt) {
    constexpr std::string_view where = "SpeculativeDecoder::begin";
    if (prompt.empty()) return make_error(errc::invalid_argument, where, "prompt: empty");
    const auto fits = [&](std::size_t ctx, std::string_view who) -> status {
      if (prompt.size() <= ctx) return {};
      return make_error(errc::capacity_exceeded, where,
                        "prompt: " + std::to_string(prompt.size()) + " tokens do not fit the " +
                            std::string(who) + "'s context of " + std::to_string(ctx));
    };
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || static_cast<std::size_t>(prompt[i]) >= V_) {
        return make_error(errc::out_of_range, where,
                          "prompt[" + std::to_string(i) + "]: id " + std::to_string(prompt[i]) +
                              " is outside [0, " + std::to_string(V_) + ")");
      }
    }
    if (auto st = fits(target_->context_size(), "target"); !st) return st;
    if (auto st = fits(draft_->context_size(), "draft"); !st) return st;
    std::size_t common = 0;
    if (known_) {
      while (common < seq_.size() && common < prompt.size() && seq_[common] == prompt[common])
        ++common;
    } else {
      for (auto [pos, who] :
           {std::pair{target_->position(), "target"}, std::pair{draft_->position(), "draft"}}) {
        if (pos > prompt.size()) {
          return make_error(errc::invalid_argument, where,
                            std::string(who) + ": holds " + std::to_string(pos) +
                                " tokens, more than the prompt's " + std::to_string(prompt.size()) +
                                " (its tokens must be a prefix of the prompt)");
        }
      }
      common = prompt.size();
    }
    // Keep what is right (at most all but the last prompt token), then forward the rest. Once
    // both are truncated, both hold a prefix of `prompt`, whatever fails later: record it.
    const std::size_t limit = std::min(common, prompt.size() - 1);
    if (auto st = truncate_to(*target_, limit); !st) return st;
    if (doff_ != 0) {  // the draft holds a window, not a prefix: start it over
      if (auto st = draft_->truncate(0); !st) return st;
      doff_ = 0;
    }
    if (auto st = truncate_to(*draft_, limit); !st) return st;
    begun_ = false;
    seq_.assign(prompt.begin(), prompt.end());
    known_ = true;
    const auto t0 = clock::now();
    const std::size_t forwarded = prompt.size() - 1 - target_->position();
    reused_ = target_->position();
    if (auto st = forward_rest(*target_); !st) return st;
    if (auto st = forward_rest(*draft_); !st) return st;
    stats_.prompt_tokens += forwarded;
    stats_.prefill_seconds += seconds_since(t0);
    begun_ = true;
    return {};
  }

  /// One speculative step: appends the emitted tokens (at least one, at most k + 1) to `out`.
  /// `history` is the prompt plus every token emitted so far (what plain decoding would pass to
  /// the sampler; only its tail matters, for the repetition penalty). Errors: begin() not
  /// called (invalid_argument); the target's context is full (capacity_exceeded); model and
  /// sampler errors. On error nothing is appended and the decoder stays usable.
  status step(Sampler& sampler, std::span<const std::int32_t> history,
              std::vector<std::int32_t>& out) {
    constexpr std::string_view where = "SpeculativeDecoder::step";
    if (!begun_) return make_error(errc::invalid_argument, where, "begin() was not called");
    const std::size_t S = seq_.size();  // the target holds S - 1 of them; seq_.back() is pending
    const std::size_t ctx_t = target_->context_size(), ctx_d = draft_->context_size();
    if (S > ctx_t) {
      return make_error(errc::capacity_exceeded, where,
                        "the target's context of " + std::to_string(ctx_t) + " tokens is full");
    }
    // Room: the target forwards pending + k (S - 1 + 1 + k <= ctx_t); the draft forwards up to
    // pending + k - 1 drafts (S + k - 1 <= ctx_d).
    const std::size_t room = std::min(ctx_t - S, ctx_d + 1 >= S ? ctx_d + 1 - S : 0);
    const std::size_t k = adaptive_ ? control_.next(room) : std::min(options_.k, room);

    // History for the sampler: the tail the penalty looks at (all of it under a logits
    // processor, which keys its state on the whole history), then the drafts as they come.
    const SamplingOptions& so = sampler.options();
    std::size_t tail = 0;
    if (sampler.logits_processor() != nullptr)
      tail = history.size();
    else if (so.repetition_penalty != 1.0f)
      tail = so.penalty_last_n == 0 ? history.size() : std::min(history.size(), so.penalty_last_n);
    hist_.assign(history.end() - static_cast<std::ptrdiff_t>(tail), history.end());

    // Draft phase: propose up to k tokens.
    const auto t0 = clock::now();
    std::size_t drafted = 0;
    double catch_up_s = 0.0;
    if (k > 0) {
      std::size_t from = std::min(draft_pos(), S - 1);
      if (from != draft_pos()) {
        if (auto st = draft_->truncate(from - doff_); !st) return st;
      }
      if constexpr (!DraftWithProposalHint<Draft>) {  // lookup drafts need all their history
        if (adaptive_ && S - 1 - from > kCatchUpWindow) {
          if (auto st = draft_->truncate(0); !st) return fail(S, st);
          doff_ = S - 1 - kCatchUpWindow;
          from = doff_;
        }
      }
      // The draft lags by one or two tokens after a step, by many after plain steps. A long
      // gap is forwarded first on its own (a prefill, not part of a draft step's cost, which
      // the adaptive controller must see undistorted), then the pending token.
      if (S - from > 2) {
        const auto c0 = clock::now();
        if (auto st =
                draft_->forward(std::span<const std::int32_t>(seq_).subspan(from, S - 1 - from),
                                LogitsMode::last, dlogits_);
            !st)
          return st;
        catch_up_s = seconds_since(c0);
        from = S - 1;
      }
      if (auto st = draft_->forward(std::span<const std::int32_t>(seq_).subspan(from),
                                    LogitsMode::last, dlogits_);
          !st)
        return fail(S, st);
      for (; drafted < k; ++drafted) {
        if constexpr (DraftWithProposalHint<Draft>) {
          if (!draft_->has_proposal()) break;
        }
        if (auto st = sampler.distribution(dlogits_, hist_, q_[drafted]); !st) return fail(S, st);
        const std::int32_t d = sampler.draw(q_[drafted]);
        drafts_[drafted] = d;
        hist_.push_back(d);
        if (drafted + 1 < k) {
          if (auto st = draft_->forward({&drafts_[drafted], 1}, LogitsMode::last, dlogits_); !st)
            return fail(S, st);
        }
      }
    }
    const auto t1 = clock::now();

    // Target phase: one forward over [pending, d1..d_drafted], then verification.
    batch_.assign(1, seq_.back());
    batch_.insert(batch_.end(), drafts_.begin(),
                  drafts_.begin() + static_cast<std::ptrdiff_t>(drafted));
    if (auto st = target_->forward(batch_, LogitsMode::all,
                                   std::span<float>(tlogits_).first((drafted + 1) * V_));
        !st)
      return fail(S, st);
    hist_.resize(tail);
    emit_.clear();
    std::size_t n = 0;  // accepted drafts
    std::int32_t last = -1;
    for (; n <= drafted; ++n) {
      const auto row = std::span<const float>(tlogits_).subspan(n * V_, V_);
      if (auto st = sampler.distribution(row, hist_, p_); !st) return fail(S, st);
      if (n == drafted) {  // every draft accepted (or none drafted): the target's own token
        last = sampler.draw(p_);
        break;
      }
      const std::int32_t d = drafts_[n];
      const double pd = p_.prob(d), qd = q_[n].prob(d);
      const bool accept = pd >= qd || (pd > 0.0 && sampler.rng().uniform() * qd < pd);
      if (!accept) {
        last = draw_residual(sampler, p_, q_[n]);
        break;
      }
      emit_.push_back(d);
      hist_.push_back(d);
    }
    emit_.push_back(last);
    // Roll back to what was emitted: the target keeps pending + d1..dn, the draft at most that.
    if (auto st = target_->truncate(S + n); !st) return fail(S, st);
    if (draft_pos() > S + n) {
      if (auto st = draft_->truncate(S + n - doff_); !st) return fail(S, st);
    }
    const auto t2 = clock::now();

    seq_.insert(seq_.end(), emit_.begin(), emit_.end());
    out.insert(out.end(), emit_.begin(), emit_.end());
    const double ds = std::chrono::duration<double>(t1 - t0).count();
    const double ts = std::chrono::duration<double>(t2 - t1).count();
    ++stats_.steps;
    if (drafted == 0) ++stats_.plain_steps;
    stats_.drafted += drafted;
    stats_.accepted += n;
    if (n < drafted) ++stats_.rejected;
    ++stats_.target_forwards;
    stats_.emitted += emit_.size();
    stats_.draft_seconds += ds;
    stats_.target_seconds += ts;
    stats_.last_k = k;
    if (adaptive_) control_.record(drafted, n, ds - catch_up_s, ts);
    return {};
  }

  const SpeculativeStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }
  const SpeculativeOptions& options() const noexcept { return options_; }
  /// The adaptive controller (its estimates; meaningful in adaptive mode).
  const AdaptiveDraftLength& controller() const noexcept { return control_; }
  /// Prompt and emitted tokens; the last one is pending (not yet forwarded through the target).
  std::span<const std::int32_t> sequence() const noexcept { return seq_; }
  /// Prompt tokens the latest begin() kept in the target (the common prefix) instead of
  /// forwarding them.
  std::size_t reused() const noexcept { return reused_; }
  Target& target() noexcept { return *target_; }
  Draft& draft() noexcept { return *draft_; }

 private:
  using clock = std::chrono::steady_clock;

  SpeculativeDecoder(Target& target, Draft& draft, const SpeculativeOptions& o)
      : target_(&target),
        draft_(&draft),
        options_(o),
        adaptive_(o.adaptive),
        control_(o.k, o.adaptive ? o.k_max : o.k, o.probe_interval),
        V_(target.vocab_size()) {}

  // The buffers sized by the vocabulary and the draft length.
  status allocate() {
    constexpr std::string_view where = "SpeculativeDecoder::create";
    namespace d = edgellm::detail;
    const std::size_t kcap = options_.adaptive ? options_.k_max : options_.k;
    if (auto st = d::try_resize(tlogits_, (kcap + 1) * V_, where, "target logits"); !st) return st;
    if (auto st = d::try_resize(dlogits_, V_, where, "draft logits"); !st) return st;
    if (auto st = d::try_resize(q_, kcap, where, "draft distributions"); !st) return st;
    if (auto st = d::try_resize(drafts_, kcap, where, "drafts"); !st) return st;
    return d::try_assign(scratch_, V_, 0.0, where, "scratch");
  }

  /// The draft's position in sequence coordinates: it holds seq_[doff_, doff_ + position()).
  std::size_t draft_pos() const { return doff_ + draft_->position(); }

  static double seconds_since(clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  }

  template <class M>
  static status truncate_to(M& m, std::size_t n) {
    return m.position() > n ? m.truncate(n) : status{};
  }

  // Forwards seq_[position(), size - 1): all but the pending token.
  template <class M>
  status forward_rest(M& m) {
    const std::size_t from = m.position(), to = seq_.size() - 1;
    if (from >= to) return {};
    return m.forward(std::span<const std::int32_t>(seq_).subspan(from, to - from), LogitsMode::last,
                     dlogits_);
  }

  // A failed step: put both models back where the step found them.
  status fail(std::size_t S, status st) {
    if (target_->position() > S - 1) (void)target_->truncate(S - 1);
    if (draft_pos() > S) (void)draft_->truncate(S - doff_);
    return st;
  }

  // Draws from normalise(max(0, p - q)) (p(d) < q(d) for the rejected d guarantees it has mass;
  // if rounding leaves none, p itself, which is then the same distribution up to rounding).
  std::int32_t draw_residual(Sampler& sampler, const SparseDistribution& p,
                             const SparseDistribution& q) {
    for (std::size_t i = 0; i < q.ids.size(); ++i)
      scratch_[static_cast<std::size_t>(q.ids[i])] = q.probs[i];
    residual_.ids.clear();
    residual_.probs.clear();
    double total = 0.0;
    for (std::size_t i = 0; i < p.ids.size(); ++i) {
      const double r = p.probs[i] - scratch_[static_cast<std::size_t>(p.ids[i])];
      if (r > 0.0) {
        residual_.ids.push_back(p.ids[i]);
        residual_.probs.push_back(r);
        total += r;
      }
    }
    for (const std::int32_t id : q.ids) scratch_[static_cast<std::size_t>(id)] = 0.0;
    if (!(total > 0.0)) return sampler.draw(p);
    // Keep SparseDistribution's order (descending, ties: lower id) and normalise.
    order_.resize(residual_.ids.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
      return residual_.probs[a] > residual_.probs[b] ||
             (residual_.probs[a] == residual_.probs[b] && residual_.ids[a] < residual_.ids[b]);
    });
    sorted_.ids.resize(order_.size());
    sorted_.probs.resize(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) {
      sorted_.ids[i] = residual_.ids[order_[i]];
      sorted_.probs[i] = residual_.probs[order_[i]] / total;
    }
    return sampler.draw(sorted_);
  }

  Target* target_;
  Draft* draft_;
  std::size_t reused_ = 0;  // prompt tokens the latest begin() kept in the target
  std::size_t doff_ = 0;  // sequence index of the draft's position 0 (see kCatchUpWindow)
  SpeculativeOptions options_;
  bool adaptive_;
  AdaptiveDraftLength control_;
  std::size_t V_;
  SpeculativeStats stats_;
  bool begun_ = false;                 // begin() succeeded: step() may run
  bool known_ = false;                 // both models hold a prefix of seq_
  std::vector<std::int32_t> seq_;      // prompt + emitted; back() is pending
  std::vector<std::int32_t> hist_;     // sampler history: penalty tail + drafts/accepted
  std::vector<std::int32_t> drafts_;   // [kcap]
  std::vector<std::int32_t> batch_;    // [pending, drafts...]
  std::vector<std::int32_t> emit_;     // tokens emitted by the current step
  std::vector<float> tlogits_;         // [(kcap + 1) * V] target rows
  std::vector<float> dlogits_;         // [V] draft next-token scores
  std::vector<SparseDistribution> q_;  // [kcap] draft distributions of the drafts
  SparseDistribution p_, residual_, sorted_;
  std::vector<double> scratch_;  // [V] zeros between uses
  std::vector<std::size_t> order_;
};

}  // namespace edgellm::decode

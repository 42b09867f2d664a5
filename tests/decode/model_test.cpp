// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/decode/model.hpp: the Model concept (compile-time positive and negative
// cases) and its runtime contract on the archetype.
#include "edgellm/decode/model.hpp"

#include "decode/model_contract.hpp"
#include "support/model_archetype.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace test_decode_model {

namespace {

using edgellm::status;
using edgellm::decode::LogitsMode;
using edgellm::decode::Model;
using edgellm::test::ModelArchetype;

static_assert(Model<ModelArchetype>);

// Negative cases: each breaks exactly one requirement of the archetype's interface.
struct NoTruncate {
  std::size_t vocab_size() const;
  std::size_t position() const;
  std::size_t context_size() const;
  status forward(std::span<const std::int32_t>, LogitsMode, std::span<float>);
};
struct ForwardReturnsVoid {
  std::size_t vocab_size() const;
  std::size_t position() const;
  std::size_t context_size() const;
  void forward(std::span<const std::int32_t>, LogitsMode, std::span<float>);
  status truncate(std::size_t);
};
struct NonConstQueries {  // vocab_size() etc. must be callable on a const model
  std::size_t vocab_size();
  std::size_t position();
  std::size_t context_size();
  status forward(std::span<const std::int32_t>, LogitsMode, std::span<float>);
  status truncate(std::size_t);
};
struct WrongTokenType {  // token ids are int32
  std::size_t vocab_size() const;
  std::size_t position() const;
  std::size_t context_size() const;
  status forward(std::span<const std::int64_t>, LogitsMode, std::span<float>);
  status truncate(std::size_t);
};
struct IntPosition {  // sizes are std::size_t exactly
  std::size_t vocab_size() const;
  int position() const;
  std::size_t context_size() const;
  status forward(std::span<const std::int32_t>, LogitsMode, std::span<float>);
  status truncate(std::size_t);
};
static_assert(!Model<NoTruncate>);
static_assert(!Model<ForwardReturnsVoid>);
static_assert(!Model<NonConstQueries>);
static_assert(!Model<WrongTokenType>);
static_assert(!Model<IntPosition>);

// A function constrained on the concept instantiates on the archetype: it needs nothing more.
template <Model M>
std::size_t consume(M& m, std::span<const std::int32_t> tokens, std::span<float> logits) {
  return m.forward(tokens, LogitsMode::last, logits) ? m.position() : 0;
}

}  // namespace

TEST_CASE("logits_count", "[decode]") {
  using edgellm::decode::logits_count;
  CHECK(logits_count(LogitsMode::last, 7, 300) == 300);
  CHECK(logits_count(LogitsMode::all, 7, 300) == 2100);
  CHECK(logits_count(LogitsMode::all, 1, 5) == 5);
}

TEST_CASE("ModelArchetype meets the Model contract", "[decode]") {
  const std::vector<std::int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  edgellm::test::check_model_contract([] { return ModelArchetype(17, 32); }, tokens, 0.0f);

  ModelArchetype m(17, 32);
  std::vector<float> logits(17);
  CHECK(consume(m, tokens, logits) == tokens.size());
}

TEST_CASE("ModelArchetype: logits depend on the whole prefix", "[decode]") {
  ModelArchetype a(50, 16), b(50, 16);
  std::vector<float> la(50), lb(50);
  const std::int32_t x[] = {1, 2, 3}, y[] = {4, 2, 3};
  REQUIRE(a.forward(x, LogitsMode::last, la));
  REQUIRE(b.forward(y, LogitsMode::last, lb));
  CHECK(la != lb);
  ModelArchetype salted(50, 16, 1);
  REQUIRE(salted.forward(x, LogitsMode::last, lb));
  CHECK(la != lb);
}

}  // namespace test_decode_model

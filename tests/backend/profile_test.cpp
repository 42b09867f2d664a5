// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/backend/profile.hpp: the per-op totals, the scope timer (nothing without a
// Profile, the pool's fork-joins with one), and the CPU backend filing its ops under their kinds.
#include "edgellm/backend/profile.hpp"

#include "edgellm/backend/cpu.hpp"
#include "support/q4_fixtures.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <set>
#include <string_view>
#include <vector>

namespace test_backend_profile {

namespace {

using edgellm::ThreadPool;
using edgellm::backend::Cpu;
using edgellm::backend::OpKind;
using edgellm::backend::Profile;
using edgellm::backend::ProfileScope;

}  // namespace

TEST_CASE("Profile: per-kind sums, total, reset, names", "[backend]") {
  Profile p;
  p.add(OpKind::qkv, 100, 1);
  p.add(OpKind::qkv, 50, 1);
  p.add(OpKind::lm_head, 7, 0);
  CHECK(p[OpKind::qkv].ns == 150);
  CHECK(p[OpKind::qkv].calls == 2);
  CHECK(p[OpKind::qkv].regions == 2);
  CHECK(p[OpKind::down].calls == 0);
  CHECK(p.total().ns == 157);
  CHECK(p.total().calls == 3);
  CHECK(p.total().regions == 2);
  p.reset();
  CHECK(p.total().calls == 0);

  std::set<std::string_view> names;
  for (std::size_t i = 0; i < edgellm::backend::kOpKinds; ++i)
    names.insert(edgellm::backend::op_kind_name(static_cast<OpKind>(i)));
  CHECK(names.size() == edgellm::backend::kOpKinds);  // distinct
  CHECK(edgellm::backend::op_kind_name(OpKind::lm_head) == "lm_head");
  CHECK(edgellm::backend::op_kind_name(OpKind::other) == "other");
}

TEST_CASE("ProfileScope: times into a Profile with the pool's fork-joins; null does nothing",
          "[backend]") {
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  Profile p;
  {
    const ProfileScope s(&p, OpKind::attention, pool->get());
    (*pool)->run([](std::size_t, std::size_t) {});
    (*pool)->parallel_for(8, [](std::size_t, std::size_t) {});
  }
  CHECK(p[OpKind::attention].calls == 1);
  CHECK(p[OpKind::attention].regions == 2);
  {
    const ProfileScope s(nullptr, OpKind::attention, pool->get());
    (*pool)->run([](std::size_t, std::size_t) {});
  }
  CHECK(p.total().calls == 1);  // the null scope added nothing
  {
    const ProfileScope s(&p, OpKind::add, nullptr);  // no pool: no fork-joins
  }
  CHECK(p[OpKind::add].calls == 1);
  CHECK(p[OpKind::add].regions == 0);
}

TEST_CASE("Cpu backend with a Profile: each op under its kind, linears told apart by shape",
          "[backend]") {
  edgellm::backend::ModelShape shape;
  shape.hidden = 256;
  shape.intermediate = 512;
  shape.heads = 2;
  shape.kv_heads = 1;
  shape.head_dim = 128;
  shape.vocab = 10;
  shape.max_batch = 1;
  shape.rms_norm_eps = 1e-5f;
  shape.rope_inv_freq.assign(64, 0.01f);
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  Profile p;
  edgellm::backend::Options o;
  o.pool = pool->get();
  o.profile = &p;
  auto b = Cpu::create(shape, o);
  REQUIRE(b);
  auto x = b->activation(256), n = b->activation(256), g = b->activation(512),
       u = b->activation(512);
  REQUIRE((x && n && g && u));
  auto rng = edgellm::test::make_rng(3);
  edgellm::kernels::Linear o_proj, down, gate, up;
  o_proj.q4 = edgellm::test::random_q4(rng, 256, 256, 128);  // heads * head_dim -> hidden
  down.q4 = edgellm::test::random_q4(rng, 256, 512, 128);    // intermediate -> hidden
  gate.q4 = edgellm::test::random_q4(rng, 512, 256, 128);
  up.q4 = edgellm::test::random_q4(rng, 512, 256, 128);
  const auto w = edgellm::test::random_floats(rng, 256);
  const auto xs = edgellm::test::random_floats(rng, 256);
  std::copy(xs.begin(), xs.end(), x->data.begin());

  REQUIRE(b->begin(0, 1));
  b->rms_norm(*x, w, *n, 0, 1);
  const edgellm::backend::LinearTarget<Cpu> gu[] = {{&gate, *g}, {&up, *u}};
  REQUIRE(b->linear_group(gu, *n, 1));
  b->silu_mul(*g, *u, 1);
  REQUIRE(b->linear(&down, *g, *n, 1));
  b->add(*x, *n, 1);
  REQUIRE(b->linear(&o_proj, *x, *n, 1));
  REQUIRE(b->finish());

  CHECK(p[OpKind::other].calls == 2);  // begin, finish
  CHECK(p[OpKind::rms_norm].calls == 1);
  CHECK(p[OpKind::gate_up].calls == 1);
  CHECK(p[OpKind::qkv].calls == 0);
  CHECK(p[OpKind::silu_mul].calls == 1);
  CHECK(p[OpKind::down].calls == 1);
  CHECK(p[OpKind::o_proj].calls == 1);
  CHECK(p[OpKind::add].calls == 1);
  CHECK(p.total().calls == 8);
  // The matmuls fork on the 2-thread pool; the elementwise ops do not.
  CHECK(p[OpKind::gate_up].regions >= 1);
  CHECK(p[OpKind::down].regions >= 1);
  CHECK(p[OpKind::silu_mul].regions == 0);
  CHECK(p.total().regions == (*pool)->regions());
  CHECK(p[OpKind::down].ns > 0);

  // Without a Profile the same ops add nothing anywhere.
  const Profile before = p;
  edgellm::backend::Options unprofiled;
  unprofiled.pool = pool->get();
  auto plain = Cpu::create(shape, unprofiled);
  REQUIRE(plain);
  auto x2 = plain->activation(256), n2 = plain->activation(256);
  REQUIRE((x2 && n2));
  REQUIRE(plain->linear(&o_proj, *x2, *n2, 1));
  CHECK(p.total().calls == before.total().calls);
}

}  // namespace test_backend_profile

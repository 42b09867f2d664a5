// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/awq.hpp"

#include <catch2/catch.hpp>

#include <cstring>

#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_awq {

using namespace edgellm::kernels;

namespace {
template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

UnpackedQ4 random_unpacked(std::mt19937_64& rng, std::size_t n, std::size_t k, std::size_t G) {
  UnpackedQ4 w;
  w.n = n;
  w.k = k;
  w.group_size = G;
  std::uniform_int_distribution<int> code(0, 15), half(0, 0x7BFF);
  for (std::size_t i = 0; i < n * k; ++i) w.q.push_back(static_cast<std::uint8_t>(code(rng)));
  for (std::size_t i = 0; i < n * (k / G); ++i) {
    w.zero.push_back(static_cast<std::uint8_t>(code(rng)));
    w.scale.push_back(static_cast<std::uint16_t>(half(rng)));
  }
  return w;
}

// AutoAWQ's gemv packing (WQLinear_GEMV.from_linear), written independently from formats.md
// section 1.4: sequential nibbles along K, zeros padded to zeros_width words, scales padded.
struct GemvArrays {
  std::vector<std::int32_t> qweight, qzeros;
  std::vector<std::uint16_t> scales;
  std::size_t zw;
};
GemvArrays pack_gemv(const UnpackedQ4& w) {
  GemvArrays a;
  const std::size_t ng = w.k / w.group_size;
  a.zw = awq_gemv_zeros_width(w.k, w.group_size);
  a.qweight.assign(w.n * w.k / 8, 0);
  a.qzeros.assign(w.n * a.zw, 0);
  a.scales.assign(w.n * a.zw * 8, 0);
  for (std::size_t r = 0; r < w.n; ++r) {
    for (std::size_t c = 0; c < w.k; ++c)
      a.qweight[r * w.k / 8 + c / 8] = static_cast<std::int32_t>(
          static_cast<std::uint32_t>(a.qweight[r * w.k / 8 + c / 8]) |
          (static_cast<std::uint32_t>(w.q[r * w.k + c]) << (4 * (c % 8))));
    for (std::size_t g = 0; g < ng; ++g) {
      a.qzeros[r * a.zw + g / 8] = static_cast<std::int32_t>(
          static_cast<std::uint32_t>(a.qzeros[r * a.zw + g / 8]) |
          (static_cast<std::uint32_t>(w.zero[r * ng + g]) << (4 * (g % 8))));
      a.scales[r * a.zw * 8 + g] = w.scale[r * ng + g];
    }
  }
  return a;
}
}  // namespace

TEST_CASE("AWQ gemm packing matches AutoAWQ's test vector", "[kernels][awq]") {
  // formats.md 1.3/1.7: eight columns holding codes 1..8 pack into 0x86427531.
  UnpackedQ4 w;
  w.n = 8;
  w.k = 32;
  w.group_size = 32;
  w.q.assign(8 * 32, 0);
  for (std::size_t col = 0; col < 8; ++col) w.q[col * 32 + 0] = static_cast<std::uint8_t>(col + 1);
  w.zero.assign(8, 0);
  w.scale.assign(8, 0x3C00);
  auto a = export_awq_gemm(w);
  REQUIRE(a);
  REQUIRE(static_cast<std::uint32_t>(a->qweight[0]) == 0x86427531u);
  REQUIRE(a->qweight_shape == std::vector<std::size_t>{32, 1});
  REQUIRE(awq_gemv_zeros_width(4096, 128) == 4);
  REQUIRE(awq_gemv_zeros_width(4096, 64) == 8);
  REQUIRE(awq_gemv_zeros_width(4096, 32) == 16);
  REQUIRE(awq_gemv_zeros_width(3584, 128) == 4);
}

TEST_CASE("AWQ gemm import/export round trip is byte-exact", "[kernels][awq]") {
  auto rng = test::make_rng(11);
  const std::size_t G = GENERATE(32, 64, 128);
  const std::size_t n = GENERATE(8, 24, 64);
  const std::size_t k = 2 * G;
  auto w = random_unpacked(rng, n, k, G);
  auto a = export_awq_gemm(w);
  REQUIRE(a);
  AwqLinearTensors t{{bytes_of(a->qweight), a->qweight_shape, "p.qweight"},
                     {bytes_of(a->qzeros), a->qzeros_shape, "p.qzeros"},
                     {bytes_of(a->scales), a->scales_shape, "p.scales"}};
  auto back = import_awq_gemm(t, G);
  REQUIRE(back);
  REQUIRE(back->q == w.q);
  REQUIRE(back->zero == w.zero);
  REQUIRE(back->scale == w.scale);
  // And through the packed kernel layout: import -> pack -> unpack -> export, identical bytes.
  auto packed = pack_q4(*back);
  REQUIRE(packed);
  auto again = export_awq_gemm(unpack_q4(*packed));
  REQUIRE(again);
  REQUIRE(std::memcmp(again->qweight.data(), a->qweight.data(), a->qweight.size() * 4) == 0);
  REQUIRE(again->qzeros == a->qzeros);
  REQUIRE(again->scales == a->scales);
}

TEST_CASE("AWQ gemv import agrees with the gemm import", "[kernels][awq]") {
  auto rng = test::make_rng(12);
  const std::size_t G = GENERATE(32, 64, 128);
  const std::size_t n = 16, k = 3 * G;  // 3 groups: zeros and scales carry padding
  auto w = random_unpacked(rng, n, k, G);
  auto gv = pack_gemv(w);
  AwqLinearTensors t{{bytes_of(gv.qweight), {n, k / 8}, "p.qweight"},
                     {bytes_of(gv.qzeros), {n, gv.zw}, "p.qzeros"},
                     {bytes_of(gv.scales), {n, gv.zw * 8}, "p.scales"}};
  auto imported = import_awq_gemv(t, G);
  REQUIRE(imported);
  REQUIRE(imported->q == w.q);
  REQUIRE(imported->zero == w.zero);
  REQUIRE(imported->scale == w.scale);
}

TEST_CASE("AWQ import reads unaligned tensor bytes", "[kernels][awq]") {
  auto rng = test::make_rng(13);
  auto w = random_unpacked(rng, 8, 128, 128);
  auto a = export_awq_gemm(w);
  REQUIRE(a);
  std::vector<std::byte> buf(1 + a->qweight.size() * 4);
  std::memcpy(buf.data() + 1, a->qweight.data(), a->qweight.size() * 4);
  AwqLinearTensors t{{std::span<const std::byte>(buf).subspan(1), a->qweight_shape, "p.qweight"},
                     {bytes_of(a->qzeros), a->qzeros_shape, "p.qzeros"},
                     {bytes_of(a->scales), a->scales_shape, "p.scales"}};
  auto back = import_awq_gemm(t, 128);
  REQUIRE(back);
  REQUIRE(back->q == w.q);
}

TEST_CASE("AWQ import names the mismatched tensor", "[kernels][awq]") {
  auto rng = test::make_rng(14);
  auto w = random_unpacked(rng, 16, 256, 128);
  auto a = export_awq_gemm(w);
  REQUIRE(a);
  AwqLinearTensors t{{bytes_of(a->qweight), a->qweight_shape, "layers.0.q_proj.qweight"},
                     {bytes_of(a->qzeros), a->qzeros_shape, "layers.0.q_proj.qzeros"},
                     {bytes_of(a->scales), a->scales_shape, "layers.0.q_proj.scales"}};
  SECTION("qzeros with the wrong group count") {
    t.qzeros.shape = {3, 2};
    auto r = import_awq_gemm(t, 128);
    REQUIRE_FALSE(r);
    REQUIRE(r.error().code == errc::shape_mismatch);
    REQUIRE_THAT(r.error().message, Catch::Contains("layers.0.q_proj.qzeros: shape [3, 2]"));
  }
  SECTION("scales with too few bytes") {
    t.scales.data = t.scales.data.subspan(2);
    auto r = import_awq_gemm(t, 128);
    REQUIRE_FALSE(r);
    REQUIRE_THAT(r.error().message, Catch::Contains("layers.0.q_proj.scales"));
  }
  SECTION("K not a multiple of the group size") {
    auto r = import_awq_gemm(t, 96);
    REQUIRE_FALSE(r);
    REQUIRE_THAT(r.error().message, Catch::Contains("layers.0.q_proj.qweight"));
  }
  SECTION("qweight not 2-D") {
    t.qweight.shape = {256 * 2};
    auto r = import_awq_gemm(t, 128);
    REQUIRE_FALSE(r);
    REQUIRE_THAT(r.error().message, Catch::Contains("2-D"));
  }
  SECTION("gemv tensors with wrong zeros width") {
    auto gv = pack_gemv(w);
    AwqLinearTensors tv{{bytes_of(gv.qweight), {16, 32}, "v.qweight"},
                        {bytes_of(gv.qzeros), {16, gv.zw + 1}, "v.qzeros"},
                        {bytes_of(gv.scales), {16, gv.zw * 8}, "v.scales"}};
    auto r = import_awq_gemv(tv, 128);
    REQUIRE_FALSE(r);
    REQUIRE_THAT(r.error().message, Catch::Contains("v.qzeros"));
  }
  SECTION("export needs n % 8 == 0") {
    auto w6 = random_unpacked(rng, 6, 128, 128);
    auto r = export_awq_gemm(w6);
    REQUIRE_FALSE(r);
    REQUIRE_THAT(r.error().message, Catch::Contains("n: 6"));
  }
}

TEST_CASE("AWQ import: a tensor too big for memory is an out_of_memory error, not bad_alloc",
          "[kernels][awq]") {
  // Shapes at check_dims' limits (n = k = 2^31): 2^62 int4 codes, more than any address space.
  // The spans claim the sizes the shapes imply; the import fails before it reads a byte.
  constexpr std::size_t big = std::size_t{1} << 31, G = 128;
  const std::byte dummy[64] = {};
  const auto lying = [&](std::size_t bytes) { return std::span<const std::byte>(dummy, bytes); };
  AwqLinearTensors t;
  t.qweight = {lying(big * (big / 8) * 4), {big, big / 8}, "layers.0.mlp.up_proj.qweight"};
  t.qzeros = {lying((big / G) * (big / 8) * 4), {big / G, big / 8}, "layers.0.mlp.up_proj.qzeros"};
  t.scales = {lying((big / G) * big * 2), {big / G, big}, "layers.0.mlp.up_proj.scales"};
  auto r = import_awq_gemm(t, G);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == edgellm::errc::out_of_memory);
  CHECK_THAT(r.error().message, Catch::Matchers::Contains("layers.0.mlp.up_proj.qweight") &&
                                    Catch::Matchers::Contains("4611686018427387904 bytes"));

  AwqLinearTensors v;  // the gemv layout: qweight [n, k/8], qzeros [n, zw], scales [n, zw*8]
  const std::size_t zw = awq_gemv_zeros_width(big, G);
  v.qweight = {lying(big * (big / 8) * 4), {big, big / 8}, "gemv.qweight"};
  v.qzeros = {lying(big * zw * 4), {big, zw}, "gemv.qzeros"};
  v.scales = {lying(big * zw * 8 * 2), {big, zw * 8}, "gemv.scales"};
  auto g = import_awq_gemv(v, G);
  REQUIRE_FALSE(g);
  CHECK(g.error().code == edgellm::errc::out_of_memory);
  CHECK_THAT(g.error().message, Catch::Matchers::Contains("gemv.qweight"));
}

}  // namespace test_kernels_awq

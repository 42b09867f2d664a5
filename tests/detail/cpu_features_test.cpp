// SPDX-License-Identifier: Apache-2.0
#include "edgellm/detail/cpu_features.hpp"

#include <catch2/catch.hpp>

namespace test_detail_cpu_features {

using edgellm::detail::cpu_features;

TEST_CASE("cpu_features is consistent and agrees with the build flags", "[detail]") {
  const auto& f = cpu_features();
  REQUIRE(&f == &cpu_features());  // detected once
  if (f.avx512_vnni || f.avx_vnni) REQUIRE(f.avx2);
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  REQUIRE(f.avx2);  // this binary runs, so the CPU has what it was compiled for
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  REQUIRE(f.avx512_vnni);
#endif
#if defined(__aarch64__)
  REQUIRE(f.neon);
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  REQUIRE(f.neon_dotprod);
#endif
  if (f.neon_i8mm) REQUIRE(f.neon_dotprod);
  if (f.neon_dotprod) REQUIRE(f.neon);
  WARN("cpu features: avx2 " << f.avx2 << " avx_vnni " << f.avx_vnni << " avx512_vnni "
                             << f.avx512_vnni << " neon " << f.neon << " neon_dotprod "
                             << f.neon_dotprod << " neon_i8mm " << f.neon_i8mm);
  SUCCEED();
}

}  // namespace test_detail_cpu_features

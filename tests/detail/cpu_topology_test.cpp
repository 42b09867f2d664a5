// SPDX-License-Identifier: Apache-2.0
#include "edgellm/detail/cpu_topology.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "support/test_env.hpp"

namespace test_detail_cpu_topology {

using namespace edgellm::detail;

namespace {
std::string sysfs(const char* name) {
  return edgellm::test::source_dir() + "/tests/data/sysfs/" + name;
}
using cpus = std::vector<unsigned>;
}  // namespace

TEST_CASE("cpu topology: a 1+3+4 phone uses its prime and big cores", "[detail]") {
  const CpuTopology t = read_cpu_topology(sysfs("phone-1-3-4"));
  REQUIRE(t.source == "cpu_capacity");
  REQUIRE(t.online == cpus{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(t.performance == cpus{4, 5, 6, 7});  // 870 and 1024; the 325 cluster left out
  REQUIRE(t.heterogeneous());
  REQUIRE(default_compute_threads(t, 8) == 4);
}

TEST_CASE("cpu topology: max frequencies when there is no cpu_capacity", "[detail]") {
  const CpuTopology t = read_cpu_topology(sysfs("phone-freq-2-6"));
  REQUIRE(t.source == "cpuinfo_max_freq");
  REQUIRE(t.performance == cpus{6, 7});
  REQUIRE(default_compute_threads(t, 8) == 2);
}

TEST_CASE("cpu topology: offline cores are neither counted nor read", "[detail]") {
  const CpuTopology t = read_cpu_topology(sysfs("phone-offline"));
  REQUIRE(t.online == cpus{0, 1, 2, 3, 6, 7});
  REQUIRE(t.performance == cpus{6, 7});
  REQUIRE(default_compute_threads(t, 6) == 2);
}

TEST_CASE("cpu topology: a uniform machine keeps the default", "[detail]") {
  const CpuTopology t = read_cpu_topology(sysfs("uniform-2"));
  REQUIRE(t.source == "cpu_capacity");
  REQUIRE(t.performance == t.online);
  REQUIRE_FALSE(t.heterogeneous());
  REQUIRE(default_compute_threads(t, 2) == 2);
  const CpuTopology n = read_cpu_topology(sysfs("no-speeds-4"));
  REQUIRE(n.source == "none");
  REQUIRE(n.performance == cpus{0, 1, 2, 3});
  REQUIRE(default_compute_threads(n, 4) == 4);
  const CpuTopology missing = read_cpu_topology(sysfs("does-not-exist"));
  REQUIRE(missing.online.empty());
  REQUIRE_FALSE(missing.heterogeneous());
  REQUIRE(default_compute_threads(missing, 3) == 3);
  REQUIRE(default_compute_threads(missing, 0) == 1);
}

TEST_CASE("cpu topology: this machine", "[detail]") {
  const CpuTopology t = read_cpu_topology();
  WARN("this machine: " << t.online.size() << " online cpus, " << t.performance.size()
                        << " performance cores (" << t.source << ")");
  for (unsigned c : t.performance)
    REQUIRE(std::find(t.online.begin(), t.online.end(), c) != t.online.end());
}

TEST_CASE("cpu topology: the last-level cache from sysfs", "[detail]") {
  // L1d 64K, L1i 64K (ignored: instructions), L2 512K, L3 8192K.
  REQUIRE(last_level_cache_bytes(sysfs("phone-1-3-4")) == std::size_t{8} << 20);
  REQUIRE(last_level_cache_bytes(sysfs("uniform-2")) == 0);  // no cache/ directory: unknown
  REQUIRE(last_level_cache_bytes(sysfs("does-not-exist")) == 0);
}

TEST_CASE("cpu topology: sysfs cpu lists", "[detail]") {
  using topology_detail::parse_cpu_list;
  REQUIRE(parse_cpu_list("0-3,6,8-9\n") == cpus{0, 1, 2, 3, 6, 8, 9});
  REQUIRE(parse_cpu_list("5") == cpus{5});
  REQUIRE(parse_cpu_list("").empty());
  REQUIRE(parse_cpu_list("3-1").empty());
  REQUIRE(parse_cpu_list("0-x").empty());
  REQUIRE(parse_cpu_list("0,,1").empty());
}

TEST_CASE("--threads cap: 4 x the hardware threads, never over 256", "[detail]") {
  REQUIRE(max_threads_flag(2) == 8);
  REQUIRE(max_threads_flag(16) == 64);
  REQUIRE(max_threads_flag(64) == 256);
  REQUIRE(max_threads_flag(192) == 256);
  REQUIRE(max_threads_flag(0) == 256);  // unknown
  REQUIRE(max_threads_flag() >= std::max<std::size_t>(hardware_threads(), 1));
}

}  // namespace test_detail_cpu_topology

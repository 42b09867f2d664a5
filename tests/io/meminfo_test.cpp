// SPDX-License-Identifier: Apache-2.0
// /proc/meminfo parsing on fixture files (tests/data/meminfo): a current kernel, an old one
// without MemAvailable, and malformed files whose errors name the file and the line; the
// /proc/self/status reader (VmRSS, VmHWM).
#include "edgellm/io/meminfo.hpp"

#include "support/test_env.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

namespace test_io_meminfo {

namespace {

std::string fixture(const char* name) {
  return edgellm::test::source_dir() + "/tests/data/meminfo/" + name;
}

}  // namespace

TEST_CASE("meminfo: a current kernel's MemAvailable, in bytes", "[io][meminfo]") {
  auto m = edgellm::io::read_meminfo(fixture("linux-6.1.txt"));
  INFO((m ? std::string() : m.error().message));
  REQUIRE(m);
  CHECK(m->total == 24683520ull * 1024);
  CHECK(m->free == 22931712ull * 1024);
  CHECK(m->available == 23661568ull * 1024);
  CHECK_FALSE(m->available_estimated);
}

TEST_CASE("meminfo: without MemAvailable, MemFree + Cached", "[io][meminfo]") {
  auto m = edgellm::io::read_meminfo(fixture("android-3.10-no-available.txt"));
  REQUIRE(m);
  CHECK(m->available == (102400ull + 1048576ull) * 1024);
  CHECK(m->available_estimated);
}

TEST_CASE("meminfo: malformed files are refused with the file named", "[io][meminfo]") {
  auto none = edgellm::io::read_meminfo(fixture("no-total.txt"));
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error().message, Catch::Contains("no-total.txt") && Catch::Contains("MemTotal"));
  auto bad = edgellm::io::read_meminfo(fixture("bad-value.txt"));
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("MemTotal") && Catch::Contains("lots"));
  auto missing = edgellm::io::read_meminfo(fixture("absent.txt"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == edgellm::errc::io_error);
  CHECK_FALSE(edgellm::io::parse_meminfo("MemTotal: 1 kB\nMemFree: 18446744073709551615 kB\n"));
}

TEST_CASE("meminfo: this machine's /proc/meminfo parses", "[io][meminfo]") {
  auto m = edgellm::io::read_meminfo();
  if (!m) {
    WARN("no /proc/meminfo here: " << m.error().message);
    return;
  }
  CHECK(m->total > 0);
  CHECK(m->available <= m->total);
}

TEST_CASE("proc_status_bytes: a status line's kB in bytes, 0 when absent", "[io][meminfo]") {
  using edgellm::io::proc_status_bytes;
  const std::string status = "Name:\tx\nVmHWMx:\t7 kB\nVmHWM:\t    1948 kB\nVmRSS:\t12 kB\n";
  CHECK(proc_status_bytes(status, "VmHWM") == 1948u * 1024);
  CHECK(proc_status_bytes(status, "VmRSS") == 12u * 1024);
  CHECK(proc_status_bytes(status, "VmSwap") == 0);
  CHECK(proc_status_bytes("VmHWM: many kB\n", "VmHWM") == 0);
  CHECK(proc_status_bytes("VmHWM: 99999999999999999999 kB", "VmHWM") == 0);
#if defined(__linux__)
  // The current figure first: RSS may grow between the two reads (reading /proc allocates),
  // and the peak read after it is at least what it was then.
  const std::uint64_t current = edgellm::io::current_rss_bytes();
  const std::uint64_t peak = edgellm::io::peak_rss_bytes();
  CHECK(peak > 0);
  CHECK(peak >= current);
#endif
}

}  // namespace test_io_meminfo

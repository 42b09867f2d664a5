// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/atomic_file.hpp: whole writes, replacing a file, abandoned and failed
// writes leave the target as it was, errors name the file and the OS reason, and writers racing
// on one target (threads of one process) each leave one whole content.
#include "edgellm/io/atomic_file.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace test_io_atomic_file {

namespace {

using Catch::Matchers::Contains;
using edgellm::test::TempDir;
namespace io = edgellm::io;

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::size_t entries(const TempDir& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++n;
  return n;
}

}  // namespace

TEST_CASE("write_file_atomic writes and replaces whole files", "[io]") {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  REQUIRE(io::write_file_atomic(path, bytes_of("first content")));
  CHECK(slurp(path) == "first content");
  REQUIRE(io::write_file_atomic(path, bytes_of("2nd")));
  CHECK(slurp(path) == "2nd");
  REQUIRE(io::write_file_atomic(path, {}));
  CHECK(slurp(path).empty());
  CHECK(std::filesystem::exists(path));
  CHECK(entries(dir) == 1);  // no temporary file left
}

TEST_CASE("AtomicFileWriter writes in pieces; abandoned writes change nothing", "[io]") {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  REQUIRE(io::write_file_atomic(path, bytes_of("old")));
  {
    auto w = io::AtomicFileWriter::create(path, "test");
    REQUIRE(w);
    CHECK(w->path() == path);
    CHECK_THAT(w->temp_path(), Contains(path + ".tmp."));
    CHECK(std::filesystem::exists(w->temp_path()));
    REQUIRE(w->write(bytes_of("new ")));
    CHECK(slurp(path) == "old");  // not visible before commit
    // A second writer of the same target in the same thread gets its own temporary file.
    auto w2 = io::AtomicFileWriter::create(path, "test");
    REQUIRE(w2);
    CHECK(w2->temp_path() != w->temp_path());
    REQUIRE(w->write(bytes_of("content")));
    REQUIRE(w->commit());
    CHECK(w->temp_path().empty());
    // w2 is destroyed uncommitted: its temporary file goes, the target stays.
  }
  CHECK(slurp(path) == "new content");
  CHECK(entries(dir) == 1);
  auto moved = io::AtomicFileWriter::create(path);
  REQUIRE(moved);
  io::AtomicFileWriter other = std::move(*moved);
  REQUIRE(other.write(bytes_of("moved")));
  REQUIRE(other.commit());
  CHECK(slurp(path) == "moved");
  CHECK_FALSE(other.commit());  // nothing open any more
}

TEST_CASE("atomic write errors name the file and the OS reason", "[io]") {
  TempDir dir;
  const std::string bad = dir.file("no/such/dir/out.bin");
  auto st = io::write_file_atomic(bad, bytes_of("x"), "save_thing");
  REQUIRE_FALSE(st);
  CHECK(st.error().code == edgellm::errc::io_error);
  CHECK_THAT(st.error().message, Contains("[save_thing] '" + bad + "': cannot create"));
  CHECK_THAT(st.error().message, Contains("No such file or directory (errno 2)"));
  CHECK_FALSE(std::filesystem::exists(bad));

  // The target is a directory: the rename fails, and the temporary file is removed.
  const std::string d = dir.file("adir");
  std::filesystem::create_directories(d + "/inside");
  auto over_dir = io::write_file_atomic(d, bytes_of("x"));
  REQUIRE_FALSE(over_dir);
  CHECK_THAT(over_dir.error().message, Contains("'" + d + "': cannot rename the temporary file"));
  CHECK(std::filesystem::is_directory(d));
  CHECK(entries(dir) == 1);
}

TEST_CASE("threads writing one target at once each leave a whole file", "[io]") {
  TempDir dir;
  const std::string path = dir.file("raced.bin");
  // Large enough that the writes overlap in time.
  const std::string a(3 << 20, 'a'), b(2 << 20, 'b');
  for (int round = 0; round < 3; ++round) {
    edgellm::status sa, sb;
    std::thread ta([&] { sa = io::write_file_atomic(path, bytes_of(a)); });
    std::thread tb([&] { sb = io::write_file_atomic(path, bytes_of(b)); });
    ta.join();
    tb.join();
    INFO((sa ? std::string() : sa.error().message) << (sb ? std::string() : sb.error().message));
    CHECK(sa);
    CHECK(sb);
    const std::string got = slurp(path);
    CHECK((got == a || got == b));
    CHECK(entries(dir) == 1);
  }
}

TEST_CASE("check_replaceable: only nothing, an empty file or one of ours may be replaced",
          "[io]") {
  TempDir dir;
  const std::string magic = "OURMAGIC";
  const auto check = [&](const std::string& path) {
    return io::check_replaceable(path, bytes_of(magic), "a thing of ours", "save_thing");
  };
  CHECK(check(dir.file("missing.bin")));
  {
    std::ofstream(dir.file("empty.bin"));
  }
  CHECK(check(dir.file("empty.bin")));
  {
    std::ofstream(dir.file("ours.bin")) << magic << "payload";
  }
  CHECK(check(dir.file("ours.bin")));

  {
    std::ofstream(dir.file("notes.txt")) << "someone's notes, not ours";
  }
  auto other = check(dir.file("notes.txt"));
  REQUIRE_FALSE(other);
  CHECK(other.error().code == edgellm::errc::io_error);
  CHECK_THAT(other.error().message,
             Contains("[save_thing] '" + dir.file("notes.txt") +
                      "': exists and is not a thing of ours; not overwritten"));
  {
    std::ofstream(dir.file("short.bin")) << "OUR";  // a prefix of the magic is not ours
  }
  CHECK_FALSE(check(dir.file("short.bin")));

  auto directory = check(dir.path().string());
  REQUIRE_FALSE(directory);
  CHECK_THAT(directory.error().message, Contains("is a directory, not a regular file"));
  CHECK_THAT(directory.error().message, Contains("not written"));
  if (std::filesystem::exists("/dev/full")) {
    auto device = check("/dev/full");
    REQUIRE_FALSE(device);
    CHECK_THAT(device.error().message, Contains("is a character device"));
  }
}

}  // namespace test_io_atomic_file

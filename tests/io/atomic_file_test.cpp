// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/atomic_file.hpp: whole writes, replacing a file, abandoned and failed
// writes leave the target as it was, errors name the file and the OS reason, and writers racing
// on one target (threads of one process) each leave one whole content.
#include "edgellm/io/atomic_file.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
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

  // The target is a directory: refused before anything is written.
  const std::string d = dir.file("adir");
  std::filesystem::create_directories(d + "/inside");
  auto over_dir = io::write_file_atomic(d, bytes_of("x"));
  REQUIRE_FALSE(over_dir);
  CHECK_THAT(over_dir.error().message, Contains("'" + d + "': is a directory, not a regular file"));
  CHECK(std::filesystem::is_directory(d + "/inside"));
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

namespace {

/// A pid no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("output rule: devices, FIFOs, directories, inputs and their ancestors are refused "
          "with or without replace, never suggesting it",
          "[io]") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::filesystem::create_directories(dir.file("a/in"));
  const std::string input = dir.file("a/in");
  const std::string inputs[] = {input};
  for (const bool replace : {false, true}) {
    INFO("replace " << replace);
    io::OutputRule rule;
    rule.replace = replace;
    rule.replace_hint = "--force";
    rule.inputs = inputs;
    const auto refused = [&](const std::string& path, const std::string& why) {
      INFO(path);
      auto w = io::AtomicFileWriter::create(path, "test", rule);
      REQUIRE_FALSE(w);
      CHECK_THAT(w.error().message, Contains("'" + path + "': " + why));
      CHECK_THAT(w.error().message, Contains("not written (choose another path)"));
      CHECK_THAT(w.error().message, !Contains("--force"));
    };
    refused(fifo, "is a FIFO (named pipe), not a regular file");
    refused(dir.file("a"), "contains the input '" + input + "'");
    refused(input, "is the input '" + input + "'");
    refused(dir.file("a/in/"), "is the input '" + input + "'");
    refused("/", "is the root directory");
    refused(".", "is the current directory");
    refused("..", "contains the current directory");
    if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
      auto h = io::check_output_path(home, rule, "test");  // or "contains the current ..."
      REQUIRE_FALSE(h);
      CHECK_THAT(h.error().message, Contains("directory; not written"));
    }
    if (std::filesystem::exists("/dev/null")) refused("/dev/null", "is a character device");
    // A symlink is judged by what it points to.
    std::filesystem::create_symlink(fifo, dir.file("link" + std::to_string(replace)));
    refused(dir.file("link" + std::to_string(replace)), "is a FIFO");
    io::OutputRule d = rule;
    d.kind = io::OutputKind::directory;
    d.marker = ".ours";
    auto unmarked = io::check_output_path(dir.file("a/in/.."), d, "test");
    REQUIRE_FALSE(unmarked);
    CHECK_THAT(unmarked.error().message, Contains("contains the input"));
    std::filesystem::create_directories(dir.file("theirs"));
    auto theirs = io::check_output_path(dir.file("theirs"), d, "test");
    REQUIRE_FALSE(theirs);
    CHECK_THAT(theirs.error().message,
               Contains("is a directory without the .ours file") && !Contains("--force"));
  }
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(std::filesystem::is_directory(input));
}

TEST_CASE("output rule: without replace, a target that appears before commit is kept", "[io]") {
  TempDir dir;
  const std::string path = dir.file("out.json");
  io::OutputRule rule;
  rule.replace = false;
  rule.replace_hint = "--force";
  {
    std::ofstream(dir.file("old.json")) << "old";
  }
  auto exists = io::AtomicFileWriter::create(dir.file("old.json"), "test", rule);
  REQUIRE_FALSE(exists);
  CHECK_THAT(exists.error().message, Contains("exists; not overwritten (--force replaces it)"));

  auto w = io::AtomicFileWriter::create(path, "test", rule);
  REQUIRE(w);
  REQUIRE(w->write(bytes_of("new output")));
  {
    std::ofstream(path) << "sentinel";  // another writer got there first
  }
  auto st = w->commit();
  REQUIRE_FALSE(st);
  CHECK(slurp(path) == "sentinel");
  const std::string kept = path + ".kept." + std::to_string(::getpid());
  CHECK_THAT(st.error().message,
             Contains("appeared while the output was written") && Contains("'" + kept + "'"));
  CHECK(slurp(kept) == "new output");

  // A directory output: the same, through commit_output.
  io::OutputRule d = rule;
  d.kind = io::OutputKind::directory;
  d.marker = ".ours";
  const std::string out = dir.file("outdir"), tmp = io::temp_stem(out) + "0";
  std::filesystem::create_directories(tmp);
  std::ofstream(tmp + "/.ours") << "";
  std::filesystem::create_directories(out);  // appeared (empty: a plain rename would take it)
  bool was_kept = false;
  auto sd = io::commit_output(tmp, out, d, "test", &was_kept);
  REQUIRE_FALSE(sd);
  CHECK(was_kept);
  CHECK(std::filesystem::is_empty(out));
  CHECK(std::filesystem::exists(out + ".kept." + std::to_string(::getpid()) + "/.ours"));
}

TEST_CASE("output rule: a marked directory is replaced only with replace", "[io]") {
  TempDir dir;
  io::OutputRule d;
  d.kind = io::OutputKind::directory;
  d.marker = ".ours";
  d.replace = true;
  const std::string out = dir.file("out");
  std::filesystem::create_directories(out);
  std::ofstream(out + "/.ours") << "";
  std::ofstream(out + "/old") << "old";
  REQUIRE(io::check_output_path(out, d, "test"));
  const std::string tmp = io::temp_stem(out) + "0";
  std::filesystem::create_directories(tmp);
  std::ofstream(tmp + "/.ours") << "";
  std::ofstream(tmp + "/new") << "new";
  REQUIRE(io::commit_output(tmp, out, d, "test"));
  CHECK(slurp(out + "/new") == "new");
  CHECK_FALSE(std::filesystem::exists(out + "/old"));
  CHECK(entries(dir) == 1);  // the old one moved aside is gone too
  d.replace = false;
  auto again = io::check_output_path(out, d, "test");
  REQUIRE_FALSE(again);
  CHECK_THAT(again.error().message, Contains("exists; not overwritten"));
}

TEST_CASE("output rule: temporaries of dead writers are removed, only of our exact pattern",
          "[io]") {
  TempDir dir;
  const std::string path = dir.file("cache.bin");
  const std::string dead = std::to_string(dead_pid());
  const std::string stale = path + ".tmp." + dead + ".123.0";
  const std::vector<std::string> kept = {
      path + ".tmp." + dead + ".123",      // not the file pattern
      path + ".tmp." + dead + ".1.0.x",    // not the file pattern
      path + ".tmp.1.123.0",               // pid 1 is alive
      dir.file("other.bin.tmp." + dead + ".1.0"),  // another target's
  };
  std::ofstream(stale) << "partial";
  for (const std::string& k : kept) std::ofstream(k) << "keep";
  std::filesystem::create_directories(path + ".tmp." + dead + ".7.0");  // not a regular file
  REQUIRE(io::write_file_atomic(path, bytes_of("whole")));
  CHECK_FALSE(std::filesystem::exists(stale));
  for (const std::string& k : kept) CHECK(slurp(k) == "keep");
  CHECK(std::filesystem::is_directory(path + ".tmp." + dead + ".7.0"));
  CHECK(slurp(path) == "whole");

  // Directories: only ones carrying the marker.
  io::OutputRule d;
  d.kind = io::OutputKind::directory;
  d.marker = ".ours";
  const std::string out = dir.file("out");
  for (const std::string sfx : {".0", ".1.old", ".2"}) {
    std::filesystem::create_directories(out + ".tmp." + dead + sfx);
    if (sfx != ".2") std::ofstream(out + ".tmp." + dead + sfx + "/.ours") << "";
  }
  io::remove_stale_temps(out, d);
  CHECK_FALSE(std::filesystem::exists(out + ".tmp." + dead + ".0"));
  CHECK_FALSE(std::filesystem::exists(out + ".tmp." + dead + ".1.old"));
  CHECK(std::filesystem::exists(out + ".tmp." + dead + ".2"));
}

}  // namespace test_io_atomic_file

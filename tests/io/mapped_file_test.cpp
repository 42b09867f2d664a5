// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/io/mapped_file.hpp: mapping, empty files, errors, moves, releasing pages,
// mlock, read_text_file, read_file_bytes.
#include "edgellm/io/mapped_file.hpp"

#include <catch2/catch.hpp>

#include "support/temp_dir.hpp"
#include "support/prelude.hpp"

#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace test_io_mapped_file {

namespace {

}  // namespace

TEST_CASE("MappedFile maps a file's bytes", "[io]") {
  TempDir dir;
  std::string content(10000, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + 3);
  const std::string path = dir.write("data.bin", content);

  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f.has_value());
  CHECK(f->size() == content.size());
  CHECK_FALSE(f->empty());
  CHECK(f->path() == path);
  REQUIRE(f->data() != nullptr);
  CHECK(std::memcmp(f->data(), content.data(), content.size()) == 0);
  CHECK(f->bytes().size() == content.size());
  // mmap returns page-aligned memory, which the safetensors alignment check relies on.
  CHECK(reinterpret_cast<std::uintptr_t>(f->data()) % 4096 == 0);

  CHECK(f->advise_sequential().has_value());
  CHECK(f->advise_random().has_value());
  CHECK(f->advise_willneed().has_value());
  CHECK(f->advise_willneed(5000, 100).has_value());
  CHECK(f->advise_willneed(9999, 1000000).has_value());  // clamped
  CHECK(f->advise_willneed(20000, 10).has_value());      // past the end: nothing to do
}

TEST_CASE("MappedFile handles empty files", "[io]") {
  TempDir dir;
  const std::string path = dir.write("empty.bin", "");
  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f.has_value());
  CHECK(f->size() == 0);
  CHECK(f->empty());
  CHECK(f->data() == nullptr);
  CHECK(f->bytes().empty());
  CHECK(f->lock().has_value());
  CHECK(f->advise_sequential().has_value());
  CHECK(f->advise_willneed().has_value());
}

TEST_CASE("MappedFile errors name the path and the errno text", "[io]") {
  TempDir dir;
  const std::string missing = (dir.path() / "nope.bin").string();
  auto f = edgellm::io::MappedFile::open(missing);
  REQUIRE_FALSE(f.has_value());
  CHECK(f.error().code == edgellm::errc::io_error);
  CHECK_THAT(f.error().message, Contains("[MappedFile::open]"));
  CHECK_THAT(f.error().message, Contains(missing));
  CHECK_THAT(f.error().message, Contains("No such file or directory"));

  auto d = edgellm::io::MappedFile::open(dir.path().string());
  REQUIRE_FALSE(d.has_value());
  CHECK_THAT(d.error().message, Contains(dir.path().string()));
  CHECK_THAT(d.error().message, Contains("is a directory"));

  auto dev = edgellm::io::MappedFile::open("/dev/null");
  REQUIRE_FALSE(dev.has_value());
  CHECK_THAT(dev.error().message, Contains("not a regular file"));
}

TEST_CASE("MappedFile is move-only and releases its mapping", "[io]") {
  static_assert(!std::is_copy_constructible_v<edgellm::io::MappedFile>);
  static_assert(!std::is_copy_assignable_v<edgellm::io::MappedFile>);
  static_assert(std::is_nothrow_move_constructible_v<edgellm::io::MappedFile>);
  static_assert(std::is_nothrow_move_assignable_v<edgellm::io::MappedFile>);

  TempDir dir;
  const std::string a = dir.write("a.bin", "aaaa");
  const std::string b = dir.write("b.bin", "bbbbbb");
  auto fa = edgellm::io::MappedFile::open(a);
  auto fb = edgellm::io::MappedFile::open(b);
  REQUIRE(fa.has_value());
  REQUIRE(fb.has_value());

  edgellm::io::MappedFile m1(std::move(*fa));
  CHECK(fa->data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  CHECK(fa->size() == 0);
  CHECK(m1.size() == 4);
  CHECK(static_cast<char>(m1.data()[0]) == 'a');

  m1 = std::move(*fb);  // releases a.bin's mapping
  CHECK(m1.size() == 6);
  CHECK(m1.path() == b);
  CHECK(static_cast<char>(m1.data()[5]) == 'b');

  edgellm::io::MappedFile empty;
  CHECK(empty.data() == nullptr);
  CHECK(empty.size() == 0);
  edgellm::io::MappedFile& alias = m1;
  m1 = std::move(alias);  // self-move leaves it intact
  CHECK(m1.size() == 6);
}

TEST_CASE("release_mapped_pages drops whole pages of a mapping, which refault intact", "[io]") {
  using edgellm::io::page_size;
  using edgellm::io::release_mapped_pages;
  const std::size_t page = page_size();
  REQUIRE(page >= 4096);
  const std::size_t pages = 1024;
  TempDir dir;
  std::string content(pages * page, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 13 + i / 4099);
  const std::string path = dir.write("pages.bin", content);
  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f.has_value());
  const std::span<const std::byte> all = f->bytes();

  // Resident file-backed pages of this process (statm's third field), after touching them all.
  const auto resident_file_pages = [] {
    std::ifstream statm("/proc/self/statm");
    std::size_t size = 0, resident = 0, shared = 0;
    statm >> size >> resident >> shared;
    return shared;
  };
  std::atomic<unsigned> sink{0};
  unsigned sum = 0;
  for (std::size_t i = 0; i < all.size(); i += page) sum += static_cast<unsigned>(all[i]);
  sink = sum;
  const std::size_t before = resident_file_pages();

  CHECK(release_mapped_pages({}) == 0);
  CHECK(release_mapped_pages(all.subspan(10, page - 20)) == 0);        // inside one page
  CHECK(release_mapped_pages(all.subspan(100, 3 * page)) == 2 * page);  // pages 1 and 2 only
  CHECK(release_mapped_pages(all) == all.size());                       // page-aligned mapping
#if defined(__linux__)
  const std::size_t after = resident_file_pages();
  INFO("resident file pages before " << before << ", after " << after);
  CHECK(after + pages * 9 / 10 <= before);
#else
  (void)before;
#endif
  CHECK(std::memcmp(f->data(), content.data(), content.size()) == 0);  // read again from the file
}

TEST_CASE("release_mapped_window drops the 64 KiB windows around a read, within its range",
          "[io]") {
  using edgellm::io::kFaultAroundBytes;
  using edgellm::io::page_size;
  using edgellm::io::release_mapped_window;
  const std::size_t page = page_size();
  REQUIRE(kFaultAroundBytes % page == 0);
  TempDir dir;
  const std::string path = dir.write("window.bin", std::string(8 * kFaultAroundBytes, 'w'));
  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f.has_value());
  const std::span<const std::byte> all = f->bytes();  // page-aligned
  const std::size_t W = kFaultAroundBytes;
  // Windows are aligned in the address space: `base` is the first window start in the mapping.
  const auto addr = reinterpret_cast<std::uintptr_t>(all.data());
  const std::size_t base = (W - addr % W) % W;
  CHECK(release_mapped_window(all, {}) == 0);
  CHECK(release_mapped_window({}, all.subspan(0, 10)) == 0);
  CHECK(release_mapped_window(all, all.subspan(base + W + 100, 100)) == W);        // one window
  CHECK(release_mapped_window(all, all.subspan(base + 2 * W - 10, 20)) == 2 * W);  // two
  // Clipped to `within`: the page it starts inside is kept (it may hold other data), and at the
  // end of the mapping only what is inside it.
  const auto within = all.subspan(base + 100, 3 * W);
  CHECK(release_mapped_window(within, within.subspan(0, 10)) == W - page);
  CHECK(release_mapped_window(all, all.last(10)) == (addr + all.size() - 1) % W + 1);
  CHECK(std::memcmp(f->data(), std::string(all.size(), 'w').data(), all.size()) == 0);
}

TEST_CASE("MappedFile::lock reports RLIMIT_MEMLOCK when it is too small", "[io]") {
  TempDir dir;
  const std::string path = dir.write("lock.bin", std::string(1 << 20, 'x'));
  auto f = edgellm::io::MappedFile::open(path);
  REQUIRE(f.has_value());

  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &saved) == 0);
  struct rlimit tiny = saved;
  tiny.rlim_cur = 0;  // lowering the soft limit is always allowed, and it can be raised back
  REQUIRE(::setrlimit(RLIMIT_MEMLOCK, &tiny) == 0);
  const auto st = f->lock();
  REQUIRE(::setrlimit(RLIMIT_MEMLOCK, &saved) == 0);

  if (st.has_value()) {
    // Privileged (CAP_IPC_LOCK) processes ignore the limit.
    WARN("mlock succeeded despite RLIMIT_MEMLOCK = 0 (CAP_IPC_LOCK?)");
    CHECK(f->locked());
    CHECK(f->unlock().has_value());
    CHECK_FALSE(f->locked());
    return;
  }
  CHECK(st.error().code == edgellm::errc::io_error);
  CHECK_THAT(st.error().message, Contains("[MappedFile::lock]"));
  CHECK_THAT(st.error().message, Contains(path));
  CHECK_THAT(st.error().message, Contains("RLIMIT_MEMLOCK soft limit is 0 bytes"));
  CHECK_FALSE(f->locked());
  CHECK(f->unlock().has_value());  // no-op
}

TEST_CASE("read_text_file reads whole files and reports errors", "[io]") {
  TempDir dir;
  std::string content;
  for (int i = 0; i < 100000; ++i) content += static_cast<char>('a' + i % 26);
  content += std::string("\0tail\r\n", 7);
  const std::string path = dir.write("t.txt", content);

  auto t = edgellm::io::read_text_file(path);
  REQUIRE(t.has_value());
  CHECK(*t == content);

  auto empty = edgellm::io::read_text_file(dir.write("e.txt", ""));
  REQUIRE(empty.has_value());
  CHECK(empty->empty());

  const std::string missing = (dir.path() / "missing.json").string();
  auto m = edgellm::io::read_text_file(missing);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == edgellm::errc::io_error);
  CHECK_THAT(m.error().message, Contains("[read_text_file]"));
  CHECK_THAT(m.error().message, Contains(missing));
  CHECK_THAT(m.error().message, Contains("No such file or directory"));

  auto d = edgellm::io::read_text_file(dir.path().string());
  REQUIRE_FALSE(d.has_value());
  CHECK_THAT(d.error().message, Contains("is a directory"));

  auto big = edgellm::io::read_text_file(path, 1000);
  REQUIRE_FALSE(big.has_value());
  CHECK_THAT(big.error().message, Contains("larger than the 1000-byte limit"));
  CHECK_THAT(big.error().message, Contains(path));
}

TEST_CASE("read_file_bytes reads whole binary files and reports errors", "[io]") {
  TempDir dir;
  std::string content(200000, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + 3);
  const std::string path = dir.write("b.bin", content);
  auto b = edgellm::io::read_file_bytes(path);
  REQUIRE(b.has_value());
  REQUIRE(b->size() == content.size());
  CHECK(std::memcmp(b->data(), content.data(), content.size()) == 0);

  auto empty = edgellm::io::read_file_bytes(dir.write("e.bin", ""));
  REQUIRE(empty.has_value());
  CHECK(empty->empty());

  const std::string missing = (dir.path() / "missing.bin").string();
  auto m = edgellm::io::read_file_bytes(missing);
  REQUIRE_FALSE(m.has_value());
  CHECK(m.error().code == edgellm::errc::io_error);
  CHECK_THAT(m.error().message, Contains("[read_file_bytes] '" + missing + "'"));
  CHECK_THAT(m.error().message, Contains("No such file or directory"));

  auto big = edgellm::io::read_file_bytes(path, 1000);
  REQUIRE_FALSE(big.has_value());
  CHECK_THAT(big.error().message, Contains("larger than the 1000-byte limit"));
}

TEST_CASE("every reader refuses devices, FIFOs and directories at once", "[io]") {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open would never return
  struct Case {
    std::string path, kind;
  };
  const Case cases[] = {{"/dev/zero", "is a character device, not a regular file"},
                        {"/dev/full", "is a character device, not a regular file"},
                        {fifo, "is a FIFO (named pipe), not a regular file"},
                        {dir.path().string(), "is a directory, not a regular file"}};
  for (const Case& c : cases) {
    if (!std::filesystem::exists(c.path)) continue;  // a container without /dev/full
    INFO(c.path);
    const auto refused = [&](const edgellm::error& e) {
      CHECK(e.code == edgellm::errc::io_error);
      CHECK_THAT(e.message, Contains("'" + c.path + "': " + c.kind));
    };
    auto m = edgellm::io::MappedFile::open(c.path);
    REQUIRE_FALSE(m);
    refused(m.error());
    auto t = edgellm::io::read_text_file(c.path);
    REQUIRE_FALSE(t);
    refused(t.error());
    auto b = edgellm::io::read_file_bytes(c.path);
    REQUIRE_FALSE(b);
    refused(b.error());
    auto h = edgellm::io::read_file_head(c.path, 8, "head");
    REQUIRE_FALSE(h);
    refused(h.error());
  }
}

TEST_CASE("a file over its kind's size limit is refused before it is read", "[io]") {
  TempDir dir;
  const std::string path = dir.write("big.json", std::string(5000, ' '));
  auto m = edgellm::io::MappedFile::open(path, 4999);
  REQUIRE_FALSE(m);
  CHECK_THAT(m.error().message, Contains("'" + path + "': file of 5000 bytes is larger than the "
                                         "4999-byte limit"));
  REQUIRE(edgellm::io::MappedFile::open(path, 5000));
  // A sparse file far beyond the limit: refused from its size alone, not read.
  const std::string sparse = dir.file("sparse.json");
  { std::ofstream(sparse).put(' '); }
  std::filesystem::resize_file(sparse, std::uintmax_t{1} << 40);
  auto t = edgellm::io::read_text_file(sparse, edgellm::io::kMaxConfigJsonBytes);
  REQUIRE_FALSE(t);
  CHECK_THAT(t.error().message, Contains("larger than the 16777216-byte limit"));
}

TEST_CASE("read_file_head reads the first bytes, or says nothing is there", "[io]") {
  TempDir dir;
  const std::string path = dir.write("f.bin", "0123456789");
  auto h = edgellm::io::read_file_head(path, 4, "head");
  REQUIRE(h);
  REQUIRE(*h);
  CHECK(std::string(reinterpret_cast<const char*>((*h)->data()), (*h)->size()) == "0123");
  auto all = edgellm::io::read_file_head(path, 100, "head");
  REQUIRE(all);
  CHECK((*all)->size() == 10);
  auto none = edgellm::io::read_file_head(dir.file("missing"), 4, "head");
  REQUIRE(none);
  CHECK_FALSE(*none);
}

}  // namespace test_io_mapped_file

// SPDX-License-Identifier: Apache-2.0
// Read-only memory-mapped files (POSIX mmap), the memory advice for mappings (madvise, mlock),
// and whole-file reads (text and binary), reporting errors as result<T>.
#pragma once

#include "edgellm/result.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#define EDGELLM_IO_POSIX 1
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#else
#define EDGELLM_IO_POSIX 0
#include <filesystem>
#endif

namespace edgellm::io {

namespace detail {

/// "No such file or directory (errno 2)": the text of an errno value, thread-safe.
inline std::string errno_text(int err) {
  std::string s = std::generic_category().message(err);
  s += " (errno ";
  s += std::to_string(err);
  s += ')';
  return s;
}

/// "'path': what: errno text", the common shape of every I/O error message here.
inline error io_error(std::string_view where, const std::string& path, std::string_view what,
                      int err) {
  std::string m;
  m += '\'';
  m += path;
  m += "': ";
  m += what;
  m += ": ";
  m += errno_text(err);
  return make_error(errc::io_error, where, m);
}

}  // namespace detail

/// The virtual memory page size in bytes (4096 where it cannot be asked).
inline std::size_t page_size() noexcept {
#if EDGELLM_IO_POSIX
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<std::size_t>(p) : 4096;
#else
  return 4096;
#endif
}

/// Drops this process's resident pages that lie entirely inside `bytes`, a range of a read-only
/// file mapping (MappedFile::bytes()), and returns how many bytes that covered. For data that
/// was read once and copied or converted into owned memory: resident memory then stays near the
/// owned copy instead of growing by the file. Pages shared with neighbouring data are kept; a
/// later access reads the file again (the page cache usually still holds it).
inline std::size_t release_mapped_pages(std::span<const std::byte> bytes) noexcept {
#if EDGELLM_IO_POSIX && defined(MADV_DONTNEED)
  if (bytes.empty()) return 0;
  const std::size_t page = page_size();
  const auto a = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t begin = (a + page - 1) / page * page;
  const std::uintptr_t end = (a + bytes.size()) / page * page;
  if (end <= begin) return 0;
  // Clean pages of a MAP_PRIVATE read-only mapping: dropping them is always safe. A failure
  // only means the memory stays resident.
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return static_cast<std::size_t>(end - begin);
#else
  (void)bytes;
  return 0;
#endif
}

/// How much of a file mapping one page fault may map: Linux maps the pages around a faulting
/// address that the page cache holds, up to fault_around_bytes (64 KiB unless retuned), aligned.
inline constexpr std::size_t kFaultAroundBytes = std::size_t{64} << 10;

/// After a one-off read of `bytes`, part of `within` (a range of a read-only file mapping, e.g.
/// an embedding table), drops the pages of `within` in the fault-around windows around `bytes`:
/// what that read may have made resident. Returns the bytes released (release_mapped_pages).
inline std::size_t release_mapped_window(std::span<const std::byte> within,
                                         std::span<const std::byte> bytes) noexcept {
  if (bytes.empty() || within.empty()) return 0;
  const auto lo = reinterpret_cast<std::uintptr_t>(within.data());
  const std::uintptr_t hi = lo + within.size();
  const auto a = reinterpret_cast<std::uintptr_t>(bytes.data());
  std::uintptr_t begin = a / kFaultAroundBytes * kFaultAroundBytes;
  std::uintptr_t end = (a + bytes.size() + kFaultAroundBytes - 1) / kFaultAroundBytes *
                       kFaultAroundBytes;
  begin = std::max(begin, lo);
  end = std::min(end, hi);
  if (end <= begin) return 0;
  return release_mapped_pages({within.data() + (begin - lo), static_cast<std::size_t>(end - begin)});
}

/// A whole file mapped read-only into memory (PROT_READ, MAP_PRIVATE).
///
/// Move-only; the mapping is released by the destructor. The file descriptor is closed right after
/// mapping, so an open MappedFile holds no descriptor. An empty file is valid: `data()` is nullptr
/// and `size()` is 0. Thread safety: the bytes are immutable and may be read from any thread; the
/// member functions that change state (`lock`, `unlock`, move assignment) need external locking.
///
/// Caveat of every mmap reader: if another process truncates the file while it is mapped, reading
/// the lost pages raises SIGBUS. Model files are expected to be left alone while loaded.
class MappedFile {
 public:
  /// An empty, unmapped object (what a moved-from MappedFile becomes).
  MappedFile() noexcept = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept { swap(other); }
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      MappedFile tmp(std::move(other));
      swap(tmp);
    }
    return *this;
  }
  ~MappedFile() { release(); }

  /// Opens `path` read-only and maps all of it. Fails with errc::io_error (the message names the
  /// path and the errno text) when the file cannot be opened, is not a regular file (a directory,
  /// device, FIFO or socket: refused before anything is read), is larger than `max_bytes`, or
  /// cannot be mapped; with errc::unsupported on platforms without POSIX mmap.
  static result<MappedFile> open(const std::string& path,
                                 std::size_t max_bytes = std::numeric_limits<std::size_t>::max());

  /// First byte of the mapping; nullptr when the file is empty or nothing is mapped.
  const std::byte* data() const noexcept { return data_; }
  /// Size of the file in bytes.
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  /// All bytes of the file.
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// The path given to open().
  const std::string& path() const noexcept { return path_; }
  /// Whether lock() succeeded and unlock() has not been called since.
  bool locked() const noexcept { return locked_; }

  /// Pins the whole mapping in RAM (mlock), faulting every page in now. Fails with errc::io_error
  /// and a message stating the RLIMIT_MEMLOCK soft limit when the process may not lock that much
  /// (raise it with `ulimit -l`, a systemd LimitMEMLOCK= setting, or CAP_IPC_LOCK).
  status lock();
  /// Undoes lock(). A no-op when not locked.
  status unlock();

  /// Hints that the file will be read front to back (posix_madvise SEQUENTIAL).
  status advise_sequential() { return advise(kSequential, 0, size_); }
  /// Hints that the file will be read in random order (posix_madvise RANDOM).
  status advise_random() { return advise(kRandom, 0, size_); }
  /// Asks the kernel to start reading bytes [offset, offset + length) in the background
  /// (posix_madvise WILLNEED); the range is clamped to the file. Defaults to the whole file.
  status advise_willneed(std::size_t offset = 0,
                         std::size_t length = std::numeric_limits<std::size_t>::max()) {
    return advise(kWillNeed, offset, length);
  }

 private:
  enum Advice { kSequential, kRandom, kWillNeed };

  void swap(MappedFile& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(path_, other.path_);
    std::swap(locked_, other.locked_);
  }
  void release() noexcept;
  status advise(Advice advice, std::size_t offset, std::size_t length);

  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
  bool locked_ = false;
};

#if EDGELLM_IO_POSIX

namespace detail {

/// "a directory", "a character device", ...: what a non-regular file is, for messages.
inline const char* file_kind(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// open(O_RDONLY | O_CLOEXEC | O_NONBLOCK), retried on EINTR, then fstat into `st`; the
/// descriptor on success (the caller closes it), an io_error naming the path and errno text
/// otherwise. O_NONBLOCK keeps open() from waiting for a writer on a FIFO; it changes nothing
/// for regular files, the only kind read afterwards (open_regular_file).
inline result<int> open_read_only(const std::string& path, std::string_view where,
                                  struct stat& st) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error(where, path, "cannot open for reading", errno);
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(where, path, "cannot stat", err);
  }
  return fd;
}

/// A descriptor open for reading on a regular file, and the file's size in bytes then.
struct RegularFile {
  int fd = -1;
  std::size_t size = 0;
};

/// The one gate every reader of the library passes before reading a byte: opens `path`
/// read-only and checks that it is a regular file (not a directory, device, FIFO or socket,
/// which could block or never end) of at most `max_bytes` bytes. Errors (errc::io_error) name
/// the path, what it is, or its size and the limit.
inline result<RegularFile> open_regular_file(const std::string& path, std::string_view where,
                                             std::size_t max_bytes) {
  struct stat st {};
  auto opened = open_read_only(path, where, st);
  if (!opened) return opened.error();
  const int fd = *opened;
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const std::string kind = file_kind(st.st_mode);
    return make_error(errc::io_error, where,
                      "'" + path + "': is " + kind + ", not a regular file");
  }
  if (st.st_size < 0 || static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return make_error(errc::io_error, where,
                      "'" + path + "': file of " + std::to_string(st.st_size) +
                          " bytes is larger than the " + std::to_string(max_bytes) +
                          "-byte limit for this kind of file");
  }
  return RegularFile{fd, static_cast<std::size_t>(st.st_size)};
}

}  // namespace detail

inline result<MappedFile> MappedFile::open(const std::string& path, std::size_t max_bytes) {
  constexpr std::string_view where = "MappedFile::open";
  auto opened = detail::open_regular_file(path, where, max_bytes);
  if (!opened) return opened.error();
  const int fd = opened->fd;

  MappedFile f;
  f.path_ = path;
  f.size_ = opened->size;
  if (f.size_ == 0) {  // mmap of length 0 is EINVAL; an empty mapping is represented by nullptr
    ::close(fd);
    return f;
  }
  void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (p == MAP_FAILED) {
    const std::size_t size = f.size_;
    f.size_ = 0;
    return detail::io_error(where, path, "cannot mmap " + std::to_string(size) + " bytes", err);
  }
  f.data_ = static_cast<const std::byte*>(p);
  return f;
}

inline void MappedFile::release() noexcept {
  if (data_ != nullptr) {
    // munmap also drops any mlock on the range.
    ::munmap(const_cast<std::byte*>(data_), size_);
  }
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

inline status MappedFile::lock() {
  constexpr std::string_view where = "MappedFile::lock";
  if (data_ == nullptr || locked_) return {};
  if (::mlock(data_, size_) == 0) {
    locked_ = true;
    return {};
  }
  const int err = errno;
  std::string what = "cannot mlock " + std::to_string(size_) + " bytes";
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
      what += " (RLIMIT_MEMLOCK soft limit is ";
      what += rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                           : std::to_string(rl.rlim_cur) + " bytes";
      what += "; raise it with `ulimit -l`, LimitMEMLOCK= or CAP_IPC_LOCK)";
    }
  }
  return detail::io_error(where, path_, what, err);
}

inline status MappedFile::unlock() {
  if (!locked_) return {};
  if (::munlock(data_, size_) != 0) {
    return detail::io_error("MappedFile::unlock", path_, "cannot munlock", errno);
  }
  locked_ = false;
  return {};
}

inline status MappedFile::advise(Advice advice, std::size_t offset, std::size_t length) {
  if (data_ == nullptr || offset >= size_ || length == 0) return {};
  length = std::min(length, size_ - offset);
  // posix_madvise wants a page-aligned start; widen the range down to the page boundary.
  const long page_l = ::sysconf(_SC_PAGESIZE);
  const std::size_t page = page_l > 0 ? static_cast<std::size_t>(page_l) : 4096;
  const std::size_t start = offset - offset % page;
  length += offset - start;
  int native = POSIX_MADV_NORMAL;
  switch (advice) {
    case kSequential:
      native = POSIX_MADV_SEQUENTIAL;
      break;
    case kRandom:
      native = POSIX_MADV_RANDOM;
      break;
    case kWillNeed:
      native = POSIX_MADV_WILLNEED;
      break;
  }
  // posix_madvise returns the error number instead of setting errno.
  const int err = ::posix_madvise(const_cast<std::byte*>(data_) + start, length, native);
  if (err != 0) return detail::io_error("MappedFile::advise", path_, "posix_madvise failed", err);
  return {};
}

namespace detail {
/// Reads the whole file `path` into a Container of 1-byte elements (std::string or
/// std::vector<std::byte>); read_text_file and read_file_bytes state the contract.
template <class Container>
result<Container> read_whole_file(const std::string& path, std::size_t max_bytes,
                                  std::string_view where) {
  auto opened = open_regular_file(path, where, max_bytes);
  if (!opened) return opened.error();
  const int fd = opened->fd;
  Container out;
  out.reserve(opened->size);
  using T = typename Container::value_type;
  static_assert(sizeof(T) == 1);
  T buf[1 << 16];
  for (;;) {
    const ::ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return io_error(where, path, "read failed", err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
      ::close(fd);
      return make_error(errc::io_error, where,
                        "'" + path + "': file grew past the " + std::to_string(max_bytes) +
                            "-byte limit while being read");
    }
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}
}  // namespace detail

#else  // !EDGELLM_IO_POSIX

inline result<MappedFile> MappedFile::open(const std::string& path, std::size_t) {
  return make_error(errc::unsupported, "MappedFile::open",
                    "'" + path + "': memory mapping is only implemented for POSIX systems");
}
inline void MappedFile::release() noexcept {
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}
inline status MappedFile::lock() {
  return make_error(errc::unsupported, "MappedFile::lock", "not implemented on this platform");
}
inline status MappedFile::unlock() { return {}; }
inline status MappedFile::advise(Advice, std::size_t, std::size_t) { return {}; }

namespace detail {
template <class Container>
result<Container> read_whole_file(const std::string& path, std::size_t max_bytes,
                                  std::string_view where) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(errc::io_error, where, "'" + path + "': is not a regular file");
  }
  if (std::filesystem::file_size(path, ec) > max_bytes && !ec) {
    return make_error(errc::io_error, where,
                      "'" + path + "': file is larger than the " + std::to_string(max_bytes) +
                          "-byte limit for this kind of file");
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return io_error(where, path, "cannot open for reading", errno);
  Container out;
  typename Container::value_type buf[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    if (out.size() + n > max_bytes) {
      std::fclose(f);
      return make_error(
          errc::io_error, where,
          "'" + path + "': file is larger than the " + std::to_string(max_bytes) + "-byte limit");
    }
    out.insert(out.end(), buf, buf + n);
    if (n < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return io_error(where, path, "read failed", err);
  return out;
}
}  // namespace detail

#endif  // EDGELLM_IO_POSIX

/// The first `n` bytes of `path` (fewer when the file is shorter), read through the same gate
/// as every reader (a regular file, checked before reading); nullopt when nothing exists at
/// `path`. For writers that check what they are about to replace (io/atomic_file.hpp).
inline result<std::optional<std::vector<std::byte>>> read_file_head(const std::string& path,
                                                                    std::size_t n,
                                                                    std::string_view where) {
#if EDGELLM_IO_POSIX
  auto opened = detail::open_regular_file(path, where, std::numeric_limits<std::size_t>::max());
  if (!opened) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
      return std::optional<std::vector<std::byte>>();
    }
    return opened.error();
  }
  std::vector<std::byte> head(std::min(n, opened->size));
  std::size_t got = 0;
  while (got < head.size()) {
    const ::ssize_t r = ::pread(opened->fd, head.data() + got, head.size() - got,
                                static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = r < 0 ? errno : 0;
      ::close(opened->fd);
      if (err == 0) break;
      return detail::io_error(where, path, "read failed", err);
    }
    got += static_cast<std::size_t>(r);
  }
  ::close(opened->fd);
  head.resize(got);
  return std::optional<std::vector<std::byte>>(std::move(head));
#else
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<std::vector<std::byte>>();
  auto all = detail::read_whole_file<std::vector<std::byte>>(path, std::size_t{1} << 40, where);
  if (!all) return all.error();
  if (all->size() > n) all->resize(n);
  return std::optional<std::vector<std::byte>>(std::move(*all));
#endif
}

/// Size limits of the files read whole, far above any real one: a file beyond its limit is
/// refused before it is read.
inline constexpr std::size_t kMaxConfigJsonBytes = std::size_t{16} << 20;     ///< config.json & co.
inline constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{512} << 20;  ///< tokenizer.json
inline constexpr std::size_t kMaxIndexJsonBytes = std::size_t{256} << 20;  ///< safetensors index

/// Reads a whole file into a string (bytes as they are; no newline or encoding conversion).
/// Fails with errc::io_error naming the path and the errno text, when the path is not a regular
/// file (refused at once: a FIFO or /dev/zero would block or never end), or when the file is
/// larger than `max_bytes` (default 1 GiB).
inline result<std::string> read_text_file(const std::string& path,
                                          std::size_t max_bytes = std::size_t{1} << 30) {
  return detail::read_whole_file<std::string>(path, max_bytes, "read_text_file");
}

/// Reads a whole binary file (a prefix blob). Errors as read_text_file's; the default limit is
/// 1 TiB (files are read whole, so the caller's memory is the real limit).
inline result<std::vector<std::byte>> read_file_bytes(
    const std::string& path, std::size_t max_bytes = std::size_t{1} << 40) {
  return detail::read_whole_file<std::vector<std::byte>>(path, max_bytes, "read_file_bytes");
}

}  // namespace edgellm::io

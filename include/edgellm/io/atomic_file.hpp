// SPDX-License-Identifier: Apache-2.0
// The one atomic file writer: bytes go to a temporary file beside the target, which is flushed
// to disk and renamed over the target, so readers see the old file or the whole new one, never
// a partial one, even when the process dies mid-write or two writers race.
#pragma once

#include "edgellm/io/mapped_file.hpp"
#include "edgellm/io/output_path.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#if EDGELLM_IO_POSIX
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace edgellm::io {

/// Writes one file atomically: create() opens a temporary file beside `path`, write() appends
/// to it, commit() flushes it to disk (fsync) and renames it over `path`. Destroying a writer
/// that was not committed removes the temporary file, so a failed or abandoned write leaves
/// `path` as it was.
///
/// The temporary name is `path`.tmp.<pid>.<thread>.<n> (io::temp_stem), created exclusively
/// (O_EXCL; n counts up past names in use), so writers in several processes or threads never
/// share one; when they race on the same `path` with replace, each commit replaces the file
/// whole and the last rename wins. `path` follows io::OutputRule (output_path.hpp): a device,
/// FIFO, directory or input is refused at create(), temporaries of dead writers beside it are
/// removed then, and commit() re-checks: without rule.replace nothing that appeared meanwhile
/// is replaced (the finished file is kept, and the error says where). Errors (errc::io_error)
/// name the file and the OS reason (errno text), prefixed by the caller's `where`. Move-only;
/// one thread at a time per writer.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  AtomicFileWriter(AtomicFileWriter&& o) noexcept { swap(o); }
  AtomicFileWriter& operator=(AtomicFileWriter&& o) noexcept {
    if (this != &o) {
      AtomicFileWriter tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  ~AtomicFileWriter() { abandon(); }

  /// Checks `path` (io::check_output_path; rule.kind is taken as file) and creates the
  /// temporary file for it (mode 0666 less the umask, as fopen would).
  static result<AtomicFileWriter> create(const std::string& path,
                                         std::string_view where = "AtomicFileWriter",
                                         const OutputRule& rule = {});

  /// Appends `bytes` (retrying short writes and EINTR).
  status write(std::span<const std::byte> bytes);
  /// fsync, close, rename to the target (io::commit_output). The writer is then empty; on
  /// error the target is unchanged and the temporary file removed, or kept under the name
  /// the message gives when the target appeared meanwhile.
  status commit();

  const std::string& path() const noexcept { return path_; }
  /// The temporary file's name (empty once committed or abandoned).
  const std::string& temp_path() const noexcept { return tmp_; }

 private:
  void swap(AtomicFileWriter& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(path_, o.path_);
    std::swap(tmp_, o.tmp_);
    std::swap(where_, o.where_);
    std::swap(replace_, o.replace_);
  }
  void abandon() noexcept;
  error fail(std::string_view what, int err);

  int fd_ = -1;
  std::string path_, tmp_;
  std::string where_;  // the caller's name for error messages
  bool replace_ = true;  // OutputRule::replace
};

/// Writes `bytes` as the whole content of `path` atomically (AtomicFileWriter).
inline status write_file_atomic(const std::string& path, std::span<const std::byte> bytes,
                                std::string_view where = "write_file_atomic",
                                const OutputRule& rule = {}) {
  auto w = AtomicFileWriter::create(path, where, rule);
  if (!w) return w.error();
  if (auto st = w->write(bytes); !st) return st;
  return w->commit();
}

/// Whether a writer may replace `path` with a file of the kind whose files start with `magic`
/// (`kind` names it in messages, e.g. "an edgellm prompt cache"): yes when nothing is there, or
/// an empty regular file, or a regular file that starts with `magic` (one of ours). Anything
/// else is refused with errc::io_error naming the path and what is there: a directory, device
/// or FIFO (never written through), or a file of other content (never replaced unasked).
inline status check_replaceable(const std::string& path, std::span<const std::byte> magic,
                                std::string_view kind, std::string_view where) {
  auto head = read_file_head(path, magic.size(), where);
  if (!head) {
    error e = head.error();
    e.message += "; not written (choose another path)";
    return e;
  }
  if (!*head || (*head)->empty()) return {};
  if ((*head)->size() == magic.size() &&
      std::equal(magic.begin(), magic.end(), (*head)->begin())) {
    return {};
  }
  return make_error(errc::io_error, where,
                    "'" + path + "': exists and is not " + std::string(kind) +
                        "; not overwritten (delete it or choose another path)");
}

#if EDGELLM_IO_POSIX

inline result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path,
                                                         std::string_view where,
                                                         const OutputRule& rule) {
  OutputRule r = rule;
  r.kind = OutputKind::file;
  if (auto st = check_output_path(path, r, where); !st) return st.error();
  remove_stale_temps(path, r);
  AtomicFileWriter w;
  w.path_ = path;
  w.where_ = where;
  w.replace_ = r.replace;
  const std::string stem =
      temp_stem(path) +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000) + ".";
  for (unsigned n = 0;; ++n) {
    std::string tmp = stem + std::to_string(n);
    int fd = -1;
    do {
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      w.fd_ = fd;
      w.tmp_ = std::move(tmp);
      return w;
    }
    const int err = errno;  // before anything else can change it
    if (err != EEXIST || n == 1000) {
      return detail::io_error(where, path, "cannot create the temporary file '" + tmp + "'", err);
    }
  }
}

inline status AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) return make_error(errc::io_error, where_, "'" + path_ + "': writer is not open");
  while (!bytes.empty()) {
    const ::ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return fail("write failed", err);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

inline status AtomicFileWriter::commit() {
  if (fd_ < 0) return make_error(errc::io_error, where_, "'" + path_ + "': writer is not open");
  int rc = 0;
  do {
    rc = ::fsync(fd_);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return fail("fsync failed", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) return fail("close failed", errno);
  OutputRule rule;
  rule.replace = replace_;
  bool kept = false;
  if (auto st = commit_output(tmp_, path_, rule, where_, &kept); !st) {
    if (kept) tmp_.clear();  // the finished file stays where the message says
    abandon();
    return st;
  }
  tmp_.clear();
  return {};
}

inline error AtomicFileWriter::fail(std::string_view what, int err) {
  error e = detail::io_error(where_, path_, what, err);
  abandon();
  return e;
}

inline void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

#else  // !EDGELLM_IO_POSIX

inline result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path,
                                                         std::string_view where,
                                                         const OutputRule&) {
  return make_error(errc::unsupported, where,
                    "'" + path + "': atomic file writes are only implemented for POSIX systems");
}
inline status AtomicFileWriter::write(std::span<const std::byte>) {
  return make_error(errc::unsupported, where_, "not implemented on this platform");
}
inline status AtomicFileWriter::commit() {
  return make_error(errc::unsupported, where_, "not implemented on this platform");
}
inline error AtomicFileWriter::fail(std::string_view what, int err) {
  return detail::io_error(where_, path_, what, err);
}
inline void AtomicFileWriter::abandon() noexcept {}

#endif  // EDGELLM_IO_POSIX

}  // namespace edgellm::io

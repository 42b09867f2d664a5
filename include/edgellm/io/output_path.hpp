// SPDX-License-Identifier: Apache-2.0
// The one rule for every path edgellm writes an output to (a file through io::AtomicFileWriter,
// a directory such as edgellm-quantize's): what may stand there, when it may be replaced, the
// temporary names beside it, and the final rename that never replaces what it was not told to.
#pragma once

#include "edgellm/io/mapped_file.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#if EDGELLM_IO_POSIX
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#endif

namespace edgellm::io {

/// What an output is: one file, or a directory that carries a marker file naming its writer.
enum class OutputKind { file, directory };

/// How a writer treats its output path (check_output_path, commit_output):
/// - refused always, replace or not: the root directory, the current directory, the home
///   directory ($HOME) or any ancestor of these; an input or an ancestor of an input (symlinks
///   resolved; the same st_dev/st_ino counts as the same); anything of another kind than
///   `kind` (a device, FIFO, socket, dangling symlink; a directory for a file output; for a
///   directory output, a directory without `marker`): refusals never suggest `replace_hint`;
/// - an existing output of the right kind (a regular file; a directory carrying `marker`) is
///   replaced only with `replace`, else refused naming `replace_hint`;
/// - the final rename re-checks: without `replace` it never replaces anything that appeared
///   meanwhile (RENAME_NOREPLACE), and the finished output is kept under another name.
struct OutputRule {
  OutputKind kind = OutputKind::file;
  bool replace = true;
  /// Directory outputs: the file every output of this writer carries (e.g. ".edgellm-quantize").
  std::string_view marker;
  /// How the caller's user asks for a replacement ("--force"), named where it would help.
  std::string_view replace_hint;
  /// Paths the run reads: the output may be none of them, nor an ancestor of one.
  std::span<const std::string> inputs;
};

namespace detail {

/// `p` made absolute, symlinks resolved as far as it exists, without a trailing separator.
inline std::filesystem::path resolved(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p, ec).lexically_normal();
  if (!r.has_filename() && r != r.root_path()) r = r.parent_path();
  return r;
}

/// Whether `anc` is `p` or one of its ancestors (both resolved).
inline bool is_within(const std::filesystem::path& anc, const std::filesystem::path& p) {
  auto a = anc.begin();
  for (auto b = p.begin(); a != anc.end() && b != p.end(); ++a, ++b)
    if (*a != *b) return false;
  return a == anc.end();
}

#if EDGELLM_IO_POSIX
inline bool same_inode(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

/// Whether directory `dir` carries the regular file `marker`.
inline bool has_marker(const std::string& dir, std::string_view marker) {
  struct stat st {};
  const std::string m = dir + "/" + std::string(marker);
  return !marker.empty() && ::lstat(m.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// "" when what stands at `path` (stat `st`, symlinks followed) is of the rule's kind, else
/// what it is instead.
inline std::string wrong_kind(const std::string& path, const struct stat& st,
                              const OutputRule& rule) {
  if (rule.kind == OutputKind::file)
    return S_ISREG(st.st_mode) ? "" : "is " + std::string(file_kind(st.st_mode)) +
                                          ", not a regular file";
  if (!S_ISDIR(st.st_mode))
    return "is " + std::string(S_ISREG(st.st_mode) ? "a regular file" : file_kind(st.st_mode)) +
           ", not a directory";
  if (!has_marker(path, rule.marker))
    return "is a directory without the " + std::string(rule.marker) +
           " file its writer leaves in every output (not one of its outputs)";
  return "";
}

/// rename(from, to) that fails with EEXIST when `to` exists: renameat2(RENAME_NOREPLACE) where
/// the kernel and file system have it; else link()+unlink() for a file (atomic too), or a
/// check just before a plain rename for a directory (a narrow window remains there).
inline int rename_noreplace(const char* from, const char* to, bool is_dir) {
#if defined(__linux__) && defined(SYS_renameat2)
  if (::syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1u /*RENAME_NOREPLACE*/) == 0)
    return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
  if (!is_dir) {
    if (::link(from, to) == 0) {
      ::unlink(from);
      return 0;
    }
    if (errno == EEXIST) return -1;
    // A file system without hard links falls through to the checked rename.
  }
  struct stat st {};
  if (::lstat(to, &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  return ::rename(from, to);
}
#endif

}  // namespace detail

/// The start of the temporary names of this process beside `path`: "<path>.tmp.<pid>."; the
/// rest is the writer's (AtomicFileWriter: "<thread>.<n>", directories: "<n>", and "<n>.old"
/// for a replaced directory moved aside).
inline std::string temp_stem(const std::string& path) {
#if EDGELLM_IO_POSIX
  return path + ".tmp." + std::to_string(static_cast<long>(::getpid())) + ".";
#else
  return path + ".tmp.0.";
#endif
}

/// Checks `path` against `rule` (see OutputRule) before anything is written. Errors
/// (errc::io_error) name the path and what is there; `where` prefixes them.
inline status check_output_path(const std::string& path, const OutputRule& rule,
                                std::string_view where) {
  namespace fs = std::filesystem;
  if (path.empty()) return make_error(errc::invalid_argument, where, "empty output path");
  const auto refuse = [&](const std::string& why) {
    return make_error(errc::io_error, where,
                      "'" + path + "': " + why + "; not written (choose another path)");
  };
  const fs::path out = detail::resolved(path);
  std::error_code ec;
  if (out == out.root_path()) return refuse("is the root directory");
  const fs::path cwd = detail::resolved(fs::current_path(ec));
  if (!ec && detail::is_within(out, cwd))
    return refuse(out == cwd ? "is the current directory" : "contains the current directory");
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    const fs::path h = detail::resolved(home);
    if (detail::is_within(out, h))
      return refuse(out == h ? "is the home directory" : "contains the home directory");
  }
  for (const std::string& in : rule.inputs) {
    const fs::path i = detail::resolved(in);
#if EDGELLM_IO_POSIX
    const bool same = out == i || detail::same_inode(path, in);
#else
    const bool same = out == i;
#endif
    if (same) return refuse("is the input '" + in + "'");
    if (detail::is_within(out, i)) return refuse("contains the input '" + in + "'");
  }
#if EDGELLM_IO_POSIX
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT && err != ENOTDIR)
      return edgellm::io::detail::io_error(where, path, "cannot stat", err);
    if (::lstat(path.c_str(), &st) == 0) return refuse("is a symbolic link to nothing");
    return {};  // nothing there
  }
  if (const std::string why = detail::wrong_kind(path, st, rule); !why.empty())
    return refuse(why);
  if (!rule.replace) {
    const std::string how = rule.replace_hint.empty()
                                ? "delete it or choose another path"
                                : std::string(rule.replace_hint) + " replaces it";
    return make_error(errc::io_error, where,
                      "'" + path + "': exists; not overwritten (" + how + ")");
  }
#endif
  return {};
}

/// Removes the temporaries that writers which have died (no process with their pid:
/// kill(pid, 0) fails with ESRCH) left beside `path`: only names of the exact pattern for this
/// path and kind (temp_stem; files "<pid>.<thread>.<n>", directories "<pid>.<n>[.old]"), only
/// regular files for a file output and only directories carrying the rule's marker for a
/// directory output. Errors are ignored: a temporary that stays is only disk space.
inline void remove_stale_temps(const std::string& path, const OutputRule& rule) noexcept {
#if EDGELLM_IO_POSIX
  namespace fs = std::filesystem;
  try {
    const fs::path p(path);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    const std::string prefix = p.filename().string() + ".tmp.";
    const auto digits = [](std::string_view s) {
      return !s.empty() && s.size() < 20 &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      std::string_view rest = std::string_view(name).substr(prefix.size());
      const std::size_t dot = rest.find('.');
      if (dot == std::string_view::npos || !digits(rest.substr(0, dot))) continue;
      const long pid = std::strtol(std::string(rest.substr(0, dot)).c_str(), nullptr, 10);
      rest = rest.substr(dot + 1);
      struct stat st {};
      const std::string full = it->path().string();
      if (::lstat(full.c_str(), &st) != 0) continue;
      if (rule.kind == OutputKind::file) {
        const std::size_t d2 = rest.find('.');
        if (d2 == std::string_view::npos || !digits(rest.substr(0, d2)) ||
            !digits(rest.substr(d2 + 1)) || !S_ISREG(st.st_mode))
          continue;
      } else {
        if (rest.size() > 4 && rest.substr(rest.size() - 4) == ".old")
          rest = rest.substr(0, rest.size() - 4);
        if (!digits(rest) || !S_ISDIR(st.st_mode) || !detail::has_marker(full, rule.marker))
          continue;
      }
      if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
      if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive
      std::error_code rm;
      if (rule.kind == OutputKind::file) {
        ::unlink(full.c_str());
      } else {
        fs::remove_all(it->path(), rm);
      }
    }
  } catch (...) {  // bad_alloc in a path: nothing removed, nothing lost
  }
#else
  (void)path;
  (void)rule;
#endif
}

/// Moves the finished temporary output `tmp` to `path` under `rule`, re-checking `path` just
/// before: absent, it is renamed without replacing anything that appears meanwhile (with
/// rule.replace, what appeared is checked as if present); present and of the rule's kind with
/// rule.replace, a file is renamed over, a directory is moved aside
/// (temp_stem + "<n>.old"), the new one renamed in and the old one removed. Anything else
/// there is left as it is: the error says so and where the finished output was kept
/// ("<path>.kept.<pid>", or `tmp` itself if that cannot be made), and sets `*kept`: the caller
/// must then not remove `tmp`. On success `tmp` is gone; on other errors it is the caller's.
inline status commit_output(const std::string& tmp, const std::string& path,
                            const OutputRule& rule, std::string_view where,
                            bool* kept_out = nullptr) {
#if EDGELLM_IO_POSIX
  const bool is_dir = rule.kind == OutputKind::directory;
  const auto keep = [&](const std::string& why) {
    if (kept_out != nullptr) *kept_out = true;
    std::string kept = path + ".kept." + std::to_string(static_cast<long>(::getpid()));
    if (detail::rename_noreplace(tmp.c_str(), kept.c_str(), is_dir) != 0) kept = tmp;
    return make_error(errc::io_error, where,
                      "'" + path + "': " + why + "; not replaced; the new output is kept at '" +
                          kept + "'");
  };
  struct stat st {};
  const bool present = ::stat(path.c_str(), &st) == 0 || ::lstat(path.c_str(), &st) == 0;
  if (!present || !rule.replace) {
    if (detail::rename_noreplace(tmp.c_str(), path.c_str(), is_dir) == 0) return {};
    const int err = errno;
    const bool appeared = err == EEXIST || err == ENOTEMPTY || err == ENOTDIR || err == EISDIR;
    if (!appeared)
      return edgellm::io::detail::io_error(where, path,
                                           "cannot rename the temporary '" + tmp + "' to it", err);
    if (!rule.replace) return keep("appeared while the output was written");
    // With replace, what appeared meanwhile (another writer of the same output, say) gets the
    // same checks as an output that was there from the start.
  }
  if (::stat(path.c_str(), &st) != 0) return keep("is a symbolic link to nothing");
  if (const std::string why = detail::wrong_kind(path, st, rule); !why.empty())
    return keep(why);
  if (!is_dir) {
    if (::rename(tmp.c_str(), path.c_str()) == 0) return {};
    return edgellm::io::detail::io_error(where, path,
                                         "cannot rename the temporary '" + tmp + "' over it",
                                         errno);
  }
  // The old output goes aside under our own temporary name, so that a failure in between
  // leaves a directory marked and named as ours (remove_stale_temps takes it once we are gone).
  std::string aside;
  for (unsigned n = 0;; ++n) {
    aside = temp_stem(path) + std::to_string(n) + ".old";
    if (detail::rename_noreplace(path.c_str(), aside.c_str(), true) == 0) break;
    if (errno != EEXIST || n == 1000)
      return edgellm::io::detail::io_error(where, path, "cannot move the old output aside",
                                           errno);
  }
  if (detail::rename_noreplace(tmp.c_str(), path.c_str(), true) != 0) {
    const int err = errno;
    const bool back = detail::rename_noreplace(aside.c_str(), path.c_str(), true) == 0;
    if (err == EEXIST || err == ENOTEMPTY) {
      error e = keep("appeared while the old output was being replaced");
      if (!back) e.message += "; the old output is at '" + aside + "'";
      return e;
    }
    return edgellm::io::detail::io_error(
        where, path,
        "cannot rename the temporary '" + tmp + "' to it" +
            (back ? std::string() : " (the old output is at '" + aside + "')"),
        err);
  }
  std::error_code ec;
  std::filesystem::remove_all(aside, ec);
  return {};
#else
  (void)tmp;
  (void)rule;
  (void)kept_out;
  return make_error(errc::unsupported, where,
                    "'" + path + "': output renames are only implemented for POSIX systems");
#endif
}

}  // namespace edgellm::io

// SPDX-License-Identifier: Apache-2.0
// Removes a tool's current temporary output when SIGINT or SIGTERM ends it. The library writes
// under temporary names (io/output_path.hpp) and installs no handlers; a tool's main() owns
// them: it installs this one once and registers each temporary while it exists.
#pragma once

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

namespace edgellm::tools {

namespace cleanup_detail {

// The registered temporary: a fixed buffer (the handler may not allocate) and its kind,
// 0 none, 1 a file, 2 a flat directory (files only, as edgellm-quantize's).
inline char g_temp_path[4096];
inline volatile std::sig_atomic_t g_temp_kind = 0;

// Async-signal-safe removal of a directory holding only files: unlinkat every entry
// (getdents64), then rmdir; a few rounds, as another thread may still be adding files.
inline void remove_flat_dir(const char* path) noexcept {
  for (int round = 0; round < 4; ++round) {
#if defined(__linux__) && defined(SYS_getdents64)
    const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        // struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen, u8 d_type, char d_name[]
        unsigned short reclen = 0;
        std::memcpy(&reclen, buf + off + 16, sizeof reclen);
        const char* name = buf + off + 19;
        if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0)
          ::unlinkat(fd, name, 0);
        off += reclen;
      }
    }
    ::close(fd);
#endif
    if (::rmdir(path) == 0 || errno == ENOENT) return;
  }
}

inline void remove_temp_and_reraise(int sig) {
  const int saved = errno;
  if (g_temp_kind == 1) ::unlink(g_temp_path);
  if (g_temp_kind == 2) remove_flat_dir(g_temp_path);
  g_temp_kind = 0;
  errno = saved;
  std::signal(sig, SIG_DFL);  // then die of the signal as without the handler
  std::raise(sig);
}

}  // namespace cleanup_detail

/// Installs the SIGINT / SIGTERM handler that removes the temporary registered with
/// set_signal_temp and re-raises the signal (the exit status still says which). Once, from
/// main(), before any temporary exists.
inline void remove_temp_on_signal() {
  struct sigaction sa {};
  sa.sa_handler = cleanup_detail::remove_temp_and_reraise;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

/// Registers `path` (a file, or with `directory` a directory of files) as the temporary the
/// handler removes; "" registers none. From one thread; a path too long for the buffer is not
/// registered (the next run's stale-temporary cleanup takes it, io::remove_stale_temps).
inline void set_signal_temp(std::string_view path, bool directory = false) noexcept {
  cleanup_detail::g_temp_kind = 0;
  if (path.empty() || path.size() >= sizeof cleanup_detail::g_temp_path) return;
  std::memcpy(cleanup_detail::g_temp_path, path.data(), path.size());
  cleanup_detail::g_temp_path[path.size()] = '\0';
  cleanup_detail::g_temp_kind = directory ? 2 : 1;
}

}  // namespace edgellm::tools

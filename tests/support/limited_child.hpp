// SPDX-License-Identifier: Apache-2.0
// Runs a function in a forked child under an address-space limit (RLIMIT_AS), for the tests that
// require a clean error, never an abort, when memory runs out. The limit applies to a whole
// process, hence the child. Not available under a sanitizer (its shadow memory needs terabytes
// of address space), under an emulator that ignores the limit (qemu-user), or off Linux: the
// result then says `supported = false` and the test skips.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EDGELLM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define EDGELLM_TEST_SANITIZED 1
#endif
#endif

namespace edgellm::test {

/// How a limited child ended.
struct ChildOutcome {
  bool supported = true;  ///< false: the limit cannot be applied here (nothing ran)
  bool exited = false;    ///< the child returned from fn and exited with status 0
  int status = 0;         ///< waitpid's status
  std::string output;     ///< what fn returned
  /// Why the limit could not be applied (when !supported).
  std::string why_unsupported() const {
    return output.empty() ? "unsupported" : output.substr(output[0] == '\x01' ? 1 : 0);
  }
  std::string describe() const {
#if defined(__linux__)
    if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
      return "exit status " + std::to_string(WEXITSTATUS(status)) + ": " + output;
#endif
    return "output: " + output;
  }
};

/// Bytes of address space this process has mapped now (/proc/self/statm); 0 where unknown.
inline std::size_t vm_bytes() {
  std::size_t pages = 0;
#if defined(__linux__)
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%zu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
#else
  return pages;
#endif
}

/// Forks; the child sets RLIMIT_AS to `limit` bytes (0: no limit), runs fn() (returning a
/// std::string) and sends the string back. An exception escaping fn, an abort or a crash shows
/// as a signal.
template <class Fn>
ChildOutcome run_limited(std::size_t limit, Fn&& fn) {
  ChildOutcome out;
#if defined(__linux__) && !defined(EDGELLM_TEST_SANITIZED)
  int fds[2];
  if (::pipe(fds) != 0) {
    out.output = "pipe failed";
    return out;
  }
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    out.output = "fork failed";
    return out;
  }
  if (pid == 0) {
    ::close(fds[0]);
    const rlimit rl{limit, limit};
    std::string text;
    if (limit == 0) {
      text = std::forward<Fn>(fn)();
    } else if (::setrlimit(RLIMIT_AS, &rl) != 0) {
      text = "\x01setrlimit failed";
    } else if (void* p = std::malloc(limit)) {  // the limit does not bite (qemu-user ignores it)
      std::free(p);
      text = "\x01unsupported";
    } else {
      text = std::forward<Fn>(fn)();
    }
    for (std::size_t off = 0; off < text.size();) {
      const ssize_t w = ::write(fds[1], text.data() + off, text.size() - off);
      if (w <= 0) break;
      off += static_cast<std::size_t>(w);
    }
    ::_exit(0);  // no atexit handlers, no Catch2 teardown in the child
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.output.append(buf, static_cast<std::size_t>(r));
  ::close(fds[0]);
  ::waitpid(pid, &out.status, 0);
  out.exited = WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0;
  if (out.exited && out.output.rfind('\x01', 0) == 0) out.supported = false;
#else
  (void)limit;
  (void)fn;
  out.supported = false;
  out.output = "\x01a sanitizer build or not Linux";
#endif
  return out;
}

}  // namespace edgellm::test

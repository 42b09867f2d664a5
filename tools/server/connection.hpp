// SPDX-License-Identifier: Apache-2.0
// The connection an edgellm-server request came on, found by its peer address, so that a
// generation notices a client that went away before its next token (httplib 0.11 gives
// handlers no socket).
#pragma once

#include "../../cli/flags.hpp"

#include <string>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

namespace edgellm::server {

inline int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (const dirent* e = ::readdir(d)) {
    const auto fd = cli::parse_number<int>(e->d_name);
    if (!fd) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (::getpeername(*fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (::getsockname(*fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {};
    int pport = -1, sport = -1;
    if (peer.ss_family == AF_INET) {
      const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
      ::inet_ntop(AF_INET, &p->sin_addr, text, sizeof text);
      pport = ntohs(p->sin_port);
      sport = ntohs(reinterpret_cast<const sockaddr_in*>(&self)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
      ::inet_ntop(AF_INET6, &p->sin6_addr, text, sizeof text);
      pport = ntohs(p->sin6_port);
      sport = ntohs(reinterpret_cast<const sockaddr_in6*>(&self)->sin6_port);
    }
    if (pport == remote_port && sport == local_port && remote_addr == text) {
      found = *fd;
      break;
    }
  }
  ::closedir(d);
  return found;
}

/// The peer closed (or reset) the connection: poll without waiting.
inline bool peer_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace edgellm::server

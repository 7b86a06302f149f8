// Finding a request's socket by its addresses, and peeking at it (see disconnect_probe.h).
#include "server/http/disconnect_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace flide::server {

namespace {

// The numeric host and port of a socket address, formatted as httplib formats them.
bool host_and_port(const sockaddr_storage& addr, socklen_t length, std::string& host, int& port) {
  if (addr.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  else
    return false;
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), length, text, sizeof text, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  host = text;
  return true;
}

bool matches(int fd, const ConnectionAddress& address) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0 ||
      !host_and_port(addr, length, host, port) || port != address.local_port ||
      host != address.local_addr)
    return false;
  length = sizeof addr;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0 &&
         host_and_port(addr, length, host, port) && port == address.remote_port &&
         host == address.remote_addr;
}

int find_socket(const ConnectionAddress& address) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (matches(int(fd), address)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

std::function<bool()> make_disconnect_probe(const ConnectionAddress& address) {
  const int fd = find_socket(address);
  if (fd < 0) return [] { return false; };
  return [fd] {
    char byte;
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // a pipelined request waits: the client is there
    if (n == 0) return true;  // orderly close
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
  };
}

}  // namespace flide::server

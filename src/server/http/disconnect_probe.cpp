// Peeking at a request's socket (see disconnect_probe.h).
#include "server/http/disconnect_probe.h"

#include <sys/socket.h>

#include <cerrno>

namespace flide::server {

std::function<bool()> make_disconnect_probe(int socket) {
  if (socket < 0) return [] { return false; };
  return [socket] {
    char byte;
    const ssize_t n = recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;  // a pipelined request waits: the client is there
    if (n == 0) return true;  // orderly close
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
  };
}

}  // namespace flide::server

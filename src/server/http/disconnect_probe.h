// Whether the client of a request still being answered has disconnected. cpp-httplib 0.11.4
// (Debian 12) gives handlers neither the socket nor is_connection_closed (added upstream later),
// but it does give the connection's two addresses, and a TCP connection is identified by them:
// the probe finds the process's socket whose local and peer addresses match, once, and then
// peeks at it. The HTTP thread that owns the socket is blocked waiting for the answer while the
// engine asks, so the descriptor cannot be closed and reused under the probe.
#pragma once

#include <functional>
#include <string>

namespace flide::server {

struct ConnectionAddress {
  std::string local_addr;  // numeric host, as httplib's Request::local_addr
  int local_port = -1;
  std::string remote_addr;
  int remote_port = -1;
};

// A probe that answers true once the peer has closed or reset the connection (a FIN is
// pending: recv would return 0). Bytes pending (a pipelined request) mean alive. When no
// socket matches (it cannot happen for a live request), the probe always answers false.
std::function<bool()> make_disconnect_probe(const ConnectionAddress& address);

}  // namespace flide::server

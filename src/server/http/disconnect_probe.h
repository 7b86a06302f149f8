// Whether the client of a request still being answered has disconnected, by peeking at its
// connection's socket (connection_stream.h's serving_socket(), on the request's HTTP thread).
// That thread is blocked waiting for the answer while the engine asks, so the descriptor cannot
// be closed and reused under the probe.
#pragma once

#include <functional>

namespace flide::server {

// A probe that answers true once the peer has closed or reset the connection (a FIN is
// pending: recv would return 0). Bytes pending (a pipelined request) mean alive. Without a
// socket (-1) the probe always answers false.
std::function<bool()> make_disconnect_probe(int socket);

}  // namespace flide::server

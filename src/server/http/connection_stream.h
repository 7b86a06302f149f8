// One HTTP/1.1 connection's bytes, kept for all of its requests. httplib 0.11.4 reads each request
// through a new SocketStream whose read-ahead (up to 4 KB past the byte it was asked for) ends
// with that request, so the bytes of a pipelined request (RFC 9112 §9.3.2: a client may send
// several requests before reading an answer) read ahead with the one before were dropped: the
// later requests went unanswered, or the rest of a body was parsed as a request line (400).
// ConnectionStream keeps its read-ahead for the connection's life, and KeepAliveServer serves
// each connection's requests, in order, from one.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

namespace flide::server {

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::chrono::microseconds read_timeout,
                   std::chrono::microseconds write_timeout);

  bool is_readable() const override;  // bytes read ahead, or the socket readable within the timeout
  bool is_writable() const override;  // the socket writable within the timeout
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

  // Waits up to `idle` for the next request's first byte (at once when one was read ahead);
  // false on timeout, or soon after `listening_socket` turns INVALID_SOCKET (httplib's stop()).
  bool wait_for_request(std::chrono::milliseconds idle,
                        const std::atomic<int>& listening_socket) const;

 private:
  const int fd_;
  const std::chrono::microseconds read_timeout_;
  const std::chrono::microseconds write_timeout_;
  std::vector<char> ahead_;  // bytes received and not yet read: [begin_, end_)
  size_t begin_ = 0;
  size_t end_ = 0;
};

// The socket of the connection the calling thread is serving (httplib runs each request's
// handler on the thread that reads its connection), or -1 on any other thread.
int serving_socket();

// httplib's server, serving each connection through one ConnectionStream. Its keep-alive loop
// keeps httplib's request count and idle timeout, and while idle it also sees a stop within
// 10 ms, where httplib's waited out the idle timeout (5 s).
class KeepAliveServer final : public httplib::Server {
 private:
  bool process_and_close_socket(int fd) override;
};

}  // namespace flide::server

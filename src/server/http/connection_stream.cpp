// A connection's bytes across its requests (see connection_stream.h).
#include "server/http/connection_stream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flide::server {

namespace {

// Larger than any read httplib asks for (4 KB), so that every read goes through the read-ahead.
constexpr size_t kReadAhead = size_t(16) << 10;

// poll() for one event, retrying on EINTR; > 0 when it came.
int wait_for(int fd, short event, std::chrono::milliseconds timeout) {
  pollfd p{fd, event, 0};
  int n;
  do n = poll(&p, 1, int(timeout.count()));
  while (n < 0 && errno == EINTR);
  return n;
}

std::chrono::milliseconds rounded_up(std::chrono::microseconds t) {
  return std::chrono::ceil<std::chrono::milliseconds>(t);
}

// The numeric host and port of a socket address, as httplib gives them to handlers.
void host_and_port(const sockaddr_storage& addr, socklen_t length, std::string& host, int& port) {
  if (addr.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  else
    return;
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), length, text, sizeof text, nullptr, 0,
                  NI_NUMERICHOST) == 0)
    host = text;
}

thread_local int tls_serving_socket = -1;

}  // namespace

int serving_socket() {
  return tls_serving_socket;
}

ConnectionStream::ConnectionStream(int fd, std::chrono::microseconds read_timeout,
                                   std::chrono::microseconds write_timeout)
    : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout), ahead_(kReadAhead) {}

bool ConnectionStream::is_readable() const {
  return begin_ < end_ || wait_for(fd_, POLLIN, rounded_up(read_timeout_)) > 0;
}

// A half-closed client (it shut its sending side after the request) still reads the answer, so
// unlike httplib's SocketStream this does not also require the receiving side to be open.
bool ConnectionStream::is_writable() const {
  return wait_for(fd_, POLLOUT, rounded_up(write_timeout_)) > 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (begin_ == end_) {
    if (!is_readable()) return -1;
    ssize_t n;
    do n = recv(fd_, ahead_.data(), ahead_.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    begin_ = 0;
    end_ = size_t(n);
  }
  const size_t n = std::min(size, end_ - begin_);
  std::memcpy(ptr, ahead_.data() + begin_, n);
  begin_ += n;
  return ssize_t(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do n = send(fd_, ptr, size, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
    host_and_port(addr, length, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
    host_and_port(addr, length, ip, port);
}

bool ConnectionStream::wait_for_request(std::chrono::milliseconds idle,
                                        const std::atomic<int>& listening_socket) const {
  if (begin_ < end_) return true;
  // In short slices, so that a stop closes idle connections at once (httplib's own wait only
  // looks at the server's socket before it starts).
  constexpr std::chrono::milliseconds kSlice(10);
  const auto deadline = std::chrono::steady_clock::now() + idle;
  while (listening_socket != INVALID_SOCKET) {
    const int n = wait_for(fd_, POLLIN, kSlice);
    if (n != 0) return n > 0;  // readable: a request, or the client's close (the read sees it)
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
  return false;
}

bool KeepAliveServer::process_and_close_socket(int fd) {
  using std::chrono::microseconds;
  using std::chrono::seconds;
  ConnectionStream stream(fd, seconds(read_timeout_sec_) + microseconds(read_timeout_usec_),
                          seconds(write_timeout_sec_) + microseconds(write_timeout_usec_));
  tls_serving_socket = fd;
  bool served = false;
  for (size_t left = keep_alive_max_count_;
       left > 0 && stream.wait_for_request(seconds(keep_alive_timeout_sec_), svr_sock_); --left) {
    bool client_closes = false;
    served = process_request(stream, left == 1, client_closes, nullptr);
    if (!served || client_closes) break;
  }
  tls_serving_socket = -1;
  shutdown(fd, SHUT_RDWR);
  close(fd);
  return served;
}

}  // namespace flide::server

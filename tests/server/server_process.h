// A real `flide serve` process for the server tests: started on an ephemeral loopback port with
// the shipped tiny model, its port read from the `listening on` line, driven over HTTP with
// httplib::Client, and stopped with SIGTERM (whose clean exit is part of what is tested).
#pragma once

#include <httplib.h>
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tiny_model.h"

namespace flide::test {

class ServerProcess {
 public:
  // `flide serve --model <model_dir> --port 0 --threads 1 <extra_args>`; returns once /health
  // is 200 (a test failure, and port() 0, when the server does not come up in 60 s).
  explicit ServerProcess(const std::string& extra_args = "",
                         const std::filesystem::path& model_dir = tiny_model_dir());
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string url() const;  // http://127.0.0.1:PORT
  // A keep-alive client with generous timeouts (the tiny model answers in milliseconds, a 2-core
  // CI machine under a burst in seconds).
  std::unique_ptr<httplib::Client> client() const;
  // `signal` (SIGTERM or SIGINT: both stop it cleanly), then the exit status (-1 when it had to
  // be killed or died of a signal).
  int stop(int signal = SIGTERM);
  void signal(int signal);          // sends it and returns at once
  std::string stderr_text() const;  // everything the server logged so far

 private:
  // gtest's ASSERTs need a void function
  void start(const std::string& extra_args, const std::filesystem::path& model_dir);

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  std::filesystem::path stderr_file_;
};

// POSTs a JSON body (or any bytes) and parses the answer; the status comes back alongside.
struct HttpAnswer {
  int status = 0;               // 0 when the request failed at the transport level
  nlohmann::ordered_json body;  // null when the body is not JSON
  std::string text;
  httplib::Headers headers;
};
HttpAnswer post(httplib::Client& client, const std::string& path, const std::string& body,
                const httplib::Headers& headers = {},
                const std::string& content_type = "application/json");
HttpAnswer get(httplib::Client& client, const std::string& path,
               const httplib::Headers& headers = {});

// A shell command run to its end (a flide command that should not start serving): its exit
// status (-1 when it did not exit normally) and its standard output (add 2>&1 for stderr).
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::string& command);

// The bytes of a GET (with any more header lines, each ending in CRLF) and of a POST with a
// JSON body, for a RawConnection to send.
std::string raw_get(const std::string& path, const std::string& extra_headers = "");
std::string raw_post(const std::string& path, const std::string& body);
// A response as a RawConnection receives it, parsed: its status (0 when it is not an HTTP/1.1
// response), body text and JSON body; its headers stay in the raw text.
HttpAnswer parse_response(const std::string& response);

// A TCP connection to the server on which the test writes raw bytes (malformed HTTP, a client
// that hangs up). Closed on destruction.
class RawConnection {
 public:
  explicit RawConnection(int port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  void send(const std::string& bytes);
  // One response (or what came until the server closed, or 10 s passed).
  std::string receive();
  // Up to `count` responses, in order, each whole (headers and its Content-Length body); the
  // last is what came of one cut short when the server closed or 10 s passed. Bytes read past
  // the last are kept for the next call.
  std::vector<std::string> receive(size_t count);
  void shut_sending();  // half-close: the server reads the end of the stream, and can still answer
  void close();

 private:
  int fd_ = -1;
  std::string pending_;  // received, not yet returned
};

// The value of `name` (a sample line `name value` or `name{labels} value`) in /metrics text;
// 0 when absent.
double metric(const std::string& metrics_text, const std::string& name_and_labels);

// The server's /metrics text ("" when it does not answer 200).
std::string metrics_text(httplib::Client& http);

// Polls /metrics until `name` reaches `value` (60 s at most); returns whether it did.
bool wait_for_metric(httplib::Client& http, const std::string& name, double value);

}  // namespace flide::test

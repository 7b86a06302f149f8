// The `flide serve` child process of the server tests (see server_process.h).
#include "server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace flide::test {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// Reads the child's stdout up to the line that names the port (0 after `timeout` or EOF).
int read_port(int fd, std::chrono::seconds timeout) {
  const std::string marker = "listening on http://127.0.0.1:";
  std::string seen;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[256];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return 0;
    seen.append(buffer, size_t(n));
    const size_t at = seen.find(marker);
    if (at != std::string::npos && seen.find('\n', at) != std::string::npos)
      return std::stoi(seen.substr(at + marker.size()));
  }
  return 0;
}

HttpAnswer answer_of(const httplib::Result& result) {
  HttpAnswer answer;
  if (!result) return answer;
  answer.status = result->status;
  answer.text = result->body;
  answer.headers = result->headers;
  answer.body = nlohmann::ordered_json::parse(result->body, nullptr, false);
  if (answer.body.is_discarded()) answer.body = nullptr;
  return answer;
}

}  // namespace

ServerProcess::ServerProcess(const std::string& extra_args,
                             const std::filesystem::path& model_dir) {
  start(extra_args, model_dir);
}

void ServerProcess::start(const std::string& extra_args, const std::filesystem::path& model_dir) {
  static std::atomic<int> counter{0};
  stderr_file_ =
      std::filesystem::temp_directory_path() /
      ("flide_serve_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".log");
  std::vector<std::string> args = {FLIDE_BINARY, "serve", "--model",   model_dir.string(),
                                   "--port",     "0",     "--threads", "1"};
  for (const std::string& word : words(extra_args)) args.push_back(word);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file_.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int spawned = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  stdout_fd_ = out[0];
  ASSERT_EQ(spawned, 0) << "cannot start " << FLIDE_BINARY;

  port_ = read_port(stdout_fd_, std::chrono::seconds(60));
  ASSERT_GT(port_, 0) << "no `listening on` line; the server said:\n" << stderr_text();
  const std::unique_ptr<httplib::Client> http = client();
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    const httplib::Result health = http->Get("/health");
    if (health && health->status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "/health never answered 200; the server said:\n" << stderr_text();
  port_ = 0;
}

ServerProcess::~ServerProcess() {
  stop();
  std::error_code ignored;
  std::filesystem::remove(stderr_file_, ignored);
}

std::string ServerProcess::url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

std::unique_ptr<httplib::Client> ServerProcess::client() const {
  auto http = std::make_unique<httplib::Client>("127.0.0.1", port_);
  http->set_keep_alive(true);
  http->set_connection_timeout(10);
  http->set_read_timeout(120);
  http->set_write_timeout(60);
  return http;
}

void ServerProcess::signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

int ServerProcess::stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  pid_t done = 0;
  while ((done = waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (done == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    status = -1;
  }
  pid_ = -1;
  close(stdout_fd_);
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string ServerProcess::stderr_text() const {
  std::ifstream file(stderr_file_);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

HttpAnswer post(httplib::Client& client, const std::string& path, const std::string& body,
                const httplib::Headers& headers, const std::string& content_type) {
  return answer_of(client.Post(path, headers, body, content_type));
}

HttpAnswer get(httplib::Client& client, const std::string& path, const httplib::Headers& headers) {
  return answer_of(client.Get(path, headers));
}

std::string raw_get(const std::string& path, const std::string& extra_headers) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
}

std::string raw_post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

HttpAnswer parse_response(const std::string& response) {
  HttpAnswer answer;
  const size_t body_at = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 ", 0) != 0 || body_at == std::string::npos) return answer;
  answer.status = std::stoi(response.substr(9, 3));
  answer.text = response.substr(body_at + 4);
  answer.body = nlohmann::ordered_json::parse(answer.text, nullptr, false);
  return answer;
}

RawConnection::RawConnection(int port) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
}

RawConnection::~RawConnection() {
  close();
}

void RawConnection::send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may refuse before reading everything
    sent += size_t(n);
  }
}

namespace {

// The length of the whole response at the start of `text` (headers and a Content-Length body),
// or 0 while it has not all come.
size_t whole_response(const std::string& text) {
  const size_t head_end = text.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  const size_t length_at = text.find("Content-Length: ");
  if (length_at == std::string::npos || length_at > head_end) return 0;
  const size_t size = head_end + 4 + std::stoul(text.substr(length_at + 16));
  return text.size() >= size ? size : 0;
}

}  // namespace

std::string RawConnection::receive() {
  std::vector<std::string> responses = receive(1);
  return responses.empty() ? std::string() : responses[0];
}

std::vector<std::string> RawConnection::receive(size_t count) {
  std::vector<std::string> responses;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  // Keep-alive would hold the connection open for seconds: stop at the last whole response.
  while (responses.size() < count) {
    if (const size_t size = whole_response(pending_)) {
      responses.push_back(pending_.substr(0, size));
      pending_.erase(0, size);
      continue;
    }
    if (Clock::now() >= deadline) break;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    pending_.append(buffer, size_t(n));
  }
  if (responses.size() < count && !pending_.empty()) {
    responses.push_back(std::move(pending_));
    pending_.clear();
  }
  return responses;
}

void RawConnection::shut_sending() {
  shutdown(fd_, SHUT_WR);
}

void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

double metric(const std::string& metrics_text, const std::string& name_and_labels) {
  std::istringstream in(metrics_text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name_and_labels + " ", 0) == 0)
      return std::stod(line.substr(name_and_labels.size() + 1));
  return 0;
}

std::string metrics_text(httplib::Client& http) {
  const httplib::Result result = http.Get("/metrics");
  return result && result->status == 200 ? result->body : std::string();
}

bool wait_for_metric(httplib::Client& http, const std::string& name, double value) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    if (metric(metrics_text(http), name) >= value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace flide::test

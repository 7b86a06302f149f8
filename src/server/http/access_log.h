// One line on stderr per answered request (flide serve --access-log, on by default, as uvicorn's
// access log under vLLM and llama.cpp's request log):
//   flide serve: 127.0.0.1:51234 "POST /v1/systemone" 200 18.9 ms
// The method and path are the client's bytes: anything outside printable ASCII is written as
// \xNN and a long path is cut, so that a hostile request cannot forge or flood log lines.
#pragma once

#include <httplib.h>

#include <string>

namespace flide::server {

std::string access_log_line(const httplib::Request& req, int status, double seconds);

// Writes access_log_line (one write, whole, among the HTTP threads' lines).
void log_access(const httplib::Request& req, int status, double seconds);

}  // namespace flide::server

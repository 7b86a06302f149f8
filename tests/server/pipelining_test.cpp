// HTTP/1.1 pipelining (RFC 9112 §9.3.2): requests a client sends on one connection before
// reading any answer are all answered, in the order sent, each body read to its own end. And a
// client that half-closes after its requests still reads their answers.
#include <gtest/gtest.h>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

TEST(Pipelining, RequestsSentTogetherAreAllAnsweredInOrder) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  RawConnection connection(server.port());
  connection.send(raw_get("/health") + raw_post("/tokenize", R"({"content": "hello"})") +
                  raw_get("/v1/models"));
  const std::vector<std::string> responses = connection.receive(3);
  ASSERT_EQ(responses.size(), 3u);
  for (const std::string& response : responses)
    EXPECT_EQ(parse_response(response).status, 200) << response;
  EXPECT_EQ(parse_response(responses[0]).body["status"], "ok") << responses[0];
  EXPECT_TRUE(parse_response(responses[1]).body["tokens"].is_array()) << responses[1];
  EXPECT_EQ(parse_response(responses[2]).body["object"], "list") << responses[2];
}

// Bodies longer than a read-ahead (4 KB in httplib): each request is read to its own end, and
// the next starts where it stops. Each answer is the one its request gets when sent alone.
TEST(Pipelining, LongBodiesStayInStepAndGetTheirOwnAnswers) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  ordered_json first = systemone_body();
  ordered_json second = systemone_body();
  second["state"] =
      "The parcel never arrived and the tracking page has said 'in transit' for weeks.";
  // JSON allows whitespace anywhere between tokens: long bodies that cost nothing to answer.
  const std::string first_text = first.dump(1) + std::string(6000, ' ');
  const std::string second_text = second.dump(1) + std::string(9000, '\n');
  const std::unique_ptr<httplib::Client> http = server.client();
  const HttpAnswer first_alone = post(*http, "/v1/systemone", first_text);
  const HttpAnswer second_alone = post(*http, "/v1/systemone", second_text);
  ASSERT_EQ(first_alone.status, 200) << first_alone.text;
  ASSERT_EQ(second_alone.status, 200) << second_alone.text;

  RawConnection connection(server.port());
  connection.send(raw_post("/v1/systemone", first_text) + raw_post("/v1/systemone", second_text) +
                  raw_get("/health"));
  const std::vector<std::string> responses = connection.receive(3);
  ASSERT_EQ(responses.size(), 3u);
  ASSERT_EQ(parse_response(responses[0]).status, 200) << responses[0];
  ASSERT_EQ(parse_response(responses[1]).status, 200) << responses[1];
  EXPECT_EQ(parse_response(responses[0]).body["answers"], first_alone.body["answers"]);
  EXPECT_EQ(parse_response(responses[1]).body["answers"], second_alone.body["answers"]);
  EXPECT_NE(first_alone.body["usage"], second_alone.body["usage"]);  // the two are told apart
  EXPECT_EQ(parse_response(responses[0]).body["usage"], first_alone.body["usage"]);
  EXPECT_EQ(parse_response(responses[1]).body["usage"], second_alone.body["usage"]);
  EXPECT_EQ(parse_response(responses[2]).status, 200) << responses[2];
}

// A request with `Connection: close` is the connection's last: what was pipelined after it is
// not answered, and the server closes.
TEST(Pipelining, ConnectionCloseEndsThePipeline) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  RawConnection connection(server.port());
  connection.send(raw_get("/health", "Connection: close\r\n") + raw_get("/v1/models"));
  const std::vector<std::string> responses = connection.receive(2);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(parse_response(responses[0]).status, 200) << responses[0];
  EXPECT_NE(responses[0].find("Connection: close"), std::string::npos) << responses[0];
}

// `printf 'GET ...' | nc -N`: the client shuts its sending side once the requests are out. The
// server reads the end of the stream after them, and still answers each (the engine drops a
// decision request whose client closed before its round, and a half-close looks the same to it).
TEST(Pipelining, AHalfClosedClientStillGetsItsAnswers) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  RawConnection connection(server.port());
  connection.send(raw_get("/health") + raw_get("/v1/models"));
  connection.shut_sending();
  const std::vector<std::string> responses = connection.receive(2);
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(parse_response(responses[0]).body["status"], "ok") << responses[0];
  EXPECT_EQ(parse_response(responses[1]).body["object"], "list") << responses[1];
}

}  // namespace
}  // namespace flide::test

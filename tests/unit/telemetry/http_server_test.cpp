#include "telemetry/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace zernel::telemetry {
namespace {

TEST(HttpServer, serves_the_latest_snapshot_as_metrics_and_status) {
  SnapshotStore store;
  Snapshot s;
  s.backend = "observe";
  s.tasks_total = 3;
  s.decisions_total = 42;
  store.publish(s);
  HttpServer server(store);
  ASSERT_TRUE(server.start("127.0.0.1", 0).ok());
  ASSERT_GT(server.port(), 0);

  httplib::Client client("127.0.0.1", server.port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("zernel_scheduler_decisions_total 42\n"), std::string::npos);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);

  s.decisions_total = 43;
  store.publish(s);
  auto status = client.Get("/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_NE(status->body.find("\"decisions\": 43"), std::string::npos);

  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  server.stop();
}

TEST(HttpServer, a_port_in_use_is_a_clear_error) {
  SnapshotStore store;
  HttpServer first(store);
  ASSERT_TRUE(first.start("127.0.0.1", 0).ok());
  HttpServer second(store);
  auto r = second.start("127.0.0.1", first.port());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("cannot listen on 127.0.0.1:"), std::string::npos);
}

TEST(HttpServer, an_address_not_of_this_machine_is_a_clear_error) {
  SnapshotStore store;
  HttpServer server(store);
  auto r = server.start("192.0.2.1", 0);  // TEST-NET-1: never a local address
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("192.0.2.1"), std::string::npos);
}

}  // namespace
}  // namespace zernel::telemetry

// ---- abuse (issue 11): raw sockets, since a well-behaved client cannot send these ----
namespace zernel::telemetry {
namespace {

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t w = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (w <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(w));
  }
}

// Everything until the server closes (or 3 s pass); `closed` says which.
std::string read_until_close(int fd, bool* closed = nullptr) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r > 0) {
      out.append(buf, static_cast<std::size_t>(r));
      continue;
    }
    if (closed) *closed = r == 0 || errno == ECONNRESET;
    return out;
  }
}

std::size_t count_of(std::string_view hay, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + 1))
    ++n;
  return n;
}

struct Served {
  SnapshotStore store;
  HttpServer server;
  explicit Served(HttpLimits lim = {}) : server(store, lim) {
    Snapshot s;
    s.backend = "observe";
    store.publish(s);
    EXPECT_TRUE(server.start("127.0.0.1", 0).ok());
  }
  std::string get(std::string_view path) {
    const int fd = connect_to(server.port());
    send_all(fd, "GET " + std::string(path) + " HTTP/1.1\r\nConnection: close\r\n\r\n");
    std::string out = read_until_close(fd);
    ::close(fd);
    return out;
  }
};

TEST(HttpServer, too_many_headers_are_refused_with_431_and_the_connection_closed) {
  Served s;
  const int fd = connect_to(s.server.port());
  std::string req = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 100; ++i) req += "X-" + std::to_string(i) + ": y\r\n";
  send_all(fd, req);
  bool closed = false;
  const std::string out = read_until_close(fd, &closed);
  ::close(fd);
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0U) << out;
  EXPECT_TRUE(closed);
  EXPECT_NE(s.get("/metrics").find("200 OK"), std::string::npos);
}

TEST(HttpServer, an_endless_header_line_is_cut_off_at_the_head_limit) {
  Served s;
  const int fd = connect_to(s.server.port());
  send_all(fd, "GET /metrics HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a'));
  bool closed = false;
  const std::string out = read_until_close(fd, &closed);
  ::close(fd);
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0U) << out.substr(0, 80);
  EXPECT_TRUE(closed);
}

TEST(HttpServer, a_malformed_request_is_answered_400_at_once_without_internal_text) {
  Served s;
  for (std::string_view bad :
       {"GARBAGE\r\n\r\n", "GET /x HTTP/9.9\r\n\r\n", "GET /metrics HTTP/1.1\r\n folded\r\n\r\n",
        "GET nopath HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n"}) {
    const int fd = connect_to(s.server.port());
    send_all(fd, bad);
    bool closed = false;
    const std::string out = read_until_close(fd, &closed);
    ::close(fd);
    EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0U) << bad << " -> " << out;
    EXPECT_TRUE(closed) << bad;
    EXPECT_EQ(out.find("EXCEPTION"), std::string::npos);
  }
}

TEST(HttpServer, methods_other_than_get_and_bodies_are_refused) {
  Served s;
  const int a = connect_to(s.server.port());
  send_all(a, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_EQ(read_until_close(a).rfind("HTTP/1.1 405", 0), 0U);
  ::close(a);
  const int b = connect_to(s.server.port());
  send_all(b, "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(read_until_close(b).rfind("HTTP/1.1 413", 0), 0U);
  ::close(b);
}

TEST(HttpServer, pipelined_requests_are_all_answered_without_a_stall) {
  Served s;
  const int fd = connect_to(s.server.port());
  const auto t0 = std::chrono::steady_clock::now();
  send_all(fd,
           "GET /metrics HTTP/1.1\r\n\r\nGET /status HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n"
           "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string out = read_until_close(fd);
  ::close(fd);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(count_of(out, "HTTP/1.1 200 OK"), 4U) << out.substr(0, 400);
  EXPECT_LT(ms, 500);
}

TEST(HttpServer, a_slow_request_head_is_closed_at_its_deadline) {
  HttpLimits lim;
  lim.head_deadline_ms = 300;
  Served s(lim);
  const int fd = connect_to(s.server.port());
  send_all(fd, "GET /metrics HTTP/1.1\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 20 && !closed; ++i) {
    if (::send(fd, "X", 1, MSG_NOSIGNAL) < 0) closed = true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char c;
      closed = ::read(fd, &c, 1) <= 0;
    }
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_GE(s.server.stats().closed[static_cast<std::size_t>(HttpClose::deadline)], 1U);
}

TEST(HttpServer, a_full_table_of_stalled_connections_gives_way_to_a_new_request) {
  HttpLimits lim;
  lim.max_connections = 8;
  lim.max_per_peer = 8;
  Served s(lim);
  // Each sends one byte (TCP_DEFER_ACCEPT keeps connections that send nothing in the kernel).
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(connect_to(s.server.port()));
    send_all(idle.back(), "G");
  }
  // Until the server has taken all 20 (8 kept, 12 evicted; a count read while it accepts one
  // includes that one, over the cap for the length of the accept): under ctest -j2 that took
  // longer than the 100 ms this test once slept.
  const auto evicted = [&] {
    return s.server.stats().closed[static_cast<std::size_t>(HttpClose::evicted)];
  };
  for (int i = 0; i < 300 && evicted() < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(evicted(), 12U);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(s.get("/metrics").find("200 OK"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  // The request was served as its connection was accepted, before an idle one made room for it
  // (the server's loop is one descriptor over the cap until then): the reply may come first.
  for (int i = 0; i < 300 && s.server.stats().open_connections > 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const HttpStats st = s.server.stats();
  std::string closed;
  for (std::size_t i = 0; i < st.closed.size(); ++i) closed += " " + std::to_string(st.closed[i]);
  EXPECT_LE(st.open_connections, 8U) << "closed:" << closed;
  EXPECT_GE(evicted(), 12U);
  for (int fd : idle) ::close(fd);
}

TEST(HttpServer, a_connection_that_has_sent_part_of_a_request_outlives_empty_newcomers) {
  HttpLimits lim;
  lim.max_connections = 8;
  lim.max_per_peer = 8;
  Served s(lim);
  const int partial = connect_to(s.server.port());
  send_all(partial, "GET /metrics HTTP/1.1\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<int> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(connect_to(s.server.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send_all(partial, "Connection: close\r\n\r\n");
  EXPECT_EQ(read_until_close(partial).rfind("HTTP/1.1 200", 0), 0U);
  ::close(partial);
  for (int fd : idle) ::close(fd);
}

TEST(HttpServer, status_survives_a_process_name_that_is_not_utf8) {
  Served s;
  Snapshot snap;
  snap.backend = "observe";
  TaskView t;
  t.pid = 42;
  t.comm = "bad\xff\xfe name";
  snap.tasks.push_back(t);
  s.store.publish(snap);
  const std::string out = s.get("/status");
  EXPECT_EQ(out.rfind("HTTP/1.1 200", 0), 0U) << out.substr(0, 200);
  EXPECT_NE(out.find("bad\xEF\xBF\xBD\xEF\xBF\xBD name"), std::string::npos);
}

// Lingering close: a client still sending when its request is refused (a 512 KiB body, far past
// what the server reads) gets the 413 and then EOF. Closing at once with its input unread sent a
// reset: the client's send failed with ECONNRESET or EPIPE.
TEST(HttpServer, an_error_reply_reaches_a_client_that_is_still_sending) {
  Served s;
  const int fd = connect_to(s.server.port());
  const std::string body(std::size_t{1} << 19, 'x');
  const std::string request =
      "GET /metrics HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const std::string all = request + body;
  std::string_view rest = all;
  int send_errno = 0;
  while (!rest.empty()) {
    const ssize_t w = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (w <= 0) {
      send_errno = errno;
      break;
    }
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
  EXPECT_EQ(send_errno, 0) << std::strerror(send_errno);
  ::shutdown(fd, SHUT_WR);
  bool closed = false;
  const std::string out = read_until_close(fd, &closed);
  EXPECT_EQ(out.rfind("HTTP/1.1 413", 0), 0U) << out.substr(0, 200);
  EXPECT_TRUE(closed);
  ::close(fd);
}

// /metrics is one shared rendering plus the server's counters, current at each request.
TEST(HttpServer, metrics_carry_the_server_counters_current_at_each_request) {
  Served s;
  const std::string first = s.get("/metrics");
  const std::string second = s.get("/metrics");
  EXPECT_NE(first.find("zernel_scheduler_http_connections 1\n"), std::string::npos);
  EXPECT_NE(second.find("zernel_scheduler_http_connections_limit 256\n"), std::string::npos);
  const auto length = [](const std::string& r) {
    const std::size_t at = r.find("Content-Length: ");
    const std::size_t end = r.find("\r\n\r\n");
    return at == std::string::npos || end == std::string::npos
               ? std::string::npos
               : static_cast<std::size_t>(std::stoul(r.substr(at + 16))) + end + 4;
  };
  EXPECT_EQ(length(first), first.size());
  EXPECT_EQ(length(second), second.size());
}

}  // namespace
}  // namespace zernel::telemetry

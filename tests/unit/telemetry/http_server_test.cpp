#include "telemetry/http_server.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

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

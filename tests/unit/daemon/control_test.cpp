#include "daemon/control.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace zernel::daemon {
namespace {

std::string error_of(std::string_view line) {
  auto r = parse_request(line);
  EXPECT_FALSE(r.ok()) << line;
  return r.ok() ? std::string() : r.error().message();
}

TEST(ControlParse, ValidRequests) {
  auto add = parse_request(
      R"({"op":"tenant_add","id":"team-a","gpus":4,"class":"Inference","cpu_weight":1.5})"
      "\n");
  ASSERT_TRUE(add.ok()) << add.error().message();
  EXPECT_EQ(add->op, ControlOp::tenant_add);
  EXPECT_EQ(add->tenant.id, "team-a");
  EXPECT_EQ(add->tenant.gpus, 4U);
  EXPECT_EQ(add->tenant.priority_class, policy::PriorityClass::inference);
  ASSERT_TRUE(add->tenant.cpu_weight.has_value());
  EXPECT_FLOAT_EQ(*add->tenant.cpu_weight, 1.5F);

  auto add_int_weight =
      parse_request(R"({"op":"tenant_add","id":"b","gpus":0,"class":"background","cpu_weight":2})");
  ASSERT_TRUE(add_int_weight.ok());
  EXPECT_FLOAT_EQ(*add_int_weight->tenant.cpu_weight, 2.0F);

  auto rm = parse_request("{\"op\":\"tenant_remove\",\"id\":\"team-a\"}\r\n");
  ASSERT_TRUE(rm.ok());
  EXPECT_EQ(rm->op, ControlOp::tenant_remove);
  EXPECT_EQ(rm->tenant.id, "team-a");

  auto as = parse_request(R"({"op":"tenant_assign","pid":4194304,"tenant":"team-a"})");
  ASSERT_TRUE(as.ok());
  EXPECT_EQ(as->pid, 4194304U);
  EXPECT_EQ(as->assign_to, "team-a");

  EXPECT_EQ(parse_request(R"({"op":"tenant_list"})")->op, ControlOp::tenant_list);
  EXPECT_EQ(parse_request(R"( { "op" : "status" } )")->op, ControlOp::status);
}

TEST(ControlParse, trace_takes_seconds_from_1_to_600) {
  auto r = parse_request(R"({"op":"trace","seconds":3})");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->op, ControlOp::trace);
  EXPECT_EQ(r->seconds, 3U);
  EXPECT_NE(error_of(R"({"op":"trace","seconds":0})")
                .find("\"seconds\": must be an integer from 1 to 600"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"trace","seconds":601})").find("1 to 600"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"trace","seconds":2.5})").find("seconds"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"trace","seconds":-1})").find("seconds"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"trace"})").find("missing field \"seconds\""), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"trace","seconds":1,"pid":3})").find("unknown field \"pid\""),
            std::string::npos);
}

TEST(ControlParse, RoundTrip) {
  for (const char* line :
       {R"({"op":"tenant_add","id":"x","gpus":2,"class":"training","cpu_weight":0.5})",
        R"({"op":"tenant_add","id":"y","gpus":0,"class":"interactive"})",
        R"({"op":"tenant_remove","id":"x"})", R"({"op":"tenant_assign","pid":7,"tenant":"x"})",
        R"({"op":"tenant_list"})", R"({"op":"status"})", R"({"op":"trace","seconds":600})"}) {
    auto r = parse_request(line);
    ASSERT_TRUE(r.ok()) << line;
    auto again = parse_request(request_line(*r));
    ASSERT_TRUE(again.ok()) << request_line(*r);
    EXPECT_EQ(*again, *r) << line;
  }
}

TEST(ControlParse, Oversized) {
  std::string big = R"({"op":"status","pad":")" + std::string(kMaxRequestBytes, 'x') + "\"}";
  EXPECT_NE(error_of(big).find("larger than 4096 bytes"), std::string::npos);
  // Exactly at the limit is size-checked fine (and then rejected for its unknown field).
  std::string at = R"({"op":"status","p":")";
  at += std::string(kMaxRequestBytes - at.size() - 2, 'x') + "\"}";
  ASSERT_EQ(at.size(), kMaxRequestBytes);
  EXPECT_NE(error_of(at).find("unknown field \"p\""), std::string::npos);
}

TEST(ControlParse, Malformed) {
  EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"op\":\"status\"} trailing").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("must be a JSON object, got an array"), std::string::npos);
  EXPECT_NE(error_of("\"status\"").find("got a string"), std::string::npos);
  EXPECT_NE(error_of("{}").find("missing field \"op\""), std::string::npos);
  EXPECT_NE(error_of(R"({"op":1})").find("field \"op\": must be a string, got a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"reboot"})").find("unknown op \"reboot\""), std::string::npos);
  EXPECT_NE(error_of("{\"op\":\"status\"}\n{\"op\":\"status\"}").find("more than one line"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("{\"op\":\"status\"}\0", 16)).find("NUL"), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"status","extra":1})").find("unknown field \"extra\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a","gpus":1,"class":"training","x":0})")
                .find("unknown field \"x\" for op \"tenant_add\""),
            std::string::npos);
}

TEST(ControlParse, TenantAddFields) {
  EXPECT_NE(error_of(R"({"op":"tenant_add","gpus":1,"class":"training"})")
                .find("missing field \"id\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a","class":"training"})")
                .find("missing field \"gpus\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a","gpus":1})").find("missing field \"class\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":7,"gpus":1,"class":"training"})")
                .find("field \"id\": must be a string"),
            std::string::npos);
  for (const char* gpus : {"-1", "4097", "1.5", "2.0", "\"2\"", "true", "null", "1e30",
                           "18446744073709551616"}) {
    const std::string line = std::string(R"({"op":"tenant_add","id":"a","class":"training","gpus":)") +
                             gpus + "}";
    EXPECT_NE(error_of(line).find("field \"gpus\": must be an integer from 0 to 4096"),
              std::string::npos)
        << gpus;
  }
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a","gpus":1,"class":"bogus"})")
                .find("valid: training, inference, interactive, background"),
            std::string::npos);
  for (const char* w : {"0", "0.001", "100.5", "-1", "1e309"}) {
    const std::string line =
        std::string(R"({"op":"tenant_add","id":"a","gpus":1,"class":"training","cpu_weight":)") +
        w + "}";
    const std::string e = error_of(line);
    EXPECT_TRUE(e.find("cpu_weight") != std::string::npos || e.find("not valid JSON") != std::string::npos)
        << w << ": " << e;
  }
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a","gpus":1,"class":"training","cpu_weight":"2"})")
                .find("cpu_weight\": must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"","gpus":1,"class":"training"})")
                .find("id: must not be empty"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":"a b","gpus":1,"class":"training"})")
                .find("may contain only"),
            std::string::npos);
  const std::string long_id(policy::kMaxTenantIdLength + 1, 'a');
  EXPECT_NE(error_of(R"({"op":"tenant_add","id":")" + long_id + R"(","gpus":1,"class":"training"})")
                .find("longer than 128"),
            std::string::npos);
}

TEST(ControlParse, AssignAndRemoveFields) {
  for (const char* pid : {"0", "-5", "4194305", "1.0", "\"12\"", "null"}) {
    const std::string line = std::string(R"({"op":"tenant_assign","tenant":"a","pid":)") + pid + "}";
    EXPECT_NE(error_of(line).find("field \"pid\": must be an integer from 1 to 4194304"),
              std::string::npos)
        << pid;
  }
  EXPECT_NE(error_of(R"({"op":"tenant_assign","pid":5})").find("missing field \"tenant\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_assign","pid":5,"tenant":"a/b"})").find("field \"tenant\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_remove"})").find("missing field \"id\""), std::string::npos);
  EXPECT_NE(error_of(R"({"op":"tenant_remove","id":"x","gpus":1})").find("unknown field \"gpus\""),
            std::string::npos);
}

TEST(ControlServer, ServesAndRefusesLiveDuplicate) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zernel-control-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "ctl.sock").string();
  auto server = ControlServer::listen(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  auto dup = ControlServer::listen(path);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message().find("already listening"), std::string::npos);

  // The server is serviced on this thread between the client's send and its read: the client
  // uses a child process.
  const pid_t child = ::fork();
  if (child == 0) {
    auto r = control_call(path, R"({"op":"tenant_list"})", 3000);
    const bool good = r.ok() && (*r)["ok"] == true && (*r)["n"] == 3;
    auto bad = control_call(path, R"({"op":"nope"})", 3000);
    const bool bad_good = bad.ok() && (*bad)["ok"] == false;
    ::_exit(good && bad_good ? 0 : 1);
  }
  int handled = 0;
  for (int i = 0; i < 300 && handled < 2; ++i) {
    (*server)->service(
        [](const ControlRequest& req, ControlServer::Ticket) -> std::optional<nlohmann::json> {
          auto j = ok_reply();
          j["n"] = req.op == ControlOp::tenant_list ? 3 : 0;
          return j;
        },
        1);
    handled = static_cast<int>((*server)->requests());
    ::usleep(10'000);
  }
  for (int i = 0; i < 20; ++i) {
    (*server)->service(
        [](const ControlRequest&, ControlServer::Ticket) -> std::optional<nlohmann::json> {
          return ok_reply();
        },
        1);
    ::usleep(5'000);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  server = Error("closed");  // destroys the server: the socket file goes away
  EXPECT_FALSE(std::filesystem::exists(path));
  // A stale socket file (nothing listening) is replaced.
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ::close(fd);
  }
  auto again = ControlServer::listen(path);
  EXPECT_TRUE(again.ok()) << again.error().message();
  again = Error("closed");
  std::filesystem::remove_all(dir);
}

// A deferred request: the server keeps its client waiting, unanswered, while serving others;
// answer() replies; a waiting client that hangs up is closed (waiting() turns false).
TEST(ControlServer, deferred_request_is_answered_later_and_a_hang_up_ends_it) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zernel-control-defer-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "ctl.sock").string();
  auto server = ControlServer::listen(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  std::optional<ControlServer::Ticket> ticket;
  const ControlServer::Handler handler =
      [&ticket](const ControlRequest& req,
                ControlServer::Ticket who) -> std::optional<nlohmann::json> {
    if (req.op != ControlOp::trace) return ok_reply();
    ticket = who;
    return std::nullopt;
  };
  const auto serve_until = [&](auto done) {
    for (int i = 0; i < 500 && !done(); ++i) {
      (*server)->service(handler, 1);
      ::usleep(5'000);
    }
  };

  const pid_t child = ::fork();
  if (child == 0) {
    auto r = control_call(path, R"({"op":"trace","seconds":1})", 5000);
    ::_exit(r.ok() && (*r)["ok"] == true && (*r)["answer"] == 42 ? 0 : 1);
  }
  serve_until([&] { return ticket.has_value(); });
  ASSERT_TRUE(ticket.has_value());
  EXPECT_TRUE((*server)->waiting(*ticket));
  // Other requests are served meanwhile, and the expiry of ordinary clients spares it.
  (*server)->expire(ControlServer::kClientTimeoutNs + 10);
  EXPECT_TRUE((*server)->waiting(*ticket));
  auto reply = ok_reply();
  reply["answer"] = 42;
  (*server)->answer(*ticket, reply, 2);
  EXPECT_FALSE((*server)->waiting(*ticket));
  int status = 0;
  for (int i = 0; i < 400; ++i) {
    (*server)->service(handler, 2);
    if (::waitpid(child, &status, WNOHANG) == child) break;
    ::usleep(5'000);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  // A client that sends the request and closes: nothing waits any more.
  ticket.reset();
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    const std::string line = "{\"op\":\"trace\",\"seconds\":5}\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    serve_until([&] { return ticket.has_value(); });
    ASSERT_TRUE(ticket.has_value());
    // Shutting down only the sending side is not a hang-up: the answer is still awaited.
    ::shutdown(fd, SHUT_WR);
    for (int i = 0; i < 5; ++i) (*server)->service(handler, 3);
    EXPECT_TRUE((*server)->waiting(*ticket));
    ::close(fd);
  }
  serve_until([&] { return !(*server)->waiting(*ticket); });
  EXPECT_FALSE((*server)->waiting(*ticket));
  server = Error("closed");
  std::filesystem::remove_all(dir);
}

TEST(ControlClient, UnreachableDaemon) {
  auto r = control_call("/nonexistent-dir/zernel.sock", R"({"op":"status"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("cannot reach the daemon at /nonexistent-dir/zernel.sock"),
            std::string::npos);
}

}  // namespace
}  // namespace zernel::daemon

namespace zernel::daemon {
namespace {

TEST(AssignRefusal, init_kernel_threads_the_daemon_and_protected_daemons_are_refused) {
  const std::vector<std::string> protected_comms = {"systemd*", "sshd"};
  auto refuse = [&](AssignTarget t, bool host = true) {
    return assign_refusal(t, 4242, host, protected_comms);
  };
  EXPECT_NE(refuse({1, 0, 0, "systemd"})->find("init"), std::string::npos);
  EXPECT_NE(refuse({2, 0, 0x00200000, "kthreadd"})->find("kernel thread"), std::string::npos);
  EXPECT_NE(refuse({77, 2, 0x00208040, "kworker/0:1"})->find("kernel thread"), std::string::npos);
  EXPECT_NE(refuse({4242, 1, 0, "zernel-schedule"})->find("daemon itself"), std::string::npos);
  EXPECT_NE(refuse({500, 1, 0, "systemd-journal"})->find("protected"), std::string::npos);
  EXPECT_NE(refuse({501, 1, 0, "sshd"})->find("protected_comms"), std::string::npos);
  EXPECT_FALSE(refuse({502, 1, 0, "python3"}).has_value());
  // In a container's pid namespace pid 2 is an ordinary process.
  EXPECT_FALSE(refuse({2, 1, 0, "python3"}, false).has_value());
}

}  // namespace
}  // namespace zernel::daemon

#include "telemetry/http_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>

#include "telemetry/prometheus.hpp"
#include "telemetry/status_json.hpp"

namespace zernel::telemetry {

namespace {
std::atomic<std::uint64_t> g_requests{0};  // diagnostics only
}

void SnapshotStore::publish(Snapshot s) {
  auto next = std::make_shared<const Snapshot>(std::move(s));
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = std::move(next);
}

std::shared_ptr<const Snapshot> SnapshotStore::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

HttpServer::HttpServer(const SnapshotStore& store) : store_(store) {}

HttpServer::~HttpServer() { stop(); }

Result<void> HttpServer::start(const std::string& address, std::uint16_t port) {
  if (server_) return Error(EBUSY, "HTTP server already started");
  auto server = std::make_unique<httplib::Server>();
  server->set_keep_alive_max_count(16);
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  server->set_payload_max_length(64 * 1024);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second daemon
  // bind the same port and silently take half of the scrapes.
  server->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    ++g_requests;
    res.set_content(render_prometheus(*store_.latest()), "text/plain; version=0.0.4; charset=utf-8");
  });
  server->Get("/status", [this](const httplib::Request&, httplib::Response& res) {
    ++g_requests;
    res.set_content(status_json(*store_.latest()).dump(2) + "\n", "application/json");
  });
  server->Get("/", [](const httplib::Request&, httplib::Response& res) {
    ++g_requests;
    res.set_content("zernel-scheduler: GET /metrics (Prometheus) or /status (JSON)\n", "text/plain");
  });
  server->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("not found: try /metrics or /status\n", "text/plain");
  });

  int bound = 0;
  if (port == 0) {
    bound = server->bind_to_any_port(address);
  } else {
    bound = server->bind_to_port(address, port) ? port : -1;
  }
  if (bound <= 0) {
    return Error(EADDRINUSE, "HTTP: cannot listen on " + address + ":" + std::to_string(port) +
                                 " (address in use, or not an address of this machine)");
  }
  port_ = static_cast<std::uint16_t>(bound);
  server_ = std::move(server);
  thread_ = std::thread([s = server_.get()] { s->listen_after_bind(); });
  // stop() only ends a server that is already running: wait for the accept loop (bounded), so a
  // start() immediately followed by stop() cannot leave the thread listening forever.
  for (int i = 0; i < 2000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Ok{};
}

void HttpServer::stop() {
  if (!server_) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

std::uint64_t HttpServer::requests() const { return g_requests.load(); }

}  // namespace zernel::telemetry

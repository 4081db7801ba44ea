#pragma once
// The daemon's HTTP endpoint on <metrics_address>:<metrics_port> (127.0.0.1:9093 by default):
//   GET /metrics   Prometheus text exposition (telemetry/prometheus.hpp)
//   GET /status    JSON (telemetry/status_json.hpp)
// The daemon publishes one Snapshot per tick into a SnapshotStore; the server's threads only read
// the latest one, so a slow or hostile client never touches the engine or delays a tick.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.hpp"
#include "telemetry/snapshot.hpp"

namespace httplib {
class Server;
}

namespace zernel::telemetry {

class SnapshotStore {
 public:
  void publish(Snapshot s);
  // The latest snapshot (an empty one before the first publish).
  [[nodiscard]] std::shared_ptr<const Snapshot> latest() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const Snapshot> latest_ = std::make_shared<const Snapshot>();
};

class HttpServer {
 public:
  explicit HttpServer(const SnapshotStore& store);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread. Port 0 picks a free port (see port()).
  Result<void> start(const std::string& address, std::uint16_t port);
  void stop();
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::uint64_t requests() const;

 private:
  const SnapshotStore& store_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

}  // namespace zernel::telemetry

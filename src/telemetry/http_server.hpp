#pragma once
// The daemon's HTTP endpoint on <metrics_address>:<metrics_port> (127.0.0.1:9093 by default):
//   GET /metrics   Prometheus text exposition (telemetry/prometheus.hpp)
//   GET /status    JSON (telemetry/status_json.hpp)
// The daemon publishes one Snapshot per tick into a SnapshotStore; the server only reads the
// latest one, so a slow or hostile client never touches the engine or delays a tick.
//
// Why a small server of our own and not cpp-httplib (docs/operations.md, "The HTTP endpoint"):
// every local user can reach this port, and a thread-per-connection server with per-read
// timeouts is shut off by a handful of slow or idle connections (each holds one of its threads),
// has no whole-request deadline, no cap on the number of headers (2 million headers per request
// took the daemon to 1 GB) nor on connections (1,025 idle ones exhausted the daemon's descriptors
// and blinded process discovery), and sends exception text to clients. We serve two GET paths:
// one thread, one epoll set, non-blocking sockets, and every resource bounded:
//   - at most max_connections connections, max_per_peer from one address. The listening
//     socket defers accept until a connection's first data (TCP_DEFER_ACCEPT), and a request
//     that arrives with its connection is served at accept, before the connection needs a slot
//     (on loopback every local user shares 127.0.0.1: this, not the per-peer cap, keeps a
//     scraper served while an attacker holds the table); otherwise, when full, a connection is
//     evicted: one that has sent nothing before one that has, the longest waiting first;
//   - a request head (request line and headers) must be complete within head_deadline_ms of the
//     connection's accept (or of its first byte, after a kept-alive response), must fit in
//     max_head_bytes and max_headers; a kept-alive connection idle for idle_timeout_ms is closed;
//     a response must be taken by the client within write_deadline_ms;
//   - a connection with a response pending is not read (pipelined requests wait in the kernel's
//     socket buffer), and the bodies of /metrics and /status are rendered once per snapshot and
//     shared by every connection (/metrics ends with the server's own counters, a few hundred
//     bytes written per request), so memory per connection is its head buffer, a response head
//     and those counters;
//   - a malformed request, a body, or any method but GET/HEAD is answered with a short fixed
//     error (telemetry/http_request.hpp is the parser); no internal error text reaches a client;
//   - after a connection's last response (an error, Connection: close, the request cap) its
//     writing side is shut and what the client still sends is read and dropped until it closes,
//     for at most 2 s and 1 MiB (a lingering close): closing with unread input would send a
//     reset, which can destroy the response in flight and fails a client that is still sending.
//     A lingering connection is the first evicted when the table is full;
//   - out of descriptors (EMFILE), accepting pauses for 100 ms instead of spinning.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.hpp"
#include "telemetry/snapshot.hpp"

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

struct HttpLimits {
  std::uint32_t max_connections = 256;
  std::uint32_t max_per_peer = 128;
  std::uint32_t max_head_bytes = 8192;
  std::uint32_t max_headers = 64;
  std::uint32_t head_deadline_ms = 3000;
  std::uint32_t idle_timeout_ms = 15000;
  std::uint32_t write_deadline_ms = 10000;
  std::uint32_t max_requests_per_connection = 1000;
};

// Why the server closed connections (counted, exposed on /metrics).
enum class HttpClose : std::uint8_t {
  deadline,       // request head not complete in time (slowloris)
  idle,           // kept-alive connection idle too long
  evicted,        // made room for a new connection
  refused,        // no room and nothing to evict
  malformed,      // not a request we serve: 400/405/413/431 sent
  write_timeout,  // the client did not take its response
  nr,
};
std::string_view close_reason_label(HttpClose r);

struct HttpStats {
  std::uint64_t requests = 0;
  std::uint64_t open_connections = 0;
  std::array<std::uint64_t, static_cast<std::size_t>(HttpClose::nr)> closed{};
};

class HttpServer {
 public:
  explicit HttpServer(const SnapshotStore& store, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread. Port 0 picks a free port (see port()).
  Result<void> start(const std::string& address, std::uint16_t port);
  void stop();
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::uint64_t requests() const;
  [[nodiscard]] HttpStats stats() const;
  [[nodiscard]] const HttpLimits& limits() const { return limits_; }

  class Loop;  // http_server.cpp

 private:
  const SnapshotStore& store_;
  HttpLimits limits_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

}  // namespace zernel::telemetry

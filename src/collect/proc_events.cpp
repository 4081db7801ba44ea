#include "collect/proc_events.hpp"

#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

namespace zernel::collect {
namespace {

// linux/cn_proc.h's ABI, written out: distributions' headers differ (older ones nest the enum in
// struct proc_event and lack struct proc_input), the layout does not.
constexpr std::uint32_t kListen = 1;  // PROC_CN_MCAST_LISTEN
constexpr std::uint32_t kIgnore = 2;  // PROC_CN_MCAST_IGNORE
constexpr std::uint32_t kNone = 0x00000000;
constexpr std::uint32_t kFork = 0x00000001;
constexpr std::uint32_t kExec = 0x00000002;
constexpr std::uint32_t kUid = 0x00000004;
constexpr std::uint32_t kComm = 0x00000200;
constexpr std::uint32_t kExit = 0x80000000;
// struct proc_event: what (u32), cpu (u32), timestamp_ns (u64), then the union (24 bytes at most:
// fork's parent_pid, parent_tgid, child_pid, child_tgid; exec's, comm's, uid's and exit's
// process_pid, process_tgid first; ack's err).
constexpr std::size_t kWhat = 0;
constexpr std::size_t kTimestamp = 8;
constexpr std::size_t kData = 16;
constexpr std::size_t kEventBytes = 40;
// The 6.6+ subscription with an event filter (struct proc_input); older kernels take the bare
// operation.
struct ProcInput {
  std::uint32_t mcast_op;
  std::uint32_t event_type;
};
constexpr std::uint32_t kWanted = kFork | kExec | kExit | kComm | kUid;
constexpr int kReceiveBuffer = 8 << 20;
constexpr std::uint64_t kAckWaitMs = 500;

// A datagram holds one message: the netlink header, the connector header, the event.
constexpr std::size_t kDatagramBytes = 256;
constexpr unsigned kBatch = 64;

template <typename T>
T load(const std::byte* p) {
  T v{};
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A request to the connector's process events: netlink header, connector header, `len` bytes of
// data. Returns its length.
std::size_t request(std::array<std::byte, kDatagramBytes>& buf, std::uint32_t seq, const void* data,
                    std::size_t len) {
  nlmsghdr nh{};
  nh.nlmsg_len = static_cast<std::uint32_t>(NLMSG_HDRLEN + sizeof(cn_msg) + len);
  nh.nlmsg_type = NLMSG_DONE;
  cn_msg cn{};
  cn.id = {CN_IDX_PROC, CN_VAL_PROC};
  cn.seq = seq;
  cn.ack = seq;
  cn.len = static_cast<std::uint16_t>(len);
  std::memcpy(buf.data(), &nh, sizeof nh);
  std::memcpy(buf.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  std::memcpy(buf.data() + NLMSG_HDRLEN + sizeof cn, data, len);
  return nh.nlmsg_len;
}

}  // namespace

void RecentSpawns::roll(std::uint64_t now_ns) {
  if (now_ns < bucket_start_ns_) return;
  if (now_ns - bucket_start_ns_ >= 2 * kChurnBucketNs) {
    short_exits_[0] = short_exits_[1] = 0;
    bucket_start_ns_ = now_ns;
  } else if (now_ns - bucket_start_ns_ >= kChurnBucketNs) {
    short_exits_[1] = short_exits_[0];
    short_exits_[0] = 0;
    bucket_start_ns_ += kChurnBucketNs;
  }
}

void RecentSpawns::apply(std::span<const ProcEvent> events, std::uint64_t now_ns) {
  roll(now_ns);
  for (const ProcEvent& e : events) {
    // The event's own time (the kernel's CLOCK_MONOTONIC stamp), so that a lifetime is the
    // process's, not a multiple of the tick; never later than now_ns (0 in tests: now_ns).
    const std::uint64_t at = e.t_ns != 0 ? std::min(e.t_ns, now_ns) : now_ns;
    if (e.kind == ProcEventKind::exit) {
      if (auto it = since_.find(e.pid); it != since_.end()) {
        if (at < it->second + min_age_ns_ && short_exits_[0] < UINT32_MAX) ++short_exits_[0];
        since_.erase(it);
      }
    } else if (e.kind == ProcEventKind::fork || e.kind == ProcEventKind::exec) {
      if (e.kind == ProcEventKind::fork && e.ppid == kKthreadd) continue;  // a kernel thread
      if (since_.size() < capacity_ || since_.contains(e.pid)) {
        since_[e.pid] = at;
      } else {
        overflow_until_ns_ = now_ns + window_ns_;
      }
    }
  }
}

bool RecentSpawns::any(std::uint64_t now_ns) {
  roll(now_ns);
  std::erase_if(since_, [&](const auto& p) { return now_ns >= p.second + window_ns_; });
  if (now_ns < overflow_until_ns_) return true;
  const std::uint64_t min_age = churning() ? min_age_ns_ : 0;
  return std::any_of(since_.begin(), since_.end(),
                     [&](const auto& p) { return now_ns >= p.second + min_age; });
}

bool parse_proc_event(std::span<const std::byte> d, std::vector<ProcEvent>& out) {
  if (d.size() < NLMSG_HDRLEN + sizeof(cn_msg)) return false;
  const auto nh = load<nlmsghdr>(d.data());
  if (nh.nlmsg_len < NLMSG_HDRLEN + sizeof(cn_msg) || nh.nlmsg_len > d.size()) return false;
  const std::byte* cp = d.data() + NLMSG_HDRLEN;
  const auto cn = load<cn_msg>(cp);
  if (cn.id.idx != CN_IDX_PROC || cn.id.val != CN_VAL_PROC) return false;
  if (cn.len > nh.nlmsg_len - NLMSG_HDRLEN - sizeof(cn_msg)) return false;
  if (cn.len < kData + 2 * sizeof(std::int32_t)) return false;
  const std::byte* ep = cp + sizeof(cn_msg);
  const auto what = load<std::uint32_t>(ep + kWhat);
  const std::size_t room = cn.len - kData;
  auto i32 = [&](std::size_t index) {
    return load<std::int32_t>(ep + kData + index * sizeof(std::int32_t));
  };
  ProcEvent e;
  e.t_ns = load<std::uint64_t>(ep + kTimestamp);
  switch (what) {
    case kFork: {
      if (room < 4 * sizeof(std::int32_t)) return false;
      if (i32(2) != i32(3)) return true;  // child_pid != child_tgid: a new thread, not a process
      e.kind = ProcEventKind::fork;
      e.pid = e.tid = static_cast<std::uint32_t>(i32(3));
      e.ppid = static_cast<std::uint32_t>(i32(1));  // parent_tgid
      break;
    }
    case kExec:
      e.kind = ProcEventKind::exec;
      e.pid = e.tid = static_cast<std::uint32_t>(i32(1));
      break;
    case kExit:
      e.kind = i32(0) == i32(1) ? ProcEventKind::exit : ProcEventKind::thread_exit;
      e.pid = static_cast<std::uint32_t>(i32(1));
      e.tid = static_cast<std::uint32_t>(i32(0));
      break;
    case kComm:
    case kUid:
      if (i32(0) != i32(1)) return true;  // another thread's name or credentials
      e.kind = what == kComm ? ProcEventKind::comm : ProcEventKind::uid;
      e.pid = e.tid = static_cast<std::uint32_t>(i32(1));
      break;
    default:
      return true;  // a kind the daemon does not use (or an acknowledgement)
  }
  if (e.pid == 0) return false;
  out.push_back(e);
  return true;
}

ProcEvents::~ProcEvents() {
  if (!fd_.valid()) return;
  // Unsubscribing makes the kernel stop building events for us at once (it counts listeners).
  std::array<std::byte, kDatagramBytes> msg{};
  const std::size_t n = request(msg, ++seq_, &kIgnore, sizeof kIgnore);
  (void)::send(fd_.get(), msg.data(), n, MSG_DONTWAIT);
}

Result<std::unique_ptr<ProcEvents>> ProcEvents::open() {
  sys::UniqueFd fd(
      ::socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR));
  if (!fd.valid()) return errno_error("process events: netlink connector socket");
  // Root may exceed net.core.rmem_max; otherwise the plain request (capped by it).
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &kReceiveBuffer, sizeof kReceiveBuffer) !=
      0) {
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &kReceiveBuffer, sizeof kReceiveBuffer);
  }
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = CN_IDX_PROC;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return errno_error("process events: binding the connector's process group");
  }
  std::unique_ptr<ProcEvents> pe(new ProcEvents(std::move(fd)));
  if (auto r = pe->subscribe(); !r) return r.error();
  return pe;
}

// Sends the subscription (with the filter first, then without for kernels before 6.6) and waits
// for the kernel's acknowledgement.
Result<void> ProcEvents::subscribe() {
  const auto wait_ack = [this](std::uint32_t seq) -> std::optional<int> {
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    std::array<std::byte, kDatagramBytes> buf{};
    for (;;) {
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const auto spent_ms = static_cast<std::uint64_t>((now.tv_sec - start.tv_sec) * 1000 +
                                                       (now.tv_nsec - start.tv_nsec) / 1'000'000);
      if (spent_ms >= kAckWaitMs) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(kAckWaitMs - spent_ms)) <= 0) continue;
      const ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < static_cast<ssize_t>(NLMSG_HDRLEN + sizeof(cn_msg) + kEventBytes)) continue;
      const auto cn = load<cn_msg>(buf.data() + NLMSG_HDRLEN);
      const std::byte* ep = buf.data() + NLMSG_HDRLEN + sizeof(cn_msg);
      if (load<std::uint32_t>(ep + kWhat) != kNone) continue;
      if (cn.ack != seq + 1) continue;  // the kernel acknowledges with seq + 1
      // event_data.ack.err, the union's first field: 0 or an errno value.
      return static_cast<int>(load<std::uint32_t>(ep + kData));
    }
  };
  for (const bool with_filter : {true, false}) {
    const ProcInput in{kListen, kWanted};
    std::array<std::byte, kDatagramBytes> msg{};
    const std::size_t n = request(msg, ++seq_, &in, with_filter ? sizeof in : sizeof in.mcast_op);
    if (::send(fd_.get(), msg.data(), n, 0) < 0) {
      if (errno == ECONNREFUSED) {
        return Error(ECONNREFUSED,
                     "process events: the kernel's connector is only in the host's network "
                     "namespace (a pod needs hostNetwork)");
      }
      return errno_error("process events: subscribing");
    }
    const std::optional<int> err = wait_ack(seq_);
    if (!err) continue;  // ignored: try the form without the filter
    if (*err != 0) {
      return Error(*err, *err == EPERM ? "process events: subscribing needs CAP_NET_ADMIN"
                                       : "process events: the kernel refused the subscription");
    }
    filtered_ = with_filter;
    return Ok{};
  }
  return Error(EPERM,
               "process events: the kernel does not answer (outside the initial pid or user "
               "namespace?)");
}

bool ProcEvents::drain(std::vector<ProcEvent>& out) {
  bool complete = true;
  std::array<std::array<std::byte, kDatagramBytes>, kBatch> bufs{};
  std::array<iovec, kBatch> iov{};
  std::array<sockaddr_nl, kBatch> from{};
  std::array<mmsghdr, kBatch> msgs{};
  for (;;) {
    for (unsigned i = 0; i < kBatch; ++i) {
      iov[i] = {bufs[i].data(), bufs[i].size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_nl);
    }
    const int n = ::recvmmsg(fd_.get(), msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // the kernel dropped events; the buffer still holds later ones
        complete = false;
        ++stats_.overflows;
        continue;
      }
      break;  // EAGAIN: nothing more
    }
    for (int i = 0; i < n; ++i) {
      ++stats_.datagrams;
      const std::size_t before = out.size();
      if (from[static_cast<std::size_t>(i)].nl_pid != 0 ||
          !parse_proc_event(std::span(bufs[static_cast<std::size_t>(i)].data(),
                                      msgs[static_cast<std::size_t>(i)].msg_len),
                            out)) {
        ++stats_.ignored;
        out.resize(before);
        continue;
      }
      stats_.events += out.size() - before;
    }
    if (static_cast<unsigned>(n) < kBatch) break;
  }
  return complete;
}

}  // namespace zernel::collect

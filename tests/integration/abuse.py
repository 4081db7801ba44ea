#!/usr/bin/env python3
"""Attacks on the daemon's HTTP port as a local user could make them (issue 11), while /metrics
and /status are scraped every 200 ms. Used by tests/integration/http_abuse_test.sh and
bench/abuse_soak.sh.

  abuse.py --port P --pid PID --duration S ATTACK[:N] ...

ATTACKs (N: connections or clients):
  slowloris:N  N connections sending one byte of a request head every 4 s
  idle:N       N connections that send nothing
  headers:N    N clients sending a request with an endless stream of headers (2 million each)
  malformed:N  N clients sending garbage requests back to back; each must be closed at once
  pipeline:N   N clients sending two pipelined requests; both answers must come at once
  flood:N      N connections opened and held (descriptor exhaustion)

Prints one JSON object: probes, probe_failures, probe_max_s, probe_p99_s, rss_max_kb,
ticks_start/ticks_end (the decision-latency histogram count, one per tick), discovery_errors
start/end, and per attack: its counters (malformed_slow: answers that took over 1 s,
pipeline_slow: pipelined pairs over 1 s).
"""
import argparse
import json
import os
import resource
import select
import socket
import threading
import time

STOP = threading.Event()
LOCK = threading.Lock()
COUNTS = {}


def bump(key, n=1):
    with LOCK:
        COUNTS[key] = COUNTS.get(key, 0) + n


def connect(port, timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def scrape(port, path):
    """(seconds, body) of one GET, or (None, None) on failure/timeout (1 s); failures are
    counted by kind (probe_fail_connect, _reset, _timeout, _status)."""
    t0 = time.monotonic()
    try:
        try:
            s = connect(port, 1.0)
        except OSError:
            bump("probe_fail_connect")
            raise
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while time.monotonic() - t0 < 1.0:
            s.settimeout(max(0.01, 1.0 - (time.monotonic() - t0)))
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        dt = time.monotonic() - t0
        if dt >= 1.0:
            bump("probe_fail_timeout")
            return None, None
        if not data.startswith(b"HTTP/1.1 200"):
            bump("probe_fail_status" if data else "probe_fail_closed_empty")
            return None, None
        return dt, data.split(b"\r\n\r\n", 1)[1]
    except socket.timeout:
        bump("probe_fail_timeout")
        return None, None
    except ConnectionResetError:
        bump("probe_fail_reset")
        return None, None
    except OSError:
        return None, None


def metric(body, name):
    if body is None:
        return None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def held(port, n, key, head, trickle):
    """n connections kept open (reopened when the server closes them); `head` is sent at
    connect, then one byte every 4 s when `trickle`."""
    socks = []
    last = 0.0
    while not STOP.is_set():
        while len(socks) < n and not STOP.is_set():
            try:
                s = connect(port)
                s.setblocking(False)
                if head:
                    s.send(head)
                socks.append(s)
                bump(key + "_opened")
            except OSError:
                bump(key + "_connect_errors")
                time.sleep(0.05)
                break
        poller = select.poll()
        by_fd = {s.fileno(): s for s in socks}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        ready = poller.poll(200) if socks else []
        for fd, _ in ready:
            s = by_fd[fd]
            try:
                if s.recv(4096):
                    continue
            except OSError:
                pass
            bump(key + "_closed_by_server")
            socks.remove(s)
            s.close()
        if trickle and time.monotonic() - last >= 4.0:
            last = time.monotonic()
            for s in list(socks):
                try:
                    s.send(b"X")
                except OSError:
                    socks.remove(s)
                    s.close()
        if not socks:
            time.sleep(0.05)
    for s in socks:
        s.close()


def headers_client(port):
    chunk = b"X-Header: y\r\n" * 5000
    while not STOP.is_set():
        s = None
        try:
            s = connect(port)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            sent = 0
            while sent < 2_000_000 and not STOP.is_set():
                s.sendall(chunk)
                sent += 5000
            if sent >= 2_000_000:
                bump("headers_completed_unclosed")
        except OSError:
            bump("headers_cut_off")
        finally:
            if s is not None:
                s.close()


def malformed_client(port):
    bad = [b"GARBAGE\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n", b"\x00\xff\xfe\r\n\r\n",
           b"GET /metrics HTTP/1.1\r\n folded\r\n\r\n", b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"]
    i = 0
    while not STOP.is_set():
        t0 = time.monotonic()
        try:
            s = connect(port)
            s.sendall(bad[i % len(bad)])
            data = b""
            while True:
                c = s.recv(4096)
                if not c:
                    break
                data += c
            s.close()
            if b"EXCEPTION" in data or b"what()" in data:
                bump("malformed_leaked_error_text")
            bump("malformed_answered")
        except OSError:
            bump("malformed_errors")
        if time.monotonic() - t0 > 1.0:
            bump("malformed_slow")
        i += 1
        time.sleep(0.01)


def pipeline_client(port):
    while not STOP.is_set():
        t0 = time.monotonic()
        try:
            s = connect(port)
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\nGET /status HTTP/1.1\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                data += c
            s.close()
            if data.count(b"HTTP/1.1 200") == 2:
                bump("pipeline_ok")
            else:
                bump("pipeline_incomplete")
        except OSError:
            bump("pipeline_errors")
        if time.monotonic() - t0 > 1.0:
            bump("pipeline_slow")
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("attacks", nargs="*")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    _, body = scrape(a.port, "/metrics")
    ticks_start = metric(body, "zernel_scheduler_decision_latency_seconds_count")
    disc_start = metric(body, 'zernel_scheduler_collector_errors_total{collector="discovery"}') or 0.0

    threads = []
    for spec in a.attacks:
        kind, _, n = spec.partition(":")
        n = int(n or 1)
        if kind == "slowloris":
            threads.append(threading.Thread(target=held, args=(a.port, n, kind, b"GET /metrics HTTP/1.1\r\n", True)))
        elif kind == "idle":
            threads.append(threading.Thread(target=held, args=(a.port, n, kind, b"", False)))
        elif kind == "flood":
            threads.append(threading.Thread(target=held, args=(a.port, n, kind, b"", False)))
        elif kind == "headers":
            threads += [threading.Thread(target=headers_client, args=(a.port,)) for _ in range(n)]
        elif kind == "malformed":
            threads += [threading.Thread(target=malformed_client, args=(a.port,)) for _ in range(n)]
        elif kind == "pipeline":
            threads += [threading.Thread(target=pipeline_client, args=(a.port,)) for _ in range(n)]
        else:
            raise SystemExit(f"unknown attack {kind}")
    # The attacks run in a child process: the scrapes below must not wait for the attack
    # threads' turn at the interpreter lock (that would count the prober's own stalls).
    rfd, wfd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(rfd)
        for t in threads:
            t.daemon = True
            t.start()
        time.sleep(a.duration + 0.3)
        STOP.set()
        for t in threads:
            t.join(timeout=5)
        with LOCK:
            os.write(wfd, json.dumps(COUNTS).encode())
        os._exit(0)
    os.close(wfd)

    lat = []
    failures = 0
    rss_max = rss_kb(a.pid)
    end = time.monotonic() + a.duration
    time.sleep(min(1.0, a.duration / 4))  # let the attacks take hold
    while time.monotonic() < end:
        for path in ("/metrics", "/status"):
            dt, _ = scrape(a.port, path)
            if dt is None:
                failures += 1
            else:
                lat.append(dt)
        rss_max = max(rss_max, rss_kb(a.pid))
        time.sleep(0.2)
    _, body = scrape(a.port, "/metrics")
    child_counts = b""
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        child_counts += chunk
    os.waitpid(child, 0)
    if child_counts:
        for k, v in json.loads(child_counts).items():
            bump(k, v)
    lat.sort()
    out = {
        "probes": len(lat) + failures,
        "probe_failures": failures,
        "probe_max_s": round(lat[-1], 4) if lat else None,
        "probe_p99_s": round(lat[int(len(lat) * 0.99) - 1], 4) if lat else None,
        "rss_max_kb": rss_max,
        "ticks_start": ticks_start,
        "ticks_end": metric(body, "zernel_scheduler_decision_latency_seconds_count"),
        "discovery_errors_start": disc_start,
        "discovery_errors_end": metric(body, 'zernel_scheduler_collector_errors_total{collector="discovery"}') or 0.0,
        "http_connections_end": metric(body, "zernel_scheduler_http_connections"),
    }
    for r in ("deadline", "idle", "evicted", "refused", "malformed", "write_timeout"):
        out["http_closed_" + r] = metric(body, f'zernel_scheduler_http_closed_total{{reason="{r}"}}')
    out.update(COUNTS)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()

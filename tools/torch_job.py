#!/usr/bin/env python3
"""A real PyTorch training loop, on the emulated GPU or a real one, with a per-thread truth log.

    tools/torch_job.py [--device emulated|cuda] [--libcuda PATH] [--steps N] [--gpu-ms MS]
                       [--item-ms MS] [--workers N] [--hidden N] [--batch N] [--pin-memory]
                       [--helpers] [--nccl-ms MS] [--checkpoint-every N] [--truth-log PATH]
                       [--profile PATH [--profile-after FILE]]

What runs:
  * a torch.utils.data.DataLoader with --workers worker processes (forked, persistent); its
    dataset makes one batch per index with real CPU work in torch (a random matrix squared
    again and again until --item-ms of the worker's CPU time is spent), then normalises it;
  * an MLP (256 -> 3 x --hidden -> 10) trained with AdamW on batches of --batch;
  * --device emulated (default; Debian's python3-torch, CPU build): "GPU work" through the CUDA
    driver API of the emulated driver, loaded with ctypes from --libcuda: cuInit, a primary
    context on device 0, a stream, zfgEnqueueWork(stream, --gpu-ms) and the blocking
    cuStreamSynchronize (what the scheduler's uprobes see); forward, loss and backward run on the
    CPU while the "GPU" works, then optimizer.step() on the CPU. The context makes the fake NVML
    list the main process as a GPU process; the workers, forked before it exists, hold none.
  * --device cuda (a CUDA build of PyTorch and a GPU): the model on cuda:0, each batch copied
    with non_blocking=True, forward and backward on the GPU, torch.cuda.synchronize() once a
    step, AdamW's step on the GPU. --gpu-ms is not used: the GPU time is the model's (--hidden,
    --batch).
  * --pin-memory: pin_memory=True. With CUDA, PyTorch's own pinning. The CPU build refuses to pin
    (it needs CUDA), so there the pin-memory thread is emulated: the DataLoader is made to start
    its pin-memory thread as with CUDA (torch.cuda.current_device is answered 0 while the
    iterator starts), and the thread copies each batch into fresh memory instead of page-locked
    memory. Either way the thread is this script's loop (the shape of PyTorch's: take a batch
    from the workers' queue with a timeout, pin it, put it on a queue.Queue for the main
    thread), so that its truth is known; the main thread then waits for a batch in
    queue.Queue.get (a futex), not in a read or poll of the workers' pipe.
  * --helpers: the other threads of a real training process, each doing real work:
      reader       blocked in read() on a pipe, then hashing what it read (sha256): the bytes of
                   each checkpoint, which the checkpoint writer sends it;
      checkpoint   waits on a threading.Event (a futex) for the main thread's signal every
                   --checkpoint-every steps, copies the model's state, torch.save()s it, writes
                   it to a file with fsync (block I/O) and into the reader's pipe;
      logger       sleeps 50 ms (clock_nanosleep), appends a line, compresses its buffer (zlib);
      metrics      waits in epoll (selectors) on a socket the main thread writes a byte to at
                   every step's end, then renders and compresses the step's figures into a file;
      nccl_proxy   an NCCL-like proxy thread: idles in a futex wait on a word of its shared
                   segment /dev/shm/nccl-torchjob-<pid>-*, as the synthetic workload's barrier
                   waits; when the main thread posts a collective (right after it queues the
                   step's forward, as DDP's buckets are posted during backward) it progresses it
                   for --nccl-ms (hashing bursts between 1 ms futex waits on the segment), marks
                   it done and wakes the main thread, which waits for it after its sync only if
                   it is not done yet.

Truth log (--truth-log, appended to): JSON lines in the format of zernel-scheduler's
--phase-log-threads, {"t_ns": CLOCK_MONOTONIC ns, "pid", "tid", "phase", "role"}, each written
with one write() to a file opened O_APPEND; a thread writes a line when it starts, at every change
of its phase, and when it ends (that line may repeat the phase).
  main (tid == pid)  Unknown at start; DataLoading while it waits for the next batch (a wait
                 under 1 ms is not logged: the batch was ready); GpuCompute from the batch's
                 arrival (the launches, or on the emulated GPU the enqueue) to the return of the
                 sync; NcclCollective while it waits for the proxy's collective; OptimizerStep
                 during optimizer.step() and zero_grad(); Unknown at the end.
  worker         a worker process's thread: Unknown when it starts, DataLoading while it makes a
                 batch, Unknown while idle.
  pin_memory     DataLoading from when a batch is taken off the workers' queue until it is on the
                 main thread's queue; Unknown while it waits for one.
  nccl_proxy     NcclCollective from the moment it sees a posted collective until it is done;
                 Unknown while idle.
  reader, checkpoint, logger, metrics, other: Unknown all their life (no phase: they should be
                 scheduled as the process's default). "other" are the threads the job did not
                 start itself (Python's queue feeder threads, torch's and the driver's threads),
                 found in /proc/PID/task of the main process and the workers at the end, from
                 their start time (10 ms resolution) to then, with their "name" (comm).
Profile (--profile PATH): torch.profiler (CPU activity) records three steps from the middle of the
run (with --profile-after FILE: from the first step that starts once FILE exists, so that a
`zernel-scheduler trace` started first covers them) and exports them with export_chrome_trace
to PATH; the JSON line gives the wall clock (us since the epoch) just before the profiler started
and just after it stopped ("profile": {"start_us", "end_us"}), which tools/trace_merge.py
--pytorch-start-us needs for a PyTorch built without Kineto (Debian's: its trace is stamped from
the profiler's start).
Prints one JSON line at the end: steps, pids and tids, and mean/p50 step, data wait, GPU and
optimizer times. Exit status: 0 done, 1 the driver, torch or a helper failed, 2 bad arguments.
"""
import argparse
import contextlib
import ctypes
import hashlib
import io
import json
import mmap
import os
import queue
import selectors
import socket
import sys
import tempfile
import threading
import time
import zlib

try:
    import torch
    import torch.utils.data._utils.pin_memory as torch_pin
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    print("torch_job.py: needs python3-torch (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(1)

PIN_TIMEOUT_S = 5.0  # PyTorch's MP_STATUS_CHECK_INTERVAL: how long the pin loop waits per get/put


class TruthLog:
    """Appends the phase changes of this process's threads; a no-op without a path. Opened per
    process (the workers open their own after the fork); never writes the same phase twice in a
    row for one thread, except its closing line."""

    def __init__(self, path):
        self.path = path
        self.fd = -1
        self.pid = 0
        self.threads = {}  # tid -> [role, phase]
        self.lock = threading.Lock()

    def open_here(self):
        if self.path and self.pid != os.getpid():
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self.fd = os.open(self.path, flags, 0o644)
            self.pid = os.getpid()
            self.threads = {}

    def write(self, t, tid, phase, role, name=None):
        if self.fd < 0:
            return
        extra = "" if name is None else f', "name": {json.dumps(name)}'
        os.write(self.fd, (f'{{"t_ns": {t}, "pid": {self.pid}, "tid": {tid}, "phase": "{phase}",'
                           f' "role": "{role}"{extra}}}\n').encode())

    def mark(self, phase, t_ns=None, role=None):
        """The calling thread is in `phase` from t_ns (default now); its first call names its
        role."""
        tid = threading.get_native_id()
        with self.lock:
            st = self.threads.setdefault(tid, [role or "other", None])
            if st[1] == phase:
                return
            st[1] = phase
        self.write(time.monotonic_ns() if t_ns is None else t_ns, tid, phase, st[0])

    def end(self):
        """The calling thread's closing line (its phase now, written even if unchanged)."""
        tid = threading.get_native_id()
        with self.lock:
            st = self.threads.get(tid)
        if st is not None:
            self.write(time.monotonic_ns(), tid, st[1], st[0])

    def known(self):
        with self.lock:
            return set(self.threads)

    def census(self, pids, known, names):
        """Lines for the threads of `pids` the log does not know (`known`: (pid, tid) pairs):
        role "other", Unknown from their start to now, named by `names` (tid -> Python's thread
        name) or their comm."""
        if self.fd < 0:
            return 0
        hz = os.sysconf("SC_CLK_TCK")
        now = time.monotonic_ns()
        boot_offset = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - now
        n = 0
        for pid in pids:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in sorted(tids):
                if (pid, tid) in known:
                    continue
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue  # exited meanwhile
                name = names.get(tid) or stat[stat.index("(") + 1:stat.rindex(")")]
                start = int(stat[stat.rindex(")") + 2:].split()[19]) * 1_000_000_000 // hz
                start = max(0, start - boot_offset)
                saved, self.pid = self.pid, pid
                self.write(min(start, now), tid, "Unknown", "other", name)
                self.write(now, tid, "Unknown", "other", name)
                self.pid = saved
                n += 1
        return n


class MadeBatches(Dataset):
    """Index i -> one batch (inputs, targets), made with --item-ms of CPU time in torch."""

    def __init__(self, batches, batch, width, item_ms, truth):
        self.batches, self.batch, self.width = batches, batch, width
        self.item_ns = int(item_ms * 1e6)
        self.truth = truth

    def __len__(self):
        return self.batches

    def __getitem__(self, i):
        self.truth.open_here()
        self.truth.mark("DataLoading", role="worker")
        g = torch.Generator().manual_seed(i)
        m = torch.rand(64, 64, generator=g)
        start = time.thread_time_ns()
        while time.thread_time_ns() - start < self.item_ns:
            m = torch.tanh(m @ m)  # "decoding": real CPU work, bounded values
        x = torch.rand(self.batch, self.width, generator=g) + m.mean()
        x = (x - x.mean()) / (x.std() + 1e-6)
        y = torch.randint(0, 10, (self.batch,), generator=g)
        self.truth.mark("Unknown")
        return x, y


def worker_init(truth):
    def init(_worker_id):
        torch.set_num_threads(1)
        truth.open_here()
        truth.mark("Unknown", role="worker")
    return init


def set_comm(name):
    """Names the calling thread in /proc (comm, 15 bytes), for traces and top."""
    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def pin_memory_loop(truth, emulated, errors):
    """The DataLoader's pin-memory thread (replaces torch's own loop, same arguments and shape:
    get from the workers' queue with a timeout, pin, put on the main thread's queue), with the
    truth of what it does."""

    def loop(in_queue, out_queue, device_id, done_event, device=None, *_):
        torch.set_num_threads(1)
        set_comm("job-pin_memory")
        truth.mark("Unknown", role="pin_memory")
        try:
            if not emulated:
                torch.cuda.set_device(device_id)
            while not done_event.is_set():
                try:
                    r = in_queue.get(timeout=PIN_TIMEOUT_S)
                except queue.Empty:
                    continue
                truth.mark("DataLoading")
                idx, data = r
                if not done_event.is_set() and isinstance(data, tuple):
                    if emulated:
                        data = tuple(t.clone() for t in data)  # the copy a pin does, unlocked
                    else:
                        data = torch_pin.pin_memory(data, device)
                    r = (idx, data)
                while not done_event.is_set():
                    try:
                        out_queue.put(r, timeout=PIN_TIMEOUT_S)
                        break
                    except queue.Full:
                        continue
                truth.mark("Unknown")
        except Exception as e:  # noqa: BLE001 - reported by the job, which then fails
            errors.append(f"pin-memory thread: {type(e).__name__}: {e}")
        finally:
            truth.end()

    return loop


@contextlib.contextmanager
def emulated_pinning():
    """Lets the CPU build's DataLoader start its pin-memory thread: PyTorch asks
    torch.cuda.current_device() for the thread's device while the iterator starts."""
    saved = torch.cuda.current_device
    torch.cuda.current_device = lambda: 0
    try:
        yield
    finally:
        torch.cuda.current_device = saved


class Futex:
    """FUTEX_WAIT / FUTEX_WAKE on 32-bit words of a shared mapping (shared futexes, as the
    synthetic workload's NCCL-like barrier uses)."""

    SYS_FUTEX, WAIT, WAKE = 202, 0, 1  # x86-64

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long

    def wait(self, word, expected, timeout_ns):
        ts = self.Timespec(timeout_ns // 1_000_000_000, timeout_ns % 1_000_000_000)
        self.libc.syscall(ctypes.c_long(self.SYS_FUTEX), ctypes.c_void_p(ctypes.addressof(word)),
                          ctypes.c_int(self.WAIT), ctypes.c_uint(expected), ctypes.byref(ts),
                          ctypes.c_void_p(0), ctypes.c_int(0))

    def wake(self, word):
        self.libc.syscall(ctypes.c_long(self.SYS_FUTEX), ctypes.c_void_p(ctypes.addressof(word)),
                          ctypes.c_int(self.WAKE), ctypes.c_int(2 ** 31 - 1), ctypes.c_void_p(0),
                          ctypes.c_void_p(0), ctypes.c_int(0))


class Helpers:
    """The helper threads (--helpers) and the NCCL-like proxy's segment."""

    def __init__(self, truth, model, nccl_ms, checkpoint_every):
        self.truth, self.model = truth, model
        self.nccl_ns = int(nccl_ms * 1e6)
        self.checkpoint_every = checkpoint_every
        self.stop = threading.Event()
        self.checkpoint_due = threading.Event()
        self.errors = []
        self.threads = []
        self.counts = {"checkpoints": 0, "hashed_bytes": 0, "log_flushes": 0, "scrapes": 0,
                       "collectives": 0}
        self.step_info = (0, 0.0)
        self.dir = tempfile.mkdtemp(prefix="torch-job-")
        self.futex = Futex()
        self.shm_name = f"/dev/shm/nccl-torchjob-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(self.shm_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, mmap.PAGESIZE)
            self.shm = mmap.mmap(fd, mmap.PAGESIZE)
        finally:
            os.close(fd)
        self.posted = ctypes.c_uint32.from_buffer(self.shm, 0)
        self.done = ctypes.c_uint32.from_buffer(self.shm, 4)
        self.progress = ctypes.c_uint32.from_buffer(self.shm, 8)
        self.pipe_r, self.pipe_w = os.pipe2(os.O_CLOEXEC)
        try:
            import fcntl
            fcntl.fcntl(self.pipe_w, 1031, 1 << 20)  # F_SETPIPE_SZ: reads of up to 1 MiB
        except OSError:
            pass
        self.scrape_r, self.scrape_w = socket.socketpair()
        self.scrape_w.setblocking(False)

    def start(self):
        for role, fn in (("reader", self.reader), ("checkpoint", self.checkpoint),
                         ("logger", self.logger), ("metrics", self.metrics),
                         ("nccl_proxy", self.proxy)):
            t = threading.Thread(target=self.run, args=(role, fn), name=f"job-{role}")
            t.start()
            self.threads.append(t)

    def run(self, role, fn):
        set_comm(f"job-{role}")
        self.truth.mark("Unknown", role=role)
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported by the job, which then fails
            self.errors.append(f"{role} thread: {type(e).__name__}: {e}")
            self.stop.set()
        finally:
            self.truth.end()

    def reader(self):
        h = hashlib.sha256()
        while True:
            data = os.read(self.pipe_r, 1 << 20)
            if not data:
                break
            h.update(data)
            self.counts["hashed_bytes"] += len(data)
        os.close(self.pipe_r)

    def checkpoint(self):
        try:
            while not self.stop.is_set():
                if not self.checkpoint_due.wait(timeout=1.0):
                    continue
                self.checkpoint_due.clear()
                if self.stop.is_set():
                    break
                state = {k: v.detach().to("cpu", copy=True)
                         for k, v in self.model.state_dict().items()}
                buf = io.BytesIO()
                torch.save(state, buf)
                data = buf.getbuffer()
                path = os.path.join(self.dir, "checkpoint.pt")
                with open(path + ".tmp", "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(path + ".tmp", path)
                view = memoryview(data)
                while view:
                    view = view[os.write(self.pipe_w, view[:1 << 20]):]
                self.counts["checkpoints"] += 1
        finally:
            os.close(self.pipe_w)  # the reader sees the end

    def logger(self):
        lines = []
        with open(os.path.join(self.dir, "train.log.z"), "wb") as f:
            while not self.stop.is_set():
                time.sleep(0.05)
                step, loss = self.step_info
                lines.append(f"{time.time():.3f} step={step} loss={loss:.5f} "
                             f"checkpoints={self.counts['checkpoints']}")
                if len(lines) >= 20:
                    f.write(zlib.compress(("\n".join(lines) + "\n").encode() * 64, 6))
                    lines.clear()
                    self.counts["log_flushes"] += 1

    def metrics(self):
        sel = selectors.DefaultSelector()
        sel.register(self.scrape_r, selectors.EVENT_READ)
        path = os.path.join(self.dir, "metrics.prom.z")
        while not self.stop.is_set():
            if not sel.select(timeout=1.0):
                continue
            try:
                self.scrape_r.recv(4096)
            except BlockingIOError:
                continue
            step, loss = self.step_info
            text = "".join(f'train_metric{{name="m{i}",step="{step}"}} {loss * i:.6f}\n'
                           for i in range(400))
            with open(path + ".tmp", "wb") as f:
                f.write(zlib.compress(text.encode(), 6))
            os.replace(path + ".tmp", path)
            self.counts["scrapes"] += 1
        sel.close()

    def proxy(self):
        seen = 0
        burst = os.urandom(1 << 16)
        while not self.stop.is_set():
            posted = self.posted.value
            if posted == seen:
                self.futex.wait(self.posted, seen, 500_000_000)  # idle: the next collective
                continue
            self.truth.mark("NcclCollective")
            end = time.monotonic_ns() + self.nccl_ns
            while (now := time.monotonic_ns()) < end:
                hashlib.sha256(burst).digest()  # progress: CPU work without the GIL
                self.futex.wait(self.progress, self.progress.value, min(1_000_000, end - now))
            seen = posted
            self.done.value = seen
            self.futex.wake(self.done)
            self.counts["collectives"] += 1
            self.truth.mark("Unknown")

    # The main thread's side.

    def post_collective(self):
        self.posted.value = self.posted.value + 1
        self.futex.wake(self.posted)

    def wait_collective(self):
        """Waits for the posted collective; True when it had to (it was not done yet)."""
        waited = False
        while self.done.value != self.posted.value and not self.stop.is_set():
            if not waited:
                self.truth.mark("NcclCollective")
                waited = True
            self.futex.wait(self.done, self.done.value, 5_000_000)
        return waited

    def step_done(self, step, loss):
        self.step_info = (step, loss)
        with contextlib.suppress(BlockingIOError):
            self.scrape_w.send(b"s")
        if self.checkpoint_every and (step + 1) % self.checkpoint_every == 0:
            self.checkpoint_due.set()

    def close(self):
        self.stop.set()
        self.checkpoint_due.set()
        self.futex.wake(self.posted)
        with contextlib.suppress(BlockingIOError):
            self.scrape_w.send(b"x")
        for t in self.threads:
            t.join()
        self.scrape_r.close()
        self.scrape_w.close()
        del self.posted, self.done, self.progress
        self.shm.close()
        os.unlink(self.shm_name)
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


class EmulatedGpu:
    """The emulated GPU through its CUDA driver API (ctypes)."""

    def __init__(self, path):
        try:
            self.cuda = ctypes.CDLL(path)
            self.enqueue = self.cuda.zfgEnqueueWork
        except (OSError, AttributeError) as e:
            raise RuntimeError(f"{path}: not the emulated libcuda ({e})") from None
        self.enqueue.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]
        self.cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]

    def start(self):
        """cuInit, the primary context of device 0 and a stream: after the workers' fork."""
        self.ctx, self.stream, dev = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
        self.check("cuInit", self.cuda.cuInit(0))
        self.check("cuDeviceGet", self.cuda.cuDeviceGet(ctypes.byref(dev), 0))
        self.dev = dev
        self.check("cuDevicePrimaryCtxRetain",
                   self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev))
        self.check("cuCtxSetCurrent", self.cuda.cuCtxSetCurrent(self.ctx))
        self.check("cuStreamCreate", self.cuda.cuStreamCreate(ctypes.byref(self.stream), 0))

    @staticmethod
    def check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def launch(self, ms):
        self.check("zfgEnqueueWork", self.enqueue(self.stream, int(ms * 1e6)))

    def sync(self):
        self.check("cuStreamSynchronize", self.cuda.cuStreamSynchronize(self.stream))

    def close(self):
        self.cuda.cuStreamDestroy_v2(self.stream)
        self.cuda.cuDevicePrimaryCtxRelease(self.dev)


def stats(values):
    v = sorted(values)
    return {"mean": round(sum(v) / len(v), 3), "p50": round(v[(len(v) - 1) // 2], 3),
            "max": round(v[-1], 3)} if v else None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("emulated", "cuda"), default="emulated",
                    help="emulated: the emulated GPU through --libcuda (default); cuda: a real GPU")
    ap.add_argument("--libcuda", default="", help="the emulated libcuda.so.1 (build/lib/fake/)")
    ap.add_argument("--steps", type=int, default=30, help="training steps (30)")
    ap.add_argument("--gpu-ms", type=float, default=134.0,
                    help="emulated GPU time per step (134)")
    ap.add_argument("--item-ms", type=float, default=100.0,
                    help="worker CPU time per batch (100)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (2)")
    ap.add_argument("--hidden", type=int, default=0,
                    help="MLP width (emulated: 1152, ~3M parameters; cuda: 4096)")
    ap.add_argument("--batch", type=int, default=0, help="batch size (emulated: 4; cuda: 4096)")
    ap.add_argument("--pin-memory", action="store_true",
                    help="pin_memory=True (emulated on the CPU build: see above)")
    ap.add_argument("--helpers", action="store_true",
                    help="run the helper threads: reader, checkpoint, logger, metrics, nccl_proxy")
    ap.add_argument("--nccl-ms", type=float, default=10.0,
                    help="with --helpers: the proxy's collective time per step (10)")
    ap.add_argument("--checkpoint-every", type=int, default=10,
                    help="with --helpers: a checkpoint every N steps (10; 0: none)")
    ap.add_argument("--truth-log", default="", help="write the true phases here (appends)")
    ap.add_argument("--profile", default="",
                    help="profile three steps from the middle with torch.profiler, export here")
    ap.add_argument("--profile-after", default="", metavar="FILE",
                    help="with --profile: start at the first step that begins once FILE exists")
    a = ap.parse_args()
    if a.steps < 1 or a.workers < 1 or a.gpu_ms < 0 or a.item_ms < 0 or a.nccl_ms < 0 or \
            a.checkpoint_every < 0:
        ap.error("--steps and --workers must be >= 1, durations and --checkpoint-every >= 0")
    if a.hidden == 0:
        a.hidden = 4096 if a.device == "cuda" else 1152
    if a.batch == 0:
        a.batch = 4096 if a.device == "cuda" else 4
    if a.hidden < 8 or a.batch < 1:
        ap.error("--hidden must be >= 8 and --batch >= 1")
    if a.profile_after and not a.profile:
        ap.error("--profile-after needs --profile")
    if a.device == "emulated" and not a.libcuda:
        ap.error("--device emulated needs --libcuda (build/lib/fake/libcuda.so.1)")
    return a


def main():
    a = parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_job.py: --device cuda: this PyTorch sees no CUDA device"
              f" (torch {torch.__version__}, CUDA build: {torch.version.cuda})", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    truth = TruthLog(a.truth_log)
    try:
        truth.open_here()
    except OSError as e:
        print(f"torch_job.py: --truth-log {a.truth_log}: {e.strerror}", file=sys.stderr)
        return 1
    truth.mark("Unknown", role="main")

    width = 256
    model = torch.nn.Sequential(torch.nn.Linear(width, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, 10))
    pin_errors = []
    if a.pin_memory:
        torch.utils.data._utils.pin_memory._pin_memory_loop = pin_memory_loop(
            truth, not cuda, pin_errors)
    loader = DataLoader(MadeBatches(a.steps, a.batch, width, a.item_ms, truth), batch_size=None,
                        num_workers=a.workers, persistent_workers=True, prefetch_factor=2,
                        worker_init_fn=worker_init(truth), pin_memory=a.pin_memory,
                        **({"pin_memory_device": "cuda"} if a.pin_memory and not cuda else {}))
    gpu = None
    try:
        if not cuda:
            gpu = EmulatedGpu(a.libcuda)
        # Forks the workers, before any GPU context exists (as CUDA needs).
        with emulated_pinning() if a.pin_memory and not cuda else contextlib.nullcontext():
            batches = iter(loader)
        if cuda:
            model = model.to("cuda")
            torch.cuda.synchronize()
        else:
            gpu.start()
    except RuntimeError as e:
        print(f"torch_job.py: {e}", file=sys.stderr)
        return 1
    worker_pids = [w.pid for w in getattr(batches, "_workers", [])]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    helpers = None
    if a.helpers:
        helpers = Helpers(truth, model, a.nccl_ms, a.checkpoint_every)
        helpers.start()

    step_ms, wait_ms, gpu_ms, opt_ms = [], [], [], []
    nccl_waits = 0
    prof_first = a.steps // 2 if a.profile and not a.profile_after else -1
    prof, profile = None, None
    t_start = time.monotonic_ns()
    for i in range(a.steps):
        if a.profile_after and prof is None and profile is None and os.path.exists(a.profile_after):
            prof_first = i
        if i == prof_first:
            start_us = time.time_ns() // 1000
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        t0 = time.monotonic_ns()
        x, y = next(batches)
        t1 = time.monotonic_ns()
        if t1 - t0 >= 1_000_000:
            truth.mark("DataLoading", t0)
        truth.mark("GpuCompute", t1)
        if cuda:
            x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if helpers:
                helpers.post_collective()  # gradient buckets are posted during backward
            loss.backward()
            torch.cuda.synchronize()
        else:
            gpu.launch(a.gpu_ms)  # forward + backward on the device, queued at once
            if helpers:
                helpers.post_collective()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # on the CPU here, while the device works
            gpu.sync()
        if helpers and helpers.wait_collective():
            nccl_waits += 1
        t2 = time.monotonic_ns()
        truth.mark("OptimizerStep", t2)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.monotonic_ns()
        if helpers:
            helpers.step_done(i, float(loss))
        step_ms.append((t3 - t0) / 1e6)
        wait_ms.append((t1 - t0) / 1e6)
        gpu_ms.append((t2 - t1) / 1e6)
        opt_ms.append((t3 - t2) / 1e6)
        if prof is not None and (i == prof_first + 2 or i == a.steps - 1):
            prof.__exit__(None, None, None)
            profile = {"start_us": start_us, "end_us": time.time_ns() // 1000}
            try:
                prof.export_chrome_trace(a.profile)
            except OSError as e:
                print(f"torch_job.py: --profile {a.profile}: {e.strerror}", file=sys.stderr)
                return 1
            prof = None
    truth.mark("Unknown")
    elapsed = (time.monotonic_ns() - t_start) / 1e9
    # The threads the job did not start, while they all still live.
    known = {(os.getpid(), t) for t in truth.known()} | {(p, p) for p in worker_pids}
    pin_tid = next((t for t, (role, _) in truth.threads.items() if role == "pin_memory"), None)
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
    others = truth.census([os.getpid()] + worker_pids, known, names)
    helper_counts = None
    if helpers:
        helpers.close()
        helper_counts = dict(helpers.counts, tids={r: t for t, (r, _) in truth.threads.items()
                                                   if r not in ("main", "pin_memory")})
    if gpu is not None:
        gpu.close()
    del batches  # stops the workers (and the pin-memory thread)
    errors = pin_errors + (helpers.errors if helpers else [])
    for e in errors:
        print(f"torch_job.py: {e}", file=sys.stderr)
    print(json.dumps({"steps": a.steps, "device": a.device, "pid": os.getpid(),
                      "worker_pids": worker_pids, "pin_memory": a.pin_memory,
                      "pin_memory_tid": pin_tid, "helpers": helper_counts,
                      "other_threads": others, "nccl_waits": nccl_waits,
                      "elapsed_s": round(elapsed, 3), "loss": round(float(loss), 4),
                      "step_ms": stats(step_ms), "data_wait_ms": stats(wait_ms),
                      "gpu_ms": stats(gpu_ms), "optimizer_ms": stats(opt_ms),
                      "profile": profile}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

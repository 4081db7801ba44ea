#!/usr/bin/env python3
"""A real PyTorch training loop whose GPU is the emulated one, with a truth log of its phases.

    tools/torch_job.py --libcuda PATH [--steps N] [--gpu-ms MS] [--item-ms MS] [--workers N]
                       [--hidden N] [--truth-log PATH] [--profile PATH [--profile-after FILE]]

What runs (Debian's python3-torch, CPU build):
  * a torch.utils.data.DataLoader with --workers worker processes (forked, persistent); its
    dataset makes one batch per index with real CPU work in torch (a random matrix squared
    again and again until --item-ms of the worker's CPU time is spent), then normalises it;
  * an MLP (256 -> 3 x --hidden -> 10, about 2 x hidden^2 parameters: 3 M by default) trained
    with AdamW on batches of 4: forward, loss and backward run on the CPU while the "GPU" works
    (~20 ms of CPU), then optimizer.step() on the CPU (~20-25 ms on the development VM);
  * "GPU work" through the CUDA driver API of the emulated driver, loaded with ctypes: cuInit, a
    primary context on device 0, a stream, zfgEnqueueWork(stream, --gpu-ms) and the blocking
    cuStreamSynchronize (what the scheduler's uprobes see). The context makes the fake NVML list
    the main process as a GPU process; the workers, forked before the context exists, hold none.

Truth log (--truth-log, the format of zernel-workload's, docs/workload.md): JSON lines {"t_ns":
CLOCK_MONOTONIC ns, "pid", "phase"}, each written with one write() to a file opened O_APPEND.
  main process   Unknown at start; DataLoading while it waits for the next batch (a wait under
                 1 ms is not logged: the batch was ready); GpuCompute from the enqueue to the
                 return of the sync (the CPU forward/backward runs inside it, as kernel launches
                 would); OptimizerStep during optimizer.step() and zero_grad(); Unknown at the end.
  worker         Unknown when it starts; DataLoading while it makes a batch, Unknown while idle.
Profile (--profile PATH): torch.profiler (CPU activity) records three steps from the middle of the
run (with --profile-after FILE: from the first step that starts once FILE exists, so that a
`zernel-scheduler trace` started first covers them) and exports them with export_chrome_trace
to PATH; the JSON line gives the wall clock (us since the epoch) just before the profiler started
and just after it stopped ("profile": {"start_us", "end_us"}), which tools/trace_merge.py
--pytorch-start-us needs for a PyTorch built without Kineto (Debian's: its trace is stamped from
the profiler's start).
Prints one JSON line at the end: steps, pids, and mean/p50 step, data wait, GPU and optimizer
times. Exit status: 0 done, 1 the driver or torch failed, 2 bad arguments.
"""
import argparse
import ctypes
import json
import os
import sys
import time

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    print("torch_job.py: needs python3-torch (apt-get install python3-torch)", file=sys.stderr)
    sys.exit(1)


class TruthLog:
    """Appends phase changes of this process; a no-op without a path. Opened per process (the
    workers open their own after the fork), never writes the same phase twice in a row."""

    def __init__(self, path):
        self.path = path
        self.fd = -1
        self.pid = 0
        self.phase = None

    def open_here(self):
        if self.path and self.pid != os.getpid():
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self.fd = os.open(self.path, flags, 0o644)
            self.pid = os.getpid()
            self.phase = None

    def mark(self, phase, t_ns=None):
        if phase == self.phase:
            return
        self.phase = phase
        if self.fd < 0:
            return
        t = time.monotonic_ns() if t_ns is None else t_ns
        os.write(self.fd, f'{{"t_ns": {t}, "pid": {self.pid}, "phase": "{phase}"}}\n'.encode())


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
        self.truth.mark("DataLoading")
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
        truth.mark("Unknown")
    return init


class Gpu:
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libcuda", required=True, help="the emulated libcuda.so.1 (build/lib/fake/)")
    ap.add_argument("--steps", type=int, default=30, help="training steps (30)")
    ap.add_argument("--gpu-ms", type=float, default=134.0, help="GPU time per step (134)")
    ap.add_argument("--item-ms", type=float, default=100.0,
                    help="worker CPU time per batch (100)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (2)")
    ap.add_argument("--hidden", type=int, default=1152,
                    help="MLP width; AdamW's step grows with its square (1152: ~3M parameters)")
    ap.add_argument("--truth-log", default="", help="write the true phases here (appends)")
    ap.add_argument("--profile", default="",
                    help="profile three steps from the middle with torch.profiler, export here")
    ap.add_argument("--profile-after", default="", metavar="FILE",
                    help="with --profile: start at the first step that begins once FILE exists")
    a = ap.parse_args()
    if a.steps < 1 or a.workers < 1 or a.hidden < 8 or a.gpu_ms < 0 or a.item_ms < 0:
        ap.error("--steps and --workers must be >= 1, --hidden >= 8, durations >= 0")
    if a.profile_after and not a.profile:
        ap.error("--profile-after needs --profile")

    torch.set_num_threads(1)
    truth = TruthLog(a.truth_log)
    try:
        truth.open_here()
    except OSError as e:
        print(f"torch_job.py: --truth-log {a.truth_log}: {e.strerror}", file=sys.stderr)
        return 1
    truth.mark("Unknown")

    width, batch = 256, 4  # a small batch: the CPU forward/backward stays well under --gpu-ms
    model = torch.nn.Sequential(torch.nn.Linear(width, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(MadeBatches(a.steps, batch, width, a.item_ms, truth), batch_size=None,
                        num_workers=a.workers, persistent_workers=True, prefetch_factor=2,
                        worker_init_fn=worker_init(truth))
    try:
        gpu = Gpu(a.libcuda)
        batches = iter(loader)  # forks the workers, before any GPU context exists (as CUDA needs)
        gpu.start()
    except RuntimeError as e:
        print(f"torch_job.py: {e}", file=sys.stderr)
        return 1
    worker_pids = [w.pid for w in getattr(batches, "_workers", [])]

    step_ms, wait_ms, gpu_ms, opt_ms = [], [], [], []
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
        gpu.launch(a.gpu_ms)  # forward + backward on the device, queued at once
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # on the CPU here, while the device works
        gpu.sync()
        t2 = time.monotonic_ns()
        truth.mark("OptimizerStep", t2)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.monotonic_ns()
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
    gpu.close()
    del batches  # stops the workers
    print(json.dumps({"steps": a.steps, "pid": os.getpid(), "worker_pids": worker_pids,
                      "elapsed_s": round(elapsed, 3), "loss": round(float(loss), 4),
                      "step_ms": stats(step_ms), "data_wait_ms": stats(wait_ms),
                      "gpu_ms": stats(gpu_ms), "optimizer_ms": stats(opt_ms),
                      "profile": profile}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

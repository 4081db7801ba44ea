#!/usr/bin/env python3
"""scripts/gpu-check.sh's watcher: while a training job runs, which driver entry points its calls
reach, and what NVML says about it.

    scripts/gpu_check.py watch --pid PID --out FILE.json [--nvml PATH] [--interval-ms 100]

  * Entry points: once the job has mapped libcuda (and libcudart, PyTorch's runtime), a tracefs
    uprobe (group zgc<pid of this watcher>) on each exported synchronisation and launch symbol the
    file has: cuCtxSynchronize[_v2], cuStreamSynchronize[_ptsz], cuEventSynchronize,
    cuLaunchKernel[_ptsz], cuLaunchKernelEx[_ptsz], cuGraphLaunch, the emulated driver's
    zfgEnqueueWork; cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize,
    cudaLaunchKernel, cudaLaunchKernelExC, cudaGraphLaunch. Their hit counts
    (/sys/kernel/tracing/uprobe_profile) at the job's exit say whether a sync or launch of the
    job reaches the driver's exported functions (the ones the scheduler's probes use) or only the
    runtime's. The probes are removed at the end, also on SIGTERM.
  * NVML: nvmlDeviceGetProcessUtilization on every device every --interval-ms: the samples that
    name the job's pid (their timestamps, smUtil), and how often a new one appears.
Writes one JSON object to --out; exits when the job does. Needs root and tracefs for the uprobes
(without them "uprobes" says why and the rest goes on).
"""
import argparse
import ctypes
import json
import os
import signal
import struct
import sys
import time

TRACEFS = "/sys/kernel/tracing"
SYMBOLS = {
    "libcuda": ["cuCtxSynchronize", "cuCtxSynchronize_v2", "cuStreamSynchronize",
                "cuStreamSynchronize_ptsz", "cuEventSynchronize", "cuLaunchKernel",
                "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
                "cuGraphLaunch", "zfgEnqueueWork"],
    "libcudart": ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                  "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch"],
}


def elf_symbols(path, wanted):
    """{name: file offset} of the defined dynamic symbols in `wanted` (ELF64 little-endian)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_filesz, p_offset))
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    out = {}
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for k in range(sh[5] // 24):
            st_name, _, _, st_shndx, st_value, _ = struct.unpack_from("<IBBHQQ", data,
                                                                      sh[4] + k * 24)
            if st_shndx == 0 or st_value == 0:
                continue
            end = data.index(b"\0", str_off + st_name)
            name = data[str_off + st_name:end].decode(errors="replace")
            if name in wanted and name not in out:
                for vaddr, size, off in loads:
                    if vaddr <= st_value < vaddr + size:
                        out[name] = st_value - vaddr + off
                        break
    return out


def mapped_libraries(pid):
    """{"libcuda": path, "libcudart": path} from /proc/PID/maps (the first of each)."""
    found = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                base = os.path.basename(path)
                for lib in SYMBOLS:
                    if base.startswith(lib + ".so") and lib not in found and \
                            not path.endswith("(deleted)"):
                        found[lib] = f"/proc/{pid}/root{path}"
    except OSError:
        pass
    return found


def tracefs_write(name, text):
    """One write() to a tracefs control file (Python's buffered append mode seeks, which they
    refuse)."""
    fd = os.open(f"{TRACEFS}/{name}", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class Uprobes:
    def __init__(self):
        self.group = f"zgc{os.getpid()}"
        self.events = {}  # event name -> (lib, symbol, path)
        self.error = None

    def add(self, lib, path):
        try:
            offsets = elf_symbols(path, SYMBOLS[lib])
        except (OSError, ValueError) as e:
            self.error = f"{path}: {e}"
            return
        real = os.path.realpath(path)
        for sym, off in sorted(offsets.items()):
            ev = f"{lib}_{sym}"
            try:
                tracefs_write("uprobe_events", f"p:{self.group}/{ev} {real}:{off:#x}\n")
                self.events[ev] = (lib, sym, real)
            except OSError as e:
                self.error = f"adding a uprobe on {sym} ({real}): {e.strerror}"
        try:
            tracefs_write(f"events/{self.group}/enable", "1")
        except OSError as e:
            self.error = f"enabling the uprobes: {e.strerror}"

    def counts(self):
        hits = {}
        try:
            with open(f"{TRACEFS}/uprobe_profile") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3:
                        hits[parts[-2].split("/")[-1]] = int(parts[-1])
        except (OSError, ValueError):
            pass
        out = {}
        for ev, (lib, sym, path) in self.events.items():
            out.setdefault(lib, {"path": path, "hits": {}})["hits"][sym] = hits.get(ev)
        return out

    def remove(self):
        if not self.events:
            return
        try:
            tracefs_write(f"events/{self.group}/enable", "0")
        except OSError:
            pass
        for ev in self.events:
            try:
                tracefs_write("uprobe_events", f"-:{self.group}/{ev}\n")
            except OSError:
                pass
        self.events = {}


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Nvml:
    def __init__(self, path):
        self.error = None
        self.devices = []
        try:
            self.lib = ctypes.CDLL(path)
            rc = self.lib.nvmlInit_v2()
            if rc != 0:
                raise OSError(f"nvmlInit_v2 returned {rc}")
            n = ctypes.c_uint()
            self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
            for i in range(n.value):
                h = ctypes.c_void_p()
                if self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0:
                    self.devices.append(h)
        except (OSError, AttributeError) as e:
            self.error = f"{path}: {e}"
            self.lib = None
        self.last = [0] * len(self.devices)

    def sample(self, pid):
        """The new samples of `pid` since the last call: [(device, timeStamp us, smUtil)]."""
        out = []
        if self.lib is None:
            return out
        for d, h in enumerate(self.devices):
            count = ctypes.c_uint(0)
            rc = self.lib.nvmlDeviceGetProcessUtilization(h, None, ctypes.byref(count),
                                                          ctypes.c_ulonglong(self.last[d]))
            if rc not in (0, 7) or count.value == 0:  # 7: NVML_ERROR_INSUFFICIENT_SIZE
                continue
            buf = (Sample * count.value)()
            rc = self.lib.nvmlDeviceGetProcessUtilization(h, buf, ctypes.byref(count),
                                                          ctypes.c_ulonglong(self.last[d]))
            if rc != 0:
                continue
            for s in buf[:count.value]:
                self.last[d] = max(self.last[d], s.timeStamp)
                if s.pid == pid:
                    out.append((d, s.timeStamp, s.smUtil))
        return out


def watch(a):
    up = Uprobes()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    if not os.path.isdir(f"{TRACEFS}/events"):
        up.error = f"{TRACEFS} is not mounted (mount -t tracefs nodev {TRACEFS})"
    elif not os.access(f"{TRACEFS}/uprobe_events", os.W_OK):
        up.error = f"{TRACEFS}/uprobe_events is not writable (root, CONFIG_UPROBE_EVENTS)"
    nvml = Nvml(a.nvml)
    libs = {}
    samples = []
    polls = 0
    try:
        while not stop and os.path.exists(f"/proc/{a.pid}"):
            if up.error is None and len(libs) < len(SYMBOLS):
                for lib, path in mapped_libraries(a.pid).items():
                    if lib not in libs:
                        libs[lib] = path
                        up.add(lib, path)
            samples += nvml.sample(a.pid)
            polls += 1
            time.sleep(a.interval_ms / 1000)
        entry_points = up.counts()
    finally:
        up.remove()
    stamps = sorted({s[1] for s in samples})
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    util = sorted(s[2] for s in samples)
    out = {
        "libraries": libs,
        "uprobes": entry_points if up.error is None else {"error": up.error, **entry_points},
        "nvml": {"error": nvml.error, "devices": len(nvml.devices), "polls": polls,
                 "samples": len(samples), "distinct_timestamps": len(stamps),
                 "sample_interval_ms": {"p50": gaps[len(gaps) // 2] / 1000,
                                        "max": gaps[-1] / 1000} if gaps else None,
                 "sm_util": {"p50": util[len(util) // 2], "max": util[-1]} if util else None,
                 "first": [{"device": s[0], "ts_us": s[1], "sm": s[2]} for s in samples[:5]]},
    }
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="watch a job until it exits")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--nvml", default="libnvidia-ml.so.1")
    w.add_argument("--interval-ms", type=float, default=100.0)
    a = ap.parse_args()
    if a.pid <= 0 or a.interval_ms <= 0:
        ap.error("--pid and --interval-ms must be positive")
    return watch(a)


if __name__ == "__main__":
    sys.exit(main())

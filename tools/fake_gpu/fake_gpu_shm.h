/* The emulated GPU's state: one POSIX shared-memory segment that the fake libcuda (writer: which
 * process has a context where, what work it queued) and the fake NVML (reader, and the clock and
 * power settings) share across processes.
 *
 * Model. Each device runs the work queued on it back to back, whichever process queued it: a
 * piece of work starts when the device's queue drains (queue_tail_ns) or now, whichever is later,
 * and lasts its duration scaled by the clock it runs at. Queuing it appends a busy interval
 * [start, end) with the pid to the device's ring at once (the end may lie in the future); readers
 * clip every interval to "now", so an interval counts only for the part that has run. Since the
 * queue is serial, the ring is sorted and its intervals never overlap, which lets a reader walk
 * it from the newest end and stop at the first interval that ended before its window. Adjacent
 * intervals of the same pid (work queued while the device was still busy with that pid's work)
 * are merged, so a process that keeps its queue full uses one slot, not one per launch.
 *
 * Clocks and power. Durations are given at the default application clock (the device's top
 * clock). Work runs at the "busy clock": the application clock, clamped into the locked range
 * when clocks are locked, then lowered until the busy power fits the power limit, with busy power
 * = idle + (full - idle) * (clock / max)^3. A device without work sits at its idle clock (raised
 * to the locked minimum when locked). A setting applies to work queued after it.
 *
 * Creation is race-free: the creator makes the segment with O_CREAT|O_EXCL, sizes it, fills it and
 * writes the magic last (release); everyone else waits for the magic (acquire), then checks the
 * layout version and size, so a segment left by an older build is a clear error, not garbage.
 * magic and version stay at offsets 0 and 8 in every version. All other fields are protected by
 * one process-shared robust mutex: a process killed while holding it leaves it to the next owner
 * (EOWNERDEAD), who marks it consistent; the fields it may have half-updated are single counters
 * and ring slots, which at worst lose one interval.
 *
 * Processes that exit without destroying their contexts (killed, _exit) are pruned by readers:
 * an entry whose pid no longer exists (kill(pid, 0) fails with ESRCH) is dropped by the next
 * list of its device's processes (or by a registration that finds the table full).
 *
 * Internal to the two fake libraries (hidden symbols); plain C11.
 */
#ifndef ZERNEL_FAKE_GPU_SHM_H
#define ZERNEL_FAKE_GPU_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Environment. */
#define ZFG_ENV_SHM "ZERNEL_FAKE_GPU_SHM"                   /* segment name, default below */
#define ZFG_ENV_COUNT "ZERNEL_FAKE_GPU_COUNT"               /* devices, at creation only, 1..8 */
#define ZFG_ENV_UNRESTRICTED "ZERNEL_FAKE_GPU_UNRESTRICTED" /* "1": setters without root */
#define ZFG_DEFAULT_SHM_NAME "/zernel-fake-gpu"

#define ZFG_MAGIC UINT64_C(0x31555047464e525a) /* "ZRNFGPU1" little-endian */

enum {
  ZFG_VERSION = 1,
  ZFG_MAX_DEVICES = 8,
  ZFG_DEFAULT_DEVICES = 2,
  ZFG_RING_CAPACITY = 8192, /* busy intervals kept per device */
  ZFG_MAX_PROCESSES = 256,  /* (pid, device) context entries */
  ZFG_NAME_LEN = 96,
  ZFG_BUS_ID_LEN = 32,
};

/* Emulated hardware: an NVIDIA H200 SXM (figures of its public spec sheet, rounded). */
#define ZFG_DEVICE_NAME "NVIDIA H200 (zernel emulated)"
#define ZFG_PCI_DEVICE_ID 0x233510deu /* device 0x2335, vendor 0x10de */
#define ZFG_PCI_SUBSYSTEM_ID 0x18be10deu
#define ZFG_MEMORY_TOTAL_BYTES UINT64_C(150754820096) /* 143771 MiB */
#define ZFG_CONTEXT_MEMORY_BYTES UINT64_C(536870912)  /* 512 MiB per context */
#define ZFG_SM_CLOCK_MAX_MHZ 1980u
#define ZFG_SM_CLOCK_MIN_MHZ 345u /* lowest settable clock */
#define ZFG_SM_CLOCK_IDLE_MHZ 345u
#define ZFG_MEM_CLOCK_MHZ 3201u /* the only memory clock */
#define ZFG_VIDEO_CLOCK_MAX_MHZ 1710u
#define ZFG_POWER_MAX_MW 700000u
#define ZFG_POWER_MIN_MW 200000u
#define ZFG_POWER_IDLE_MW 75000u
#define ZFG_POWER_FULL_MW 700000u /* busy at the top clock */

/* Sample periods. */
#define ZFG_UTIL_PERIOD_NS UINT64_C(1000000000)  /* device utilisation: the last second */
#define ZFG_PROC_HORIZON_NS UINT64_C(1000000000) /* per-process samples: at most the last second \
                                                  */

struct zfg_interval {
  uint64_t start_ns; /* CLOCK_MONOTONIC */
  uint64_t end_ns;   /* CLOCK_MONOTONIC, > start_ns */
  int32_t pid;
  uint32_t reserved;
};

/* One (pid, device) pair with at least one context; pid 0 = free slot. */
struct zfg_process {
  int32_t pid;
  uint32_t device;
  uint64_t used_memory_bytes;
  uint64_t registered_ns; /* CLOCK_MONOTONIC of the first context */
  uint32_t contexts;      /* contexts of this pid on this device */
  uint32_t reserved;
};

struct zfg_device {
  char name[ZFG_NAME_LEN];
  char bus_id[ZFG_BUS_ID_LEN]; /* NVML form, "00000000:1B:00.0" */
  uint32_t pci_domain;
  uint32_t pci_bus;
  uint32_t pci_device;
  uint32_t pci_function;
  uint32_t pci_device_id;
  uint32_t pci_subsystem_id;
  uint64_t memory_total_bytes;

  /* Clocks, MHz. locked_* are 0 when the clocks are not locked. */
  uint32_t sm_clock_max_mhz;
  uint32_t sm_clock_min_mhz;
  uint32_t sm_clock_idle_mhz;
  uint32_t mem_clock_mhz;
  uint32_t video_clock_max_mhz;
  uint32_t app_sm_clock_mhz;
  uint32_t app_mem_clock_mhz;
  uint32_t default_app_sm_clock_mhz;
  uint32_t default_app_mem_clock_mhz;
  uint32_t locked_min_mhz;
  uint32_t locked_max_mhz;

  /* Power, mW. */
  uint32_t power_limit_mw;
  uint32_t power_default_limit_mw;
  uint32_t power_min_limit_mw;
  uint32_t power_max_limit_mw;
  uint32_t power_idle_mw;
  uint32_t power_full_mw;
  uint32_t reserved;

  uint64_t queue_tail_ns; /* CLOCK_MONOTONIC end of the last queued work */
  uint64_t ring_written;  /* intervals ever appended; newest at ring[(ring_written-1) % CAP] */
  struct zfg_interval ring[ZFG_RING_CAPACITY];
};

struct zfg_shm {
  _Atomic uint64_t magic; /* ZFG_MAGIC once initialised; written last */
  uint32_t version;       /* ZFG_VERSION */
  uint32_t device_count;  /* 1..ZFG_MAX_DEVICES */
  uint64_t size_bytes;    /* sizeof(struct zfg_shm) of the creator */
  uint64_t created_ns;    /* CLOCK_MONOTONIC */
  pthread_mutex_t lock;   /* process-shared, robust */
  struct zfg_process processes[ZFG_MAX_PROCESSES];
  struct zfg_device devices[ZFG_MAX_DEVICES];
};

_Static_assert(offsetof(struct zfg_shm, magic) == 0, "magic stays at offset 0");
_Static_assert(offsetof(struct zfg_shm, version) == 8, "version stays at offset 8");
_Static_assert(sizeof(struct zfg_interval) == 24, "interval layout");

/* CLOCK_MONOTONIC / CLOCK_REALTIME now, ns. */
uint64_t zfg_now_ns(void);
uint64_t zfg_realtime_ns(void);

/* Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (absolute, restarted on EINTR). */
void zfg_sleep_until(uint64_t deadline_ns);

/* The segment name: $ZERNEL_FAKE_GPU_SHM or the default, with a leading '/'. */
const char* zfg_shm_name(char* buf, size_t len);

/* Maps the segment, creating and initialising it when it does not exist. On failure returns a
 * negative errno and writes a sentence into err: -EPROTO for a layout version mismatch, -EINVAL
 * for a bad ZERNEL_FAKE_GPU_COUNT, -ETIMEDOUT when its creator never finished it. */
int zfg_attach(struct zfg_shm** out, char* err, size_t err_len);
void zfg_detach(struct zfg_shm* shm);

void zfg_lock(struct zfg_shm* shm);
void zfg_unlock(struct zfg_shm* shm);

/* Everything below: call with the lock held. */

/* Queues `duration_ns` (at the reference clock) of `pid`'s work on device `dev` at `now_ns`;
 * returns the CLOCK_MONOTONIC time it will have finished. */
uint64_t zfg_enqueue(struct zfg_shm* shm, uint32_t dev, int32_t pid, uint64_t duration_ns,
                     uint64_t now_ns);

/* Busy time of the device within [from_ns, to_ns), of one pid or of any (pid < 0). */
uint64_t zfg_busy_ns(const struct zfg_device* d, uint64_t from_ns, uint64_t to_ns, int32_t pid);

/* Per-pid busy time within [from_ns, to_ns): fills up to `max` (pid, ns) pairs with busy > 0;
 * returns how many. */
size_t zfg_busy_by_pid(const struct zfg_device* d, uint64_t from_ns, uint64_t to_ns, int32_t* pids,
                       uint64_t* busy_ns, size_t max);

/* Context bookkeeping. register returns 0 or -ENOSPC (table full). */
int zfg_register_context(struct zfg_shm* shm, uint32_t dev, int32_t pid, uint64_t now_ns);
void zfg_unregister_context(struct zfg_shm* shm, uint32_t dev, int32_t pid);
void zfg_unregister_pid(struct zfg_shm* shm, int32_t pid);

/* Drops the entries of processes that no longer exist: those on `device`, or on every device
 * when `device` is negative (one kill(pid, 0) per entry looked at). */
void zfg_prune_dead(struct zfg_shm* shm, int32_t device);

/* Clocks (MHz) and power (mW) of the model above. */
uint32_t zfg_busy_sm_clock_mhz(const struct zfg_device* d);
uint32_t zfg_current_sm_clock_mhz(const struct zfg_device* d, uint64_t now_ns);
uint32_t zfg_busy_power_mw(const struct zfg_device* d, uint32_t sm_clock_mhz);

#endif /* ZERNEL_FAKE_GPU_SHM_H */

/* The emulated GPU's shared state; the model is described in fake_gpu_shm.h. */
#include "fake_gpu_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* PCI bus numbers of the GPUs of an 8-GPU HGX board, in the driver's order. */
static const uint32_t kBusNumbers[ZFG_MAX_DEVICES] = {0x1b, 0x43, 0x52, 0x61,
                                                      0x9d, 0xc3, 0xd1, 0xdf};

/* How long a process waits for another one to finish creating the segment. */
#define ZFG_CREATE_WAIT_NS UINT64_C(5000000000)

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

uint64_t zfg_now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t zfg_realtime_ns(void) { return clock_ns(CLOCK_REALTIME); }

void zfg_sleep_until(uint64_t deadline_ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(deadline_ns / UINT64_C(1000000000));
  ts.tv_nsec = (long)(deadline_ns % UINT64_C(1000000000));
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

const char* zfg_shm_name(char* buf, size_t len) {
  const char* env = getenv(ZFG_ENV_SHM);
  const char* name = (env != NULL && env[0] != '\0') ? env : ZFG_DEFAULT_SHM_NAME;
  snprintf(buf, len, "%s%s", name[0] == '/' ? "" : "/", name);
  return buf;
}

static int parse_device_count(uint32_t* count, char* err, size_t err_len) {
  const char* env = getenv(ZFG_ENV_COUNT);
  if (env == NULL || env[0] == '\0') {
    *count = ZFG_DEFAULT_DEVICES;
    return 0;
  }
  char* end = NULL;
  errno = 0;
  unsigned long v = strtoul(env, &end, 10);
  if (errno != 0 || end == env || *end != '\0' || v < 1 || v > ZFG_MAX_DEVICES) {
    snprintf(err, err_len, "%s=\"%s\": must be a number from 1 to %d", ZFG_ENV_COUNT, env,
             ZFG_MAX_DEVICES);
    return -EINVAL;
  }
  *count = (uint32_t)v;
  return 0;
}

static void init_device(struct zfg_device* d, uint32_t index) {
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", ZFG_DEVICE_NAME);
  d->pci_domain = 0;
  d->pci_bus = kBusNumbers[index];
  d->pci_device = 0;
  d->pci_function = 0;
  snprintf(d->bus_id, sizeof(d->bus_id), "%08X:%02X:%02X.%X", d->pci_domain, d->pci_bus,
           d->pci_device, d->pci_function);
  d->pci_device_id = ZFG_PCI_DEVICE_ID;
  d->pci_subsystem_id = ZFG_PCI_SUBSYSTEM_ID;
  d->memory_total_bytes = ZFG_MEMORY_TOTAL_BYTES;
  d->sm_clock_max_mhz = ZFG_SM_CLOCK_MAX_MHZ;
  d->sm_clock_min_mhz = ZFG_SM_CLOCK_MIN_MHZ;
  d->sm_clock_idle_mhz = ZFG_SM_CLOCK_IDLE_MHZ;
  d->mem_clock_mhz = ZFG_MEM_CLOCK_MHZ;
  d->video_clock_max_mhz = ZFG_VIDEO_CLOCK_MAX_MHZ;
  d->default_app_sm_clock_mhz = ZFG_SM_CLOCK_MAX_MHZ;
  d->default_app_mem_clock_mhz = ZFG_MEM_CLOCK_MHZ;
  d->app_sm_clock_mhz = d->default_app_sm_clock_mhz;
  d->app_mem_clock_mhz = d->default_app_mem_clock_mhz;
  d->power_default_limit_mw = ZFG_POWER_MAX_MW;
  d->power_limit_mw = ZFG_POWER_MAX_MW;
  d->power_min_limit_mw = ZFG_POWER_MIN_MW;
  d->power_max_limit_mw = ZFG_POWER_MAX_MW;
  d->power_idle_mw = ZFG_POWER_IDLE_MW;
  d->power_full_mw = ZFG_POWER_FULL_MW;
}

/* Fills a segment this process has just created with O_EXCL. */
static int create_segment(int fd, const char* name, uint32_t count, struct zfg_shm** out, char* err,
                          size_t err_len) {
  (void)fchmod(fd, 0666); /* shared by a root daemon and unprivileged jobs, whatever the umask */
  if (ftruncate(fd, (off_t)sizeof(struct zfg_shm)) != 0) {
    int e = errno;
    snprintf(err, err_len, "sizing shared memory %s: %s", name, strerror(e));
    shm_unlink(name);
    return -e;
  }
  void* p = mmap(NULL, sizeof(struct zfg_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    snprintf(err, err_len, "mapping shared memory %s: %s", name, strerror(e));
    shm_unlink(name);
    return -e;
  }
  struct zfg_shm* shm = p;

  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&shm->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    snprintf(err, err_len, "initialising the lock of %s: %s", name, strerror(rc));
    munmap(p, sizeof(struct zfg_shm));
    shm_unlink(name);
    return -rc;
  }
  for (uint32_t i = 0; i < ZFG_MAX_DEVICES; ++i) init_device(&shm->devices[i], i);
  shm->version = ZFG_VERSION;
  shm->device_count = count;
  shm->size_bytes = sizeof(struct zfg_shm);
  shm->created_ns = zfg_now_ns();
  atomic_store_explicit(&shm->magic, ZFG_MAGIC, memory_order_release);
  *out = shm;
  return 0;
}

/* Maps a segment someone else created, once its creator has finished it. */
static int open_segment(int fd, const char* name, struct zfg_shm** out, char* err, size_t err_len) {
  const uint64_t deadline = zfg_now_ns() + ZFG_CREATE_WAIT_NS;
  const size_t header = 2 * sizeof(uint64_t);
  struct stat st;
  uint64_t magic = 0;
  uint32_t version = 0;
  for (;;) {
    if (fstat(fd, &st) != 0) {
      int e = errno;
      snprintf(err, err_len, "fstat of shared memory %s: %s", name, strerror(e));
      return -e;
    }
    if ((size_t)st.st_size >= header) {
      void* p = mmap(NULL, header, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        snprintf(err, err_len, "mapping shared memory %s: %s", name, strerror(e));
        return -e;
      }
      const struct zfg_shm* hdr = p;
      magic = atomic_load_explicit(&hdr->magic, memory_order_acquire);
      version = hdr->version;
      munmap(p, header);
      if (magic != 0) break;
    }
    if (zfg_now_ns() > deadline) {
      snprintf(err, err_len,
               "shared memory %s exists but was never initialised (did its creator die?): "
               "remove /dev/shm%s",
               name, name);
      return -ETIMEDOUT;
    }
    zfg_sleep_until(zfg_now_ns() + UINT64_C(1000000));
  }
  if (magic != ZFG_MAGIC) {
    snprintf(err, err_len, "shared memory %s is not an emulated GPU segment (magic %#" PRIx64 ")",
             name, magic);
    return -EPROTO;
  }
  if (version != ZFG_VERSION) {
    snprintf(err, err_len,
             "shared memory %s has layout version %u, this library expects %u: remove /dev/shm%s "
             "once no process uses it",
             name, version, (unsigned)ZFG_VERSION, name);
    return -EPROTO;
  }
  if ((size_t)st.st_size < sizeof(struct zfg_shm)) {
    snprintf(err, err_len,
             "shared memory %s is %lld bytes, this library expects %zu (another build?): remove "
             "/dev/shm%s once no process uses it",
             name, (long long)st.st_size, sizeof(struct zfg_shm), name);
    return -EPROTO;
  }
  void* p = mmap(NULL, sizeof(struct zfg_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    snprintf(err, err_len, "mapping shared memory %s: %s", name, strerror(e));
    return -e;
  }
  struct zfg_shm* shm = p;
  if (shm->size_bytes != sizeof(struct zfg_shm) || shm->device_count < 1 ||
      shm->device_count > ZFG_MAX_DEVICES) {
    snprintf(err, err_len,
             "shared memory %s has an unexpected layout (another build?): remove /dev/shm%s once "
             "no process uses it",
             name, name);
    munmap(p, sizeof(struct zfg_shm));
    return -EPROTO;
  }
  *out = shm;
  return 0;
}

int zfg_attach(struct zfg_shm** out, char* err, size_t err_len) {
  char name[256];
  zfg_shm_name(name, sizeof(name));
  uint32_t count = 0;
  int rc = parse_device_count(&count, err, err_len);
  if (rc != 0) return rc;
  /* Loop: the segment may be removed between our O_EXCL failing and our opening it. */
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0666);
    if (fd >= 0) {
      rc = create_segment(fd, name, count, out, err, err_len);
      close(fd);
      return rc;
    }
    if (errno != EEXIST) {
      int e = errno;
      snprintf(err, err_len, "creating shared memory %s: %s", name, strerror(e));
      return -e;
    }
    fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      int e = errno;
      snprintf(err, err_len, "opening shared memory %s: %s", name, strerror(e));
      return -e;
    }
    rc = open_segment(fd, name, out, err, err_len);
    close(fd);
    return rc;
  }
  snprintf(err, err_len, "shared memory %s keeps disappearing while being opened", name);
  return -EAGAIN;
}

void zfg_detach(struct zfg_shm* shm) {
  if (shm != NULL) munmap(shm, sizeof(struct zfg_shm));
}

void zfg_lock(struct zfg_shm* shm) {
  int rc = pthread_mutex_lock(&shm->lock);
  if (rc == EOWNERDEAD) {
    /* Its owner died holding it: what it was updating is at worst one ring slot or counter. */
    pthread_mutex_consistent(&shm->lock);
  } else if (rc != 0) {
    fprintf(stderr, "zernel fake GPU: locking the shared state failed: %s\n", strerror(rc));
    abort();
  }
}

void zfg_unlock(struct zfg_shm* shm) { pthread_mutex_unlock(&shm->lock); }

uint32_t zfg_busy_power_mw(const struct zfg_device* d, uint32_t sm_clock_mhz) {
  const double ratio = (double)sm_clock_mhz / (double)d->sm_clock_max_mhz;
  const double dynamic = (double)(d->power_full_mw - d->power_idle_mw);
  return d->power_idle_mw + (uint32_t)(dynamic * ratio * ratio * ratio);
}

uint32_t zfg_busy_sm_clock_mhz(const struct zfg_device* d) {
  uint32_t f = d->app_sm_clock_mhz;
  if (d->locked_max_mhz != 0) {
    if (f > d->locked_max_mhz) f = d->locked_max_mhz;
    if (f < d->locked_min_mhz) f = d->locked_min_mhz;
  }
  if (zfg_busy_power_mw(d, f) > d->power_limit_mw) {
    /* The power cap wins over everything: the highest clock whose busy power fits. */
    const double headroom = (double)d->power_limit_mw - (double)d->power_idle_mw;
    const double dynamic = (double)(d->power_full_mw - d->power_idle_mw);
    const double cap =
        headroom <= 0.0 ? 0.0 : (double)d->sm_clock_max_mhz * cbrt(headroom / dynamic);
    if ((double)f > cap) f = (uint32_t)cap;
  }
  if (f < d->sm_clock_min_mhz) f = d->sm_clock_min_mhz;
  return f;
}

uint32_t zfg_current_sm_clock_mhz(const struct zfg_device* d, uint64_t now_ns) {
  if (d->queue_tail_ns > now_ns) return zfg_busy_sm_clock_mhz(d);
  uint32_t f = d->sm_clock_idle_mhz;
  if (d->locked_max_mhz != 0 && f < d->locked_min_mhz) f = d->locked_min_mhz;
  return f;
}

uint64_t zfg_enqueue(struct zfg_shm* shm, uint32_t dev, int32_t pid, uint64_t duration_ns,
                     uint64_t now_ns) {
  struct zfg_device* d = &shm->devices[dev];
  const uint64_t ref = d->default_app_sm_clock_mhz;
  const uint64_t clk = zfg_busy_sm_clock_mhz(d);
  uint64_t scaled = duration_ns;
  if (clk != ref) {
    /* Slower clock, longer run; rounded up so that a lower clock never shortens work. */
    scaled =
        duration_ns > UINT64_MAX / ref ? UINT64_MAX / clk : (duration_ns * ref + clk - 1) / clk;
  }
  const uint64_t start = d->queue_tail_ns > now_ns ? d->queue_tail_ns : now_ns;
  if (scaled == 0) return start;
  const uint64_t end = scaled > UINT64_MAX - start ? UINT64_MAX : start + scaled;
  d->queue_tail_ns = end;

  if (d->ring_written > 0) {
    struct zfg_interval* last = &d->ring[(d->ring_written - 1) % ZFG_RING_CAPACITY];
    if (last->pid == pid && last->end_ns == start) {
      last->end_ns = end;
      return end;
    }
  }
  struct zfg_interval* slot = &d->ring[d->ring_written % ZFG_RING_CAPACITY];
  slot->start_ns = start;
  slot->end_ns = end;
  slot->pid = pid;
  slot->reserved = 0;
  d->ring_written++;
  return end;
}

static uint64_t overlap(const struct zfg_interval* iv, uint64_t from_ns, uint64_t to_ns) {
  const uint64_t lo = iv->start_ns > from_ns ? iv->start_ns : from_ns;
  const uint64_t hi = iv->end_ns < to_ns ? iv->end_ns : to_ns;
  return hi > lo ? hi - lo : 0;
}

static uint64_t ring_size(const struct zfg_device* d) {
  return d->ring_written < ZFG_RING_CAPACITY ? d->ring_written : ZFG_RING_CAPACITY;
}

uint64_t zfg_busy_ns(const struct zfg_device* d, uint64_t from_ns, uint64_t to_ns, int32_t pid) {
  uint64_t total = 0;
  const uint64_t n = ring_size(d);
  for (uint64_t i = 0; i < n; ++i) {
    const struct zfg_interval* iv = &d->ring[(d->ring_written - 1 - i) % ZFG_RING_CAPACITY];
    if (iv->end_ns <= from_ns) break; /* sorted, disjoint: everything older ended earlier */
    if (pid >= 0 && iv->pid != pid) continue;
    total += overlap(iv, from_ns, to_ns);
  }
  return total;
}

size_t zfg_busy_by_pid(const struct zfg_device* d, uint64_t from_ns, uint64_t to_ns, int32_t* pids,
                       uint64_t* busy_ns, size_t max) {
  size_t count = 0;
  const uint64_t n = ring_size(d);
  for (uint64_t i = 0; i < n; ++i) {
    const struct zfg_interval* iv = &d->ring[(d->ring_written - 1 - i) % ZFG_RING_CAPACITY];
    if (iv->end_ns <= from_ns) break;
    const uint64_t ns = overlap(iv, from_ns, to_ns);
    if (ns == 0) continue;
    size_t k = 0;
    while (k < count && pids[k] != iv->pid) ++k;
    if (k == count) {
      if (count == max) continue; /* more processes than the caller has room for */
      pids[count] = iv->pid;
      busy_ns[count] = 0;
      ++count;
    }
    busy_ns[k] += ns;
  }
  return count;
}

static int pid_is_dead(int32_t pid) { return kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

void zfg_prune_dead(struct zfg_shm* shm, int32_t device) {
  for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
    struct zfg_process* p = &shm->processes[i];
    if (p->pid == 0 || (device >= 0 && p->device != (uint32_t)device)) continue;
    if (pid_is_dead(p->pid)) memset(p, 0, sizeof(*p));
  }
}

int zfg_register_context(struct zfg_shm* shm, uint32_t dev, int32_t pid, uint64_t now_ns) {
  struct zfg_process* free_slot = NULL;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
      struct zfg_process* p = &shm->processes[i];
      if (p->pid == pid && p->device == dev) {
        p->contexts++;
        p->used_memory_bytes += ZFG_CONTEXT_MEMORY_BYTES;
        return 0;
      }
      if (p->pid == 0 && free_slot == NULL) free_slot = p;
    }
    if (free_slot != NULL) break;
    zfg_prune_dead(shm, -1); /* full: make room from processes that died without cleaning up */
  }
  if (free_slot == NULL) return -ENOSPC;
  free_slot->pid = pid;
  free_slot->device = dev;
  free_slot->contexts = 1;
  free_slot->used_memory_bytes = ZFG_CONTEXT_MEMORY_BYTES;
  free_slot->registered_ns = now_ns;
  free_slot->reserved = 0;
  return 0;
}

void zfg_unregister_context(struct zfg_shm* shm, uint32_t dev, int32_t pid) {
  for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
    struct zfg_process* p = &shm->processes[i];
    if (p->pid != pid || p->device != dev) continue;
    if (p->contexts > 1) {
      p->contexts--;
      p->used_memory_bytes -= ZFG_CONTEXT_MEMORY_BYTES;
    } else {
      memset(p, 0, sizeof(*p));
    }
    return;
  }
}

void zfg_unregister_pid(struct zfg_shm* shm, int32_t pid) {
  for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
    if (shm->processes[i].pid == pid) memset(&shm->processes[i], 0, sizeof(shm->processes[i]));
  }
}

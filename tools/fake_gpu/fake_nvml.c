/* A fake libnvidia-ml.so.1: the NVML entry points declared in src/sys/nvml_abi.h, with the
 * real C ABI, answering from the emulated GPU of fake_gpu_shm.h.
 *
 *   processes      the (pid, device) context table; dead pids are pruned before answering
 *   utilisation    device: busy share of the last second; per process: each pid's busy share of
 *                  the window since lastSeenTimeStamp (at most the last second), one sample per
 *                  pid that was busy in it, NVML_ERROR_NOT_FOUND when none was
 *   clocks, power  the settings in the segment, and the clock/power model of fake_gpu_shm.h
 *   setters        need root, as on the real driver, unless ZERNEL_FAKE_GPU_UNRESTRICTED=1
 *                  (the emulation of `nvidia-smi -acp UNRESTRICTED`)
 *
 * Memory utilisation is not modelled separately: it is reported as 40 % of the SM figure.
 * Every call holds this library's mutex for its whole length (calls are short) and the segment's
 * lock while it reads or writes the segment. nvmlInit/nvmlShutdown nest as in NVML; the last
 * shutdown unmaps the segment, so the next init follows a changed ZERNEL_FAKE_GPU_SHM.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_gpu_shm.h"

/* The API keeps default visibility (the rest of the library is hidden). */
#pragma GCC visibility push(default)
#include "sys/nvml_abi.h"
#pragma GCC visibility pop

#define ZFG_DRIVER_VERSION_STRING "560.35.03 (zernel emulated)"
#define ZFG_MAX_SAMPLED_PIDS 64

struct nvmlDevice_st {
  uint32_t index;
};

static struct nvmlDevice_st g_handles[ZFG_MAX_DEVICES] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_init_count;
static struct zfg_shm* g_shm;
/* Why the last init failed, returned by nvmlErrorString for that code. */
static nvmlReturn_t g_attach_code = NVML_SUCCESS;
static char g_attach_error[640];

__attribute__((destructor)) static void fake_nvml_fini(void) {
  if (pthread_mutex_trylock(&g_mutex) != 0) return; /* see fake_cuda_fini */
  zfg_detach(g_shm);
  g_shm = NULL;
  g_init_count = 0;
  pthread_mutex_unlock(&g_mutex);
}

/* ---- helpers ---- */

static int setters_allowed(void) {
  const char* env = getenv(ZFG_ENV_UNRESTRICTED);
  return geteuid() == 0 || (env != NULL && strcmp(env, "1") == 0);
}

/* With g_mutex held: the device behind a handle. */
static nvmlReturn_t lookup(nvmlDevice_t device, struct zfg_device** out) {
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  for (uint32_t i = 0; i < g_shm->device_count; ++i) {
    if (device == &g_handles[i]) {
      *out = &g_shm->devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

/* Every device call: take the library mutex, resolve the handle, take the segment lock. */
#define ENTER(device, d)                    \
  struct zfg_device* d = NULL;              \
  pthread_mutex_lock(&g_mutex);             \
  nvmlReturn_t rc = lookup((device), &(d)); \
  if (rc != NVML_SUCCESS) {                 \
    pthread_mutex_unlock(&g_mutex);         \
    return rc;                              \
  }                                         \
  zfg_lock(g_shm)

#define LEAVE(value)                \
  do {                              \
    zfg_unlock(g_shm);              \
    pthread_mutex_unlock(&g_mutex); \
    return (value);                 \
  } while (0)

static nvmlReturn_t copy_string(char* buf, unsigned int length, const char* text) {
  if (buf == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buf, text, strlen(text) + 1);
  return NVML_SUCCESS;
}

static unsigned int percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return 0;
  const uint64_t p = (part * 100 + whole / 2) / whole;
  return p > 100 ? 100u : (unsigned int)p;
}

/* ---- initialisation ---- */

static const char* standard_error_string(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_IRQ_ISSUE:
      return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_MEMORY:
      return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "The requested vgpu operation is not available on target device, because ECC is "
             "enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "The requested frequency is not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "The provided version is invalid/unsupported";
    case NVML_ERROR_DEPRECATED:
      return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY:
      return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "The GPU was not found";
    case NVML_ERROR_INVALID_STATE:
      return "The GPU is in an invalid state";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error";
  }
  return "Unknown Error";
}

const char* nvmlErrorString(nvmlReturn_t result) {
  if (result != NVML_SUCCESS && result == g_attach_code) return g_attach_error;
  return standard_error_string(result);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags; /* the emulated GPUs are always there and attached */
  pthread_mutex_lock(&g_mutex);
  nvmlReturn_t rc = NVML_SUCCESS;
  if (g_init_count == 0) {
    char err[512];
    int e = zfg_attach(&g_shm, err, sizeof(err));
    if (e != 0) {
      g_shm = NULL;
      rc = e == -EPROTO   ? NVML_ERROR_LIB_RM_VERSION_MISMATCH
           : e == -EACCES ? NVML_ERROR_NO_PERMISSION
                          : NVML_ERROR_DRIVER_NOT_LOADED;
      snprintf(g_attach_error, sizeof(g_attach_error), "%s (emulated GPU: %s)",
               standard_error_string(rc), err);
      g_attach_code = rc;
      fprintf(stderr, "zernel fake NVML: %s\n", err);
    } else {
      g_attach_code = NVML_SUCCESS;
    }
  }
  if (rc == NVML_SUCCESS) g_init_count++;
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
  pthread_mutex_lock(&g_mutex);
  nvmlReturn_t rc = NVML_SUCCESS;
  if (g_init_count == 0) {
    rc = NVML_ERROR_UNINITIALIZED;
  } else if (--g_init_count == 0) {
    zfg_detach(g_shm);
    g_shm = NULL;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  pthread_mutex_lock(&g_mutex);
  nvmlReturn_t rc = g_init_count == 0 ? NVML_ERROR_UNINITIALIZED
                                      : copy_string(version, length, ZFG_DRIVER_VERSION_STRING);
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

/* ---- devices ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  if (deviceCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&g_mutex);
  nvmlReturn_t rc = g_init_count == 0 ? NVML_ERROR_UNINITIALIZED : NVML_SUCCESS;
  if (rc == NVML_SUCCESS) *deviceCount = g_shm->device_count;
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  pthread_mutex_lock(&g_mutex);
  nvmlReturn_t rc = NVML_SUCCESS;
  if (g_init_count == 0) {
    rc = NVML_ERROR_UNINITIALIZED;
  } else if (index >= g_shm->device_count) {
    rc = NVML_ERROR_INVALID_ARGUMENT;
  } else {
    *device = &g_handles[index];
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  if (index == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  *index = (unsigned int)(d - g_shm->devices);
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  if (minorNumber == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  *minorNumber = (unsigned int)(d - g_shm->devices);
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  ENTER(device, d);
  rc = copy_string(name, length, d->name);
  LEAVE(rc);
}

/* The emulated GPU's UUID: fixed for its PCI address (FNV-1a of the bus id), so that the same
 * emulated machine reports the same ids from one run to the next, as a real one does. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  ENTER(device, d);
  uint64_t h = 14695981039346656037ull;
  for (const char* c = d->bus_id; *c != '\0'; ++c) {
    h ^= (unsigned char)*c;
    h *= 1099511628211ull;
  }
  char text[NVML_DEVICE_UUID_BUFFER_SIZE];
  snprintf(text, sizeof(text), "GPU-%08x-%04x-4%03x-8%03x-%012llx", (unsigned)(h >> 32),
           (unsigned)(h >> 16) & 0xffffu, (unsigned)h & 0xfffu, d->pci_bus & 0xfffu,
           (unsigned long long)(h & 0xffffffffffffull));
  rc = copy_string(uuid, length, text);
  LEAVE(rc);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  memset(pci, 0, sizeof(*pci));
  pci->domain = d->pci_domain;
  pci->bus = d->pci_bus;
  pci->device = d->pci_device;
  pci->pciDeviceId = d->pci_device_id;
  pci->pciSubSystemId = d->pci_subsystem_id;
  snprintf(pci->busId, sizeof(pci->busId), "%s", d->bus_id);
  snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", d->pci_domain & 0xffffu,
           d->pci_bus & 0xffu, d->pci_device & 0x1fu, d->pci_function & 0x7u);
  LEAVE(NVML_SUCCESS);
}

/* ---- utilisation ---- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  if (utilization == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  const uint64_t now = zfg_now_ns();
  const uint64_t from = now > ZFG_UTIL_PERIOD_NS ? now - ZFG_UTIL_PERIOD_NS : 0;
  const unsigned int gpu = percent(zfg_busy_ns(d, from, now, -1), now - from);
  utilization->gpu = gpu;
  utilization->memory = gpu * 2 / 5;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
  if (processSamplesCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  const uint64_t now = zfg_now_ns();
  const uint64_t real = zfg_realtime_ns();
  uint64_t from = now > ZFG_PROC_HORIZON_NS ? now - ZFG_PROC_HORIZON_NS : 0;
  if (lastSeenTimeStamp != 0) {
    /* lastSeenTimeStamp is CLOCK_REALTIME µs; the intervals are CLOCK_MONOTONIC ns. */
    const uint64_t seen_ns =
        lastSeenTimeStamp > UINT64_MAX / 1000 ? UINT64_MAX : lastSeenTimeStamp * 1000;
    if (seen_ns >= real) {
      from = now;
    } else {
      const uint64_t age = real - seen_ns;
      const uint64_t seen_mono = now > age ? now - age : 0;
      if (seen_mono > from) from = seen_mono;
    }
  }
  int32_t pids[ZFG_MAX_SAMPLED_PIDS];
  uint64_t busy[ZFG_MAX_SAMPLED_PIDS];
  const size_t n = from < now ? zfg_busy_by_pid(d, from, now, pids, busy, ZFG_MAX_SAMPLED_PIDS) : 0;
  if (n == 0) {
    *processSamplesCount = 0;
    LEAVE(NVML_ERROR_NOT_FOUND);
  }
  if (utilization == NULL || *processSamplesCount < n) {
    *processSamplesCount = (unsigned int)n;
    LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
  }
  for (size_t i = 0; i < n; ++i) {
    nvmlProcessUtilizationSample_t* s = &utilization[i];
    memset(s, 0, sizeof(*s));
    s->pid = (unsigned int)pids[i];
    s->timeStamp = real / 1000;
    s->smUtil = percent(busy[i], now - from);
    s->memUtil = s->smUtil * 2 / 5;
  }
  *processSamplesCount = (unsigned int)n;
  LEAVE(NVML_SUCCESS);
}

/* The processes with a context on `d` (pruned first), written by `put` as the caller's layout. */
typedef void (*put_process_fn)(void* infos, size_t i, const struct zfg_process* p);

static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int* infoCount, void* infos,
                                      put_process_fn put) {
  if (infoCount == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  const uint32_t index = (uint32_t)(d - g_shm->devices);
  zfg_prune_dead(g_shm, (int32_t)index); /* this device's entries only: a list per GPU */
  unsigned int n = 0;
  for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
    if (g_shm->processes[i].pid != 0 && g_shm->processes[i].device == index) ++n;
  }
  if (*infoCount < n) {
    *infoCount = n;
    LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
  }
  if (n > 0 && infos == NULL) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
  size_t k = 0;
  for (size_t i = 0; i < ZFG_MAX_PROCESSES; ++i) {
    const struct zfg_process* p = &g_shm->processes[i];
    if (p->pid != 0 && p->device == index) put(infos, k++, p);
  }
  *infoCount = n;
  LEAVE(NVML_SUCCESS);
}

static void put_v2(void* infos, size_t i, const struct zfg_process* p) {
  nvmlProcessInfo_v2_t* out = (nvmlProcessInfo_v2_t*)infos + i;
  memset(out, 0, sizeof(*out));
  out->pid = (unsigned int)p->pid;
  out->usedGpuMemory = p->used_memory_bytes;
  out->gpuInstanceId = 0xFFFFFFFFu;
  out->computeInstanceId = 0xFFFFFFFFu;
}

static void put_v1(void* infos, size_t i, const struct zfg_process* p) {
  nvmlProcessInfo_v1_t* out = (nvmlProcessInfo_v1_t*)infos + i;
  memset(out, 0, sizeof(*out));
  out->pid = (unsigned int)p->pid;
  out->usedGpuMemory = p->used_memory_bytes;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos) {
  return running_processes(device, infoCount, infos, put_v2);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos) {
  return running_processes(device, infoCount, infos, put_v2);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos) {
  return running_processes(device, infoCount, infos, put_v1);
}

/* ---- clocks ---- */

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  const uint32_t sm = zfg_current_sm_clock_mhz(d, zfg_now_ns());
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      *clock = sm;
      break;
    case NVML_CLOCK_MEM:
      *clock = d->mem_clock_mhz;
      break;
    case NVML_CLOCK_VIDEO:
      *clock = (unsigned int)((uint64_t)sm * d->video_clock_max_mhz / d->sm_clock_max_mhz);
      break;
    case NVML_CLOCK_COUNT:
    default:
      rc = NVML_ERROR_INVALID_ARGUMENT;
      break;
  }
  LEAVE(rc);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock) {
  if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      *clock = d->sm_clock_max_mhz;
      break;
    case NVML_CLOCK_MEM:
      *clock = d->mem_clock_mhz;
      break;
    case NVML_CLOCK_VIDEO:
      *clock = d->video_clock_max_mhz;
      break;
    case NVML_CLOCK_COUNT:
    default:
      rc = NVML_ERROR_INVALID_ARGUMENT;
      break;
  }
  LEAVE(rc);
}

static nvmlReturn_t app_clock(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock,
                              int defaults) {
  if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      *clock = defaults ? d->default_app_sm_clock_mhz : d->app_sm_clock_mhz;
      break;
    case NVML_CLOCK_MEM:
      *clock = defaults ? d->default_app_mem_clock_mhz : d->app_mem_clock_mhz;
      break;
    case NVML_CLOCK_VIDEO:
      rc = NVML_ERROR_NOT_SUPPORTED;
      break;
    case NVML_CLOCK_COUNT:
    default:
      rc = NVML_ERROR_INVALID_ARGUMENT;
      break;
  }
  LEAVE(rc);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                            unsigned int* clockMHz) {
  return app_clock(device, clockType, clockMHz, 0);
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int* clockMHz) {
  return app_clock(device, clockType, clockMHz, 1);
}

nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz,
                                             unsigned int graphicsClockMHz) {
  ENTER(device, d);
  if (!setters_allowed()) LEAVE(NVML_ERROR_NO_PERMISSION);
  if (memClockMHz != d->mem_clock_mhz || graphicsClockMHz < d->sm_clock_min_mhz ||
      graphicsClockMHz > d->sm_clock_max_mhz) {
    LEAVE(NVML_ERROR_INVALID_ARGUMENT);
  }
  d->app_mem_clock_mhz = memClockMHz;
  d->app_sm_clock_mhz = graphicsClockMHz;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device) {
  ENTER(device, d);
  if (!setters_allowed()) LEAVE(NVML_ERROR_NO_PERMISSION);
  d->app_mem_clock_mhz = d->default_app_mem_clock_mhz;
  d->app_sm_clock_mhz = d->default_app_sm_clock_mhz;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                          unsigned int maxGpuClockMHz) {
  ENTER(device, d);
  if (!setters_allowed()) LEAVE(NVML_ERROR_NO_PERMISSION);
  if (minGpuClockMHz > maxGpuClockMHz || minGpuClockMHz < d->sm_clock_min_mhz ||
      maxGpuClockMHz > d->sm_clock_max_mhz) {
    LEAVE(NVML_ERROR_INVALID_ARGUMENT);
  }
  d->locked_min_mhz = minGpuClockMHz;
  d->locked_max_mhz = maxGpuClockMHz;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  ENTER(device, d);
  if (!setters_allowed()) LEAVE(NVML_ERROR_NO_PERMISSION);
  d->locked_min_mhz = 0;
  d->locked_max_mhz = 0;
  LEAVE(NVML_SUCCESS);
}

/* ---- power ---- */

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  if (power == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  /* Average over the last second: idle power plus the busy share of the dynamic power. */
  const uint64_t now = zfg_now_ns();
  const uint64_t from = now > ZFG_UTIL_PERIOD_NS ? now - ZFG_UTIL_PERIOD_NS : 0;
  const uint64_t busy = zfg_busy_ns(d, from, now, -1);
  const uint64_t dynamic = zfg_busy_power_mw(d, zfg_busy_sm_clock_mhz(d)) - d->power_idle_mw;
  *power = d->power_idle_mw + (unsigned int)(now > from ? dynamic * busy / (now - from) : 0);
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
  if (limit == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  *limit = d->power_limit_mw;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                      unsigned int* defaultLimit) {
  if (defaultLimit == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  *defaultLimit = d->power_default_limit_mw;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                          unsigned int* minLimit,
                                                          unsigned int* maxLimit) {
  if (minLimit == NULL || maxLimit == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  ENTER(device, d);
  *minLimit = d->power_min_limit_mw;
  *maxLimit = d->power_max_limit_mw;
  LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit) {
  ENTER(device, d);
  if (!setters_allowed()) LEAVE(NVML_ERROR_NO_PERMISSION);
  if (limit < d->power_min_limit_mw || limit > d->power_max_limit_mw) {
    LEAVE(NVML_ERROR_INVALID_ARGUMENT);
  }
  d->power_limit_mw = limit;
  LEAVE(NVML_SUCCESS);
}

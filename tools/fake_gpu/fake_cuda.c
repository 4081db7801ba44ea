/* A fake libcuda.so.1: the subset of the CUDA driver API listed in zernel_fake_cuda.h, with the
 * real names and C ABI, driving the emulated GPU of fake_gpu_shm.h.
 *
 * What a program sees. cuInit attaches the shared segment (creating it if needed). A context
 * (primary or created) registers this process on its device, so the fake NVML lists it as a
 * compute process; destroying the last one on a device, or unloading the library (exit),
 * unregisters it, and a process that dies without either is pruned by the readers. zfgEnqueueWork
 * queues device time and returns at once, like a kernel launch; cuStreamSynchronize,
 * cuEventSynchronize and cuCtxSynchronize sleep (clock_nanosleep, CLOCK_MONOTONIC, absolute)
 * until the work they wait for has finished, like the driver's blocking sync; in a context whose
 * scheduling flags are CU_CTX_SCHED_SPIN (cuDevicePrimaryCtxSetFlags, cuCtxCreate), they spin on
 * the clock instead, like the driver's spin-wait (its default while a process's threads do not
 * outnumber the CPUs). Other flags (auto, yield, blocking sync) sleep.
 *
 * Those three are exported, never inlined and really block inside themselves, because the
 * scheduler's BPF uprobes attach to them by symbol in the library the process maps, exactly as
 * on the real driver: entry = the thread starts waiting on the GPU, return = it stops.
 *
 * Streams of one device share the device's serial queue (a real GPU may overlap them); a stream
 * remembers when its last work ends, a context when any of its work ends, an event the end of
 * its stream's work when it was recorded. Handles are checked against this process's live
 * objects, so a stale or foreign handle is CUDA_ERROR_INVALID_HANDLE/CONTEXT, not a crash.
 *
 * Thread safety: one mutex guards this process's objects (taken before the shared segment's lock,
 * never after); the current context is per thread, as in CUDA. A forked child starts with no
 * contexts and must call cuInit again (the real driver refuses CUDA in such a child entirely; we
 * are more lenient, which only matters to programs that break that rule).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fake_gpu_shm.h"
#include "zernel_fake_cuda.h"

#define ZFG_EXPORT __attribute__((visibility("default")))
/* Synchronisation entry points: uprobe targets, so never inlined or folded away. */
#define ZFG_SYNC_EXPORT __attribute__((visibility("default"), noinline, used))

/* CUDA driver API types and codes (cuda.h's public ABI). */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_OPERATING_SYSTEM = 304,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_UNKNOWN = 999,
};

enum { /* a context's scheduling flags (the driver's CUctx_flags) */
       CU_CTX_SCHED_SPIN = 0x01,
       CU_CTX_SCHED_MASK = 0x07,
};

#define ZFG_DRIVER_VERSION 12040 /* CUDA 12.4 */

/* Prototypes of the exported API (definitions below are checked against them). */
ZFG_EXPORT CUresult cuInit(unsigned int flags);
ZFG_EXPORT CUresult cuDriverGetVersion(int* version);
ZFG_EXPORT CUresult cuDeviceGetCount(int* count);
ZFG_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal);
ZFG_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev);
ZFG_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev);
ZFG_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
ZFG_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
ZFG_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
ZFG_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
ZFG_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
ZFG_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev);
ZFG_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx);
ZFG_EXPORT CUresult cuCtxDestroy(CUcontext ctx);
ZFG_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx);
ZFG_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx);
ZFG_EXPORT CUresult cuCtxGetDevice(CUdevice* device);
ZFG_SYNC_EXPORT CUresult cuCtxSynchronize(void);
ZFG_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int flags);
ZFG_EXPORT CUresult cuStreamDestroy_v2(CUstream stream);
ZFG_EXPORT CUresult cuStreamDestroy(CUstream stream);
ZFG_SYNC_EXPORT CUresult cuStreamSynchronize(CUstream stream);
ZFG_EXPORT CUresult cuStreamQuery(CUstream stream);
ZFG_EXPORT CUresult cuEventCreate(CUevent* phEvent, unsigned int flags);
ZFG_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream);
ZFG_SYNC_EXPORT CUresult cuEventSynchronize(CUevent event);
ZFG_EXPORT CUresult cuEventQuery(CUevent event);
ZFG_EXPORT CUresult cuEventDestroy_v2(CUevent event);
ZFG_EXPORT CUresult cuEventDestroy(CUevent event);
ZFG_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr);
ZFG_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr);
ZFG_EXPORT int zfgEnqueueWork(void* stream, unsigned long long duration_ns);

struct CUstream_st {
  struct CUctx_st* ctx;
  uint64_t last_end_ns; /* CLOCK_MONOTONIC end of its last queued work, 0 = none */
  struct CUstream_st* next;
};

struct CUctx_st {
  uint32_t device;
  int primary;
  int active; /* a primary context is active while retained */
  uint32_t primary_refs;
  uint64_t last_end_ns; /* end of the last work queued in this context */
  int spin;             /* 1: its syncs spin (CU_CTX_SCHED_SPIN), else they sleep */
  struct CUstream_st default_stream;
  struct CUctx_st* next; /* created contexts only */
};

struct CUevent_st {
  int recorded;
  uint64_t time_ns; /* work recorded before it ends at this time */
  struct CUevent_st* next;
};

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static struct zfg_shm* g_shm;
static int g_initialized;
static int32_t g_pid; /* the process whose contexts are registered */
static struct CUctx_st g_primary[ZFG_MAX_DEVICES];
static int g_primary_spin[ZFG_MAX_DEVICES]; /* cuDevicePrimaryCtxSetFlags: CU_CTX_SCHED_SPIN */
static struct CUctx_st* g_contexts;
static struct CUstream_st* g_streams;
static struct CUevent_st* g_events;
static _Thread_local struct CUctx_st* t_current;

/* ---- helpers (g_mutex held) ---- */

static int ctx_is_live(const struct CUctx_st* c) {
  if (c == NULL) return 0;
  for (size_t i = 0; i < ZFG_MAX_DEVICES; ++i) {
    if (c == &g_primary[i]) return c->active;
  }
  for (const struct CUctx_st* it = g_contexts; it != NULL; it = it->next) {
    if (it == c) return 1;
  }
  return 0;
}

static struct CUctx_st* current_ctx(void) { return ctx_is_live(t_current) ? t_current : NULL; }

static int stream_is_live(const struct CUstream_st* s) {
  for (const struct CUstream_st* it = g_streams; it != NULL; it = it->next) {
    if (it == s) return 1;
  }
  return 0;
}

static int event_is_live(const struct CUevent_st* e) {
  for (const struct CUevent_st* it = g_events; it != NULL; it = it->next) {
    if (it == e) return 1;
  }
  return 0;
}

/* NULL = the current context's default stream; else a live stream. NULL result = invalid. */
static struct CUstream_st* resolve_stream(struct CUstream_st* s, CUresult* err) {
  if (s == NULL) {
    struct CUctx_st* c = current_ctx();
    if (c == NULL) {
      *err = CUDA_ERROR_INVALID_CONTEXT;
      return NULL;
    }
    return &c->default_stream;
  }
  if (!stream_is_live(s)) {
    *err = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
  }
  return s;
}

static void destroy_streams_of(const struct CUctx_st* c) {
  struct CUstream_st** link = &g_streams;
  while (*link != NULL) {
    struct CUstream_st* s = *link;
    if (s->ctx == c) {
      *link = s->next;
      free(s);
    } else {
      link = &s->next;
    }
  }
}

static CUresult register_on_device(uint32_t dev) {
  zfg_lock(g_shm);
  int rc = zfg_register_context(g_shm, dev, g_pid, zfg_now_ns());
  zfg_unlock(g_shm);
  if (rc != 0) {
    fprintf(stderr,
            "zernel fake libcuda: no room for another process context on the emulated GPU\n");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

static void unregister_from_device(uint32_t dev) {
  zfg_lock(g_shm);
  zfg_unregister_context(g_shm, dev, g_pid);
  zfg_unlock(g_shm);
}

static void init_context(struct CUctx_st* c, uint32_t dev, int primary) {
  memset(c, 0, sizeof(*c));
  c->device = dev;
  c->primary = primary;
  c->active = 1;
  c->default_stream.ctx = c;
}

static void free_all(void) {
  while (g_contexts != NULL) {
    struct CUctx_st* c = g_contexts;
    g_contexts = c->next;
    free(c);
  }
  while (g_streams != NULL) {
    struct CUstream_st* s = g_streams;
    g_streams = s->next;
    free(s);
  }
  while (g_events != NULL) {
    struct CUevent_st* e = g_events;
    g_events = e->next;
    free(e);
  }
  memset(g_primary, 0, sizeof(g_primary));
  memset(g_primary_spin, 0, sizeof(g_primary_spin));
}

/* ---- fork: the child holds no context (its pid differs; the parent's stay the parent's) ---- */

static void atfork_prepare(void) { pthread_mutex_lock(&g_mutex); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_mutex); }
static void atfork_child(void) {
  free_all();
  t_current = NULL;
  g_initialized = 0; /* the mapping of the segment is inherited and reused by cuInit */
  pthread_mutex_unlock(&g_mutex);
}
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* Unload or exit. trylock: a thread that exit() overtook inside a call may hold the mutex, and
 * waiting for it could hang the exit; skipping leaves the entries to the readers' pruning. */
__attribute__((destructor)) static void fake_cuda_fini(void) {
  if (pthread_mutex_trylock(&g_mutex) != 0) return;
  if (g_shm != NULL) {
    if (g_initialized && g_pid == (int32_t)getpid()) {
      zfg_lock(g_shm);
      zfg_unregister_pid(g_shm, g_pid);
      zfg_unlock(g_shm);
    }
    zfg_detach(g_shm);
    g_shm = NULL;
  }
  free_all();
  g_initialized = 0;
  pthread_mutex_unlock(&g_mutex);
}

/* Waits until `end_ns` unless it has passed: spinning on the clock (`spin`) or asleep. Called
 * without g_mutex. */
static void wait_for(uint64_t end_ns, int spin) {
  if (!spin) {
    if (end_ns > zfg_now_ns()) zfg_sleep_until(end_ns);
    return;
  }
  while (zfg_now_ns() < end_ns) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* Whether `flags` (a context's CU_CTX_SCHED_* bits) ask for spin-waits. */
static int spins(unsigned int flags) { return (flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_SPIN; }

/* ---- initialisation and devices ---- */

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_once(&g_atfork_once, register_atfork);
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  if (!g_initialized) {
    if (g_shm == NULL) {
      char err[512];
      int e = zfg_attach(&g_shm, err, sizeof(err));
      if (e != 0) {
        fprintf(stderr, "zernel fake libcuda: %s\n", err);
        g_shm = NULL;
        rc = e == -EPROTO ? CUDA_ERROR_SYSTEM_DRIVER_MISMATCH : CUDA_ERROR_OPERATING_SYSTEM;
      }
    }
    if (rc == CUDA_SUCCESS) {
      g_pid = (int32_t)getpid();
      g_initialized = 1;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = ZFG_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

static CUresult check_device(CUdevice dev) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || (uint32_t)dev >= g_shm->device_count) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = g_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  if (rc == CUDA_SUCCESS) *count = (int)g_shm->device_count;
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(ordinal);
  if (rc == CUDA_SUCCESS) *device = ordinal;
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(dev);
  if (rc == CUDA_SUCCESS) {
    zfg_lock(g_shm);
    snprintf(name, (size_t)len, "%s", g_shm->devices[dev].name);
    zfg_unlock(g_shm);
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

/* ---- contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(dev);
  if (rc == CUDA_SUCCESS) {
    struct CUctx_st* c = &g_primary[dev];
    if (c->primary_refs == 0) {
      rc = register_on_device((uint32_t)dev);
      if (rc == CUDA_SUCCESS) {
        init_context(c, (uint32_t)dev, 1);
        c->spin = g_primary_spin[dev];
      }
    }
    if (rc == CUDA_SUCCESS) {
      c->primary_refs++;
      *pctx = c;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(dev);
  if (rc == CUDA_SUCCESS) {
    struct CUctx_st* c = &g_primary[dev];
    if (c->primary_refs == 0) {
      rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--c->primary_refs == 0) {
      c->active = 0;
      destroy_streams_of(c);
      unregister_from_device((uint32_t)dev);
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(dev);
  if (rc == CUDA_SUCCESS) { /* for its next activation, and the active one at once */
    g_primary_spin[dev] = spins(flags);
    g_primary[dev].spin = g_primary_spin[dev];
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = check_device(dev);
  struct CUctx_st* c = NULL;
  if (rc == CUDA_SUCCESS) {
    c = malloc(sizeof(*c));
    if (c == NULL) rc = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (rc == CUDA_SUCCESS) rc = register_on_device((uint32_t)dev);
  if (rc == CUDA_SUCCESS) {
    init_context(c, (uint32_t)dev, 0);
    c->spin = spins(flags);
    c->next = g_contexts;
    g_contexts = c;
    t_current = c;
    *pctx = c;
  } else {
    free(c);
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_ERROR_INVALID_CONTEXT;
  for (struct CUctx_st** link = &g_contexts; *link != NULL; link = &(*link)->next) {
    if (*link != ctx) continue;
    *link = ctx->next;
    destroy_streams_of(ctx);
    unregister_from_device(ctx->device);
    if (t_current == ctx) t_current = NULL;
    free(ctx);
    rc = CUDA_SUCCESS;
    break;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

CUresult cuCtxSetCurrent(CUcontext ctx) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  if (!g_initialized) {
    rc = CUDA_ERROR_NOT_INITIALIZED;
  } else if (ctx != NULL && !ctx_is_live(ctx)) {
    rc = CUDA_ERROR_INVALID_CONTEXT;
  } else {
    t_current = ctx;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = g_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
  if (rc == CUDA_SUCCESS) *pctx = current_ctx();
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  struct CUctx_st* c = current_ctx();
  if (c != NULL) *device = (CUdevice)c->device;
  pthread_mutex_unlock(&g_mutex);
  return c != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxSynchronize(void) {
  pthread_mutex_lock(&g_mutex);
  struct CUctx_st* c = current_ctx();
  const uint64_t end = c != NULL ? c->last_end_ns : 0;
  const int spin = c != NULL && c->spin;
  pthread_mutex_unlock(&g_mutex);
  if (c == NULL) return CUDA_ERROR_INVALID_CONTEXT;
  wait_for(end, spin);
  return CUDA_SUCCESS;
}

/* ---- streams ---- */

CUresult cuStreamCreate(CUstream* phStream, unsigned int flags) {
  (void)flags;
  if (phStream == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  struct CUctx_st* c = current_ctx();
  CUresult rc = c != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS) {
    struct CUstream_st* s = calloc(1, sizeof(*s));
    if (s == NULL) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      s->ctx = c;
      s->next = g_streams;
      g_streams = s;
      *phStream = s;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_ERROR_INVALID_HANDLE;
  for (struct CUstream_st** link = &g_streams; *link != NULL; link = &(*link)->next) {
    if (*link != stream) continue;
    *link = stream->next;
    free(stream);
    rc = CUDA_SUCCESS;
    break;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuStreamDestroy(CUstream stream) { return cuStreamDestroy_v2(stream); }

CUresult cuStreamSynchronize(CUstream stream) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  struct CUstream_st* s = resolve_stream(stream, &rc);
  const uint64_t end = s != NULL ? s->last_end_ns : 0;
  const int spin = s != NULL && s->ctx != NULL && s->ctx->spin;
  pthread_mutex_unlock(&g_mutex);
  if (s == NULL) return rc;
  wait_for(end, spin);
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream stream) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  struct CUstream_st* s = resolve_stream(stream, &rc);
  if (s != NULL) rc = s->last_end_ns > zfg_now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

/* ---- events ---- */

CUresult cuEventCreate(CUevent* phEvent, unsigned int flags) {
  (void)flags;
  if (phEvent == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  CUresult rc = current_ctx() != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  if (rc == CUDA_SUCCESS) {
    struct CUevent_st* e = calloc(1, sizeof(*e));
    if (e == NULL) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      e->next = g_events;
      g_events = e;
      *phEvent = e;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  if (!event_is_live(event)) {
    rc = CUDA_ERROR_INVALID_HANDLE;
  } else {
    struct CUstream_st* s = resolve_stream(stream, &rc);
    if (s != NULL) {
      event->recorded = 1;
      event->time_ns = s->last_end_ns;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuEventSynchronize(CUevent event) {
  pthread_mutex_lock(&g_mutex);
  const int live = event_is_live(event);
  const uint64_t end = live && event->recorded ? event->time_ns : 0;
  struct CUctx_st* c = current_ctx(); /* events keep no context: the calling thread's */
  const int spin = c != NULL && c->spin;
  pthread_mutex_unlock(&g_mutex);
  if (!live) return CUDA_ERROR_INVALID_HANDLE;
  wait_for(end, spin);
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent event) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_ERROR_INVALID_HANDLE;
  if (event_is_live(event)) {
    rc = event->recorded && event->time_ns > zfg_now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuEventDestroy_v2(CUevent event) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_ERROR_INVALID_HANDLE;
  for (struct CUevent_st** link = &g_events; *link != NULL; link = &(*link)->next) {
    if (*link != event) continue;
    *link = event->next;
    free(event);
    rc = CUDA_SUCCESS;
    break;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

CUresult cuEventDestroy(CUevent event) { return cuEventDestroy_v2(event); }

/* ---- errors ---- */

struct error_text {
  CUresult code;
  const char* name;
  const char* text;
};

static const struct error_text kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct error_text* find_error(CUresult code) {
  for (size_t i = 0; i < sizeof(kErrors) / sizeof(kErrors[0]); ++i) {
    if (kErrors[i].code == code) return &kErrors[i];
  }
  return NULL;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
  const struct error_text* e = find_error(error);
  *pStr = e != NULL ? e->text : NULL;
  return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
  const struct error_text* e = find_error(error);
  *pStr = e != NULL ? e->name : NULL;
  return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- the extension: queue device time ---- */

int zfgEnqueueWork(void* stream, unsigned long long duration_ns) {
  pthread_mutex_lock(&g_mutex);
  CUresult rc = CUDA_SUCCESS;
  struct CUctx_st* c = g_initialized ? current_ctx() : NULL;
  struct CUstream_st* s = NULL;
  if (c == NULL) {
    rc = CUDA_ERROR_INVALID_CONTEXT;
  } else {
    s = resolve_stream(stream, &rc);
  }
  if (s != NULL) {
    zfg_lock(g_shm);
    const uint64_t end = zfg_enqueue(g_shm, s->ctx->device, g_pid, duration_ns, zfg_now_ns());
    zfg_unlock(g_shm);
    if (end > s->last_end_ns) s->last_end_ns = end;
    if (end > s->ctx->last_end_ns) s->ctx->last_end_ns = end;
  }
  pthread_mutex_unlock(&g_mutex);
  return rc;
}

/* The part of NVML's public C ABI (libnvidia-ml.so.1) that zernel-sched uses: types, constants
 * and the prototypes of the entry points, written from NVIDIA's public API reference (this is
 * our own header, not a copy of nvml.h).
 *
 * One header, two users, so they cannot drift:
 *   - src/sys/nvml.cpp dlopens the library and types every dlsym() result with
 *     decltype(&nvmlXxx), so a wrong prototype here is a compile error there;
 *   - tools/fake_gpu/fake_nvml.c implements these prototypes (the compiler checks each
 *     definition against its declaration here).
 * The size and offset asserts at the end pin the layouts of the structs that cross the ABI;
 * they are checked by both the C and the C++ compiler.
 *
 * Plain C, fixed by the ABI: `unsigned int` is 32 bits, `unsigned long long` 64 bits, enums are
 * int-sized (x86-64 and aarch64 SysV).
 */
#ifndef ZERNEL_NVML_ABI_H
#define ZERNEL_NVML_ABI_H

#ifdef __cplusplus
extern "C" {
#endif
/* Plain C shared with fake_nvml.c and NVML's ABI: typedef, not `using`.
 * NOLINTBEGIN(modernize-use-using) */

/* Return codes (nvmlReturn_t). */
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* nvmlInitWithFlags flags. */
#define NVML_INIT_FLAG_NO_GPUS 1u   /* succeed even when no GPU is present */
#define NVML_INIT_FLAG_NO_ATTACH 2u /* do not attach the GPUs */

/* Buffer sizes guaranteed to be large enough (including the terminating NUL). */
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_UUID_BUFFER_SIZE 80 /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96

/* usedGpuMemory when the driver cannot tell (e.g. without permission on Windows/WDDM). */
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFull

/* Opaque device handle. */
typedef struct nvmlDevice_st* nvmlDevice_t;

/* Clock domains. */
typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
  NVML_CLOCK_COUNT = 4
} nvmlClockType_t;

/* PCI information, current (_v3) layout. busId is "00000000:1B:00.0" (8-digit domain, upper-case
 * hex); busIdLegacy is the same with a 4-digit domain, "0000:1B:00.0". */
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;         /* PCI domain, 0..0xffffffff */
  unsigned int bus;            /* 0..0xff */
  unsigned int device;         /* device on the bus, 0..31 */
  unsigned int pciDeviceId;    /* (16-bit device id << 16) | 16-bit vendor id */
  unsigned int pciSubSystemId; /* 32-bit subsystem device id */
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* Device utilisation over the past sample period (1 s .. 1/6 s depending on the product). */
typedef struct nvmlUtilization_st {
  unsigned int gpu;    /* percent of time one or more kernels was executing */
  unsigned int memory; /* percent of time device memory was being read or written */
} nvmlUtilization_t;

/* A process with a context on the device (_v1 layout: nvmlDeviceGetComputeRunningProcesses). */
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes, or NVML_VALUE_NOT_AVAILABLE_ULL */
} nvmlProcessInfo_v1_t;

/* _v2 layout, used by both the _v2 and the _v3 entry points. Instance ids are 0xFFFFFFFF
 * outside MIG. */
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes, or NVML_VALUE_NOT_AVAILABLE_ULL */
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef nvmlProcessInfo_v2_t nvmlProcessInfo_t;

/* One per-process utilisation sample (nvmlDeviceGetProcessUtilization). */
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp; /* CPU timestamp, microseconds (CLOCK_REALTIME) */
  unsigned int smUtil;          /* percent */
  unsigned int memUtil;         /* percent */
  unsigned int encUtil;         /* percent */
  unsigned int decUtil;         /* percent */
} nvmlProcessUtilizationSample_t;

/* Initialisation; NVML counts nested init/shutdown pairs. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);

/* Devices. */
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
/* The device's globally unique id, "GPU-" and a UUID (MIG instances: "MIG-..."), into a caller's
 * buffer of `length` bytes; NVML_ERROR_INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);

/* Utilisation. The list calls follow NVML's size protocol: a count too small for the answer
 * (0 to ask) returns NVML_ERROR_INSUFFICIENT_SIZE with the needed count written back. */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
/* Samples newer than lastSeenTimeStamp (µs; 0 = all buffered); NVML_ERROR_NOT_FOUND when none.
 * utilization NULL asks for the count (NVML_ERROR_INSUFFICIENT_SIZE). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp);
/* *infoCount 0 with infos NULL asks for the count: NVML_SUCCESS when there is no process,
 * NVML_ERROR_INSUFFICIENT_SIZE otherwise. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos);

/* Clocks, MHz. Setters need root (NVML_ERROR_NO_PERMISSION otherwise). */
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock);
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                            unsigned int* clockMHz);
nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int* clockMHz);
nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz,
                                             unsigned int graphicsClockMHz);
nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device);
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                          unsigned int maxGpuClockMHz);
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device);

/* Power, milliwatts. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power);
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit);
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                      unsigned int* defaultLimit);
nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                          unsigned int* minLimit,
                                                          unsigned int* maxLimit);
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit);

/* Layout pins (x86-64 / aarch64 LP64). */
#ifdef __cplusplus
#define ZERNEL_NVML_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define ZERNEL_NVML_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
ZERNEL_NVML_ASSERT(sizeof(unsigned int) == 4 && sizeof(unsigned long long) == 8, "LP64 ABI");
ZERNEL_NVML_ASSERT(sizeof(nvmlReturn_t) == 4 && sizeof(nvmlClockType_t) == 4, "enums are int");
ZERNEL_NVML_ASSERT(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t size");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
ZERNEL_NVML_ASSERT(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t size");
ZERNEL_NVML_ASSERT(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t size");
ZERNEL_NVML_ASSERT(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t size");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) == 8,
                   "nvmlProcessInfo_v2_t.usedGpuMemory");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlProcessInfo_v2_t, computeInstanceId) == 20,
                   "nvmlProcessInfo_v2_t.computeInstanceId");
ZERNEL_NVML_ASSERT(sizeof(nvmlProcessUtilizationSample_t) == 32,
                   "nvmlProcessUtilizationSample_t size");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8,
                   "nvmlProcessUtilizationSample_t.timeStamp");
ZERNEL_NVML_ASSERT(__builtin_offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16,
                   "nvmlProcessUtilizationSample_t.smUtil");
#undef ZERNEL_NVML_ASSERT

/* NOLINTEND(modernize-use-using) */
#ifdef __cplusplus
}
#endif

#endif /* ZERNEL_NVML_ABI_H */

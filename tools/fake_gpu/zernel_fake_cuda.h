/* The contract between the emulated GPU (tools/fake_gpu: a fake libcuda.so.1 and a fake
 * libnvidia-ml.so.1) and the programs that drive it (zernel-workload).
 *
 * The fake libcuda implements a subset of the CUDA driver API with the real names and C ABI:
 *   cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName,
 *   cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxCreate_v2, cuCtxDestroy_v2,
 *   cuCtxSetCurrent, cuCtxGetCurrent, cuCtxSynchronize, cuStreamCreate, cuStreamDestroy_v2,
 *   cuStreamSynchronize, cuStreamQuery, cuEventCreate, cuEventRecord, cuEventSynchronize,
 *   cuEventDestroy_v2, cuGetErrorString, cuGetErrorName
 * (CUresult is int, 0 = CUDA_SUCCESS; handles are opaque pointers; CUdevice is int.)
 * It also exports cuDevicePrimaryCtxSetFlags(_v2), cuCtxGetDevice, cuEventQuery, and the older
 * unsuffixed names the real library keeps (cuCtxCreate, cuCtxDestroy, cuStreamDestroy,
 * cuEventDestroy, cuDevicePrimaryCtxRelease) beside the _v2 ones.
 *
 * Work is submitted with one extension: zfgEnqueueWork queues `duration_ns` of device time on
 * the stream's device (work on a device runs back to back, so it starts when the device's queue
 * drains) and returns at once, as a kernel launch does. The synchronisation calls block until the
 * relevant work has finished (a stream's, an event's recorded point, or the whole context's),
 * sleeping, as the real driver's blocking sync does, or spinning on the clock in a context made
 * with CU_CTX_SCHED_SPIN (0x01; cuDevicePrimaryCtxSetFlags before or while the primary context
 * is active, or cuCtxCreate's flags), as its spin-wait does. Each finished piece of
 * work is recorded as a busy interval (CLOCK_MONOTONIC start/end ns, pid) in shared memory, from
 * which the fake NVML derives utilisation per device and per process.
 *
 * Programs look the extension up with dlsym(handle, "zfgEnqueueWork"); on a real driver it is
 * absent and they launch a real kernel instead.
 */
#ifndef ZERNEL_FAKE_CUDA_H
#define ZERNEL_FAKE_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*zfg_enqueue_work_fn)(void* stream, unsigned long long duration_ns);

/* Returns 0 (CUDA_SUCCESS), 201 (CUDA_ERROR_INVALID_CONTEXT) without a current context, or
 * 400 (CUDA_ERROR_INVALID_HANDLE) for a bad stream. A null stream means the default stream. */
int zfgEnqueueWork(void* stream, unsigned long long duration_ns);

#ifdef __cplusplus
}
#endif

#endif /* ZERNEL_FAKE_CUDA_H */

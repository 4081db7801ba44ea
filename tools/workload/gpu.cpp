#include "workload/gpu.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "fake_gpu/zernel_fake_cuda.h"

namespace zernel::workload {
namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUmodule = void*;
using CUfunction = void*;

constexpr CUresult kCudaSuccess = 0;
constexpr unsigned kCtxSchedSpin = 0x01;
constexpr unsigned kCtxSchedBlockingSync = 0x04;

// A one-thread kernel that spins on the GPU's global nanosecond timer until `duration_ns` has
// passed: device time without doing anything. PTX ISA 6.0 / sm_50, so any driver since CUDA 9
// JIT-compiles it for any GPU since Maxwell. Untested here (no GPU); see docs/workload.md.
constexpr std::string_view kSpinPtx = R"(
.version 6.0
.target sm_50
.address_size 64

.visible .entry zernel_spin(
	.param .u64 zernel_spin_duration_ns
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [zernel_spin_duration_ns];
	mov.u64 	%rd2, %globaltimer;
	add.s64 	%rd3, %rd2, %rd1;
$L__spin:
	mov.u64 	%rd4, %globaltimer;
	setp.lt.u64 	%p1, %rd4, %rd3;
	@%p1 bra 	$L__spin;
	ret;
}
)";

std::string exe_dir() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  std::string path(buf.data(), static_cast<std::size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// dlsym into a typed function pointer; null when absent.
template <typename Fn>
Fn lookup(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

template <typename Fn>
Fn lookup_any(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (Fn fn = lookup<Fn>(handle, name)) return fn;
  }
  return nullptr;
}

}  // namespace

struct Gpu::Api {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_set_flags)(CUdevice, unsigned) = nullptr;  // optional
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;  // optional
  // Only on a real driver, for the spin kernel.
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**) = nullptr;
};

Result<GpuLibrary> resolve_gpu_library(bool emulated) {
  if (!emulated) return GpuLibrary{"libcuda.so.1", false};
  std::string path;
  const char* dir = std::getenv("ZERNEL_FAKE_LIB_DIR");
  if (dir != nullptr && *dir != '\0') {
    path = std::string(dir) + "/libcuda.so.1";
  } else {
    path = exe_dir() + "/../lib/fake/libcuda.so.1";
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Error(ENOENT, fmt::format("--emulated-gpu: the emulated libcuda is not at {}: build the "
                                     "fake GPU (tools/fake_gpu) or set ZERNEL_FAKE_LIB_DIR to the "
                                     "directory that holds its libcuda.so.1",
                                     path));
  }
  return GpuLibrary{path, true};
}

Gpu::Gpu() : api_(std::make_unique<Api>()) {}

Gpu::~Gpu() {
  if (handle_ == nullptr) return;
  // Teardown errors are ignored: the process is about to exit and the driver cleans up after it.
  if (module_ != nullptr && api_->module_unload != nullptr) (void)api_->module_unload(module_);
  if (stream_ != nullptr) (void)api_->stream_destroy(stream_);
  if (ctx_retained_) (void)api_->primary_ctx_release(device_);
  // The library stays loaded: a driver may have threads running in it until the process exits.
}

Result<std::unique_ptr<Gpu>> Gpu::open(const GpuLibrary& lib, int rank, bool spin) {
  std::unique_ptr<Gpu> gpu(new Gpu());
  if (auto r = gpu->load(lib); !r) return r.error();
  if (auto r = gpu->init(rank, spin); !r) return r.error();
  return gpu;
}

Result<void> Gpu::load(const GpuLibrary& lib) {
  handle_ = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    if (lib.emulated) {
      return Error(ENOENT, fmt::format("cannot load the emulated libcuda {}: {}", lib.path,
                                       why != nullptr ? why : "unknown error"));
    }
    return Error(ENOENT, fmt::format("cannot load {} ({}): no NVIDIA driver here? Run with "
                                     "--emulated-gpu to use the project's emulated GPU",
                                     lib.path, why != nullptr ? why : "unknown error"));
  }
  Api& a = *api_;
  a.init = lookup<decltype(a.init)>(handle_, "cuInit");
  a.device_get_count = lookup<decltype(a.device_get_count)>(handle_, "cuDeviceGetCount");
  a.device_get = lookup<decltype(a.device_get)>(handle_, "cuDeviceGet");
  a.primary_ctx_set_flags = lookup_any<decltype(a.primary_ctx_set_flags)>(
      handle_, {"cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags"});
  a.primary_ctx_retain =
      lookup<decltype(a.primary_ctx_retain)>(handle_, "cuDevicePrimaryCtxRetain");
  a.primary_ctx_release = lookup_any<decltype(a.primary_ctx_release)>(
      handle_, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
  a.ctx_set_current = lookup<decltype(a.ctx_set_current)>(handle_, "cuCtxSetCurrent");
  a.stream_create = lookup<decltype(a.stream_create)>(handle_, "cuStreamCreate");
  a.stream_destroy =
      lookup_any<decltype(a.stream_destroy)>(handle_, {"cuStreamDestroy_v2", "cuStreamDestroy"});
  a.stream_synchronize = lookup<decltype(a.stream_synchronize)>(handle_, "cuStreamSynchronize");
  a.get_error_name = lookup<decltype(a.get_error_name)>(handle_, "cuGetErrorName");
  enqueue_ = lookup<zfg_enqueue_work_fn>(handle_, "zfgEnqueueWork");
  if (enqueue_ == nullptr) {
    a.module_load_data = lookup<decltype(a.module_load_data)>(handle_, "cuModuleLoadData");
    a.module_get_function = lookup<decltype(a.module_get_function)>(handle_, "cuModuleGetFunction");
    a.module_unload = lookup<decltype(a.module_unload)>(handle_, "cuModuleUnload");
    a.launch_kernel = lookup<decltype(a.launch_kernel)>(handle_, "cuLaunchKernel");
  }

  std::string missing;
  auto need = [&missing](const void* fn, const char* name) {
    if (fn == nullptr) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
  };
  need(reinterpret_cast<const void*>(a.init), "cuInit");
  need(reinterpret_cast<const void*>(a.device_get_count), "cuDeviceGetCount");
  need(reinterpret_cast<const void*>(a.device_get), "cuDeviceGet");
  need(reinterpret_cast<const void*>(a.primary_ctx_retain), "cuDevicePrimaryCtxRetain");
  need(reinterpret_cast<const void*>(a.primary_ctx_release), "cuDevicePrimaryCtxRelease");
  need(reinterpret_cast<const void*>(a.ctx_set_current), "cuCtxSetCurrent");
  need(reinterpret_cast<const void*>(a.stream_create), "cuStreamCreate");
  need(reinterpret_cast<const void*>(a.stream_destroy), "cuStreamDestroy_v2");
  need(reinterpret_cast<const void*>(a.stream_synchronize), "cuStreamSynchronize");
  if (enqueue_ == nullptr) {
    need(reinterpret_cast<const void*>(a.module_load_data), "cuModuleLoadData");
    need(reinterpret_cast<const void*>(a.module_get_function), "cuModuleGetFunction");
    need(reinterpret_cast<const void*>(a.launch_kernel), "cuLaunchKernel");
  }
  if (!missing.empty()) {
    return Error(ENOSYS, fmt::format("{} lacks {}", lib.path, missing));
  }
  return Ok{};
}

std::string Gpu::describe(int rc, const char* call) const {
  const char* name = nullptr;
  if (api_->get_error_name != nullptr && api_->get_error_name(rc, &name) != kCudaSuccess) {
    name = nullptr;
  }
  return fmt::format("{} failed: {} ({})", call, name != nullptr ? name : "CUDA error", rc);
}

Result<void> Gpu::init(int rank, bool spin) {
  const Api& a = *api_;
  if (int rc = a.init(0); rc != kCudaSuccess) return Error(EIO, describe(rc, "cuInit"));
  if (int rc = a.device_get_count(&device_count_); rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuDeviceGetCount"));
  }
  if (device_count_ <= 0) return Error(ENODEV, "the CUDA driver reports no GPU");
  const int ordinal = rank % device_count_;
  if (int rc = a.device_get(&device_, ordinal); rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuDeviceGet"));
  }
  if (a.primary_ctx_set_flags != nullptr) {
    // Fails harmlessly when the context is already active with other flags.
    (void)a.primary_ctx_set_flags(device_, spin ? kCtxSchedSpin : kCtxSchedBlockingSync);
  }
  CUcontext ctx = nullptr;
  if (int rc = a.primary_ctx_retain(&ctx, device_); rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuDevicePrimaryCtxRetain"));
  }
  ctx_retained_ = true;
  if (int rc = a.ctx_set_current(ctx); rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuCtxSetCurrent"));
  }
  if (int rc = a.stream_create(&stream_, 0); rc != kCudaSuccess) {
    stream_ = nullptr;
    return Error(EIO, describe(rc, "cuStreamCreate"));
  }
  if (enqueue_ == nullptr) {
    if (int rc = a.module_load_data(&module_, kSpinPtx.data()); rc != kCudaSuccess) {
      module_ = nullptr;
      return Error(EIO, describe(rc, "cuModuleLoadData (the spin kernel)"));
    }
    if (int rc = a.module_get_function(&spin_fn_, module_, "zernel_spin"); rc != kCudaSuccess) {
      return Error(EIO, describe(rc, "cuModuleGetFunction(zernel_spin)"));
    }
  }
  return Ok{};
}

Result<void> Gpu::enqueue(std::uint64_t ns) {
  if (enqueue_ != nullptr) {
    if (int rc = enqueue_(stream_, ns); rc != kCudaSuccess) {
      return Error(EIO, describe(rc, "zfgEnqueueWork"));
    }
    return Ok{};
  }
  unsigned long long duration = ns;
  std::array<void*, 1> params{&duration};
  if (int rc = api_->launch_kernel(spin_fn_, 1, 1, 1, 1, 1, 1, 0, stream_, params.data(), nullptr);
      rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuLaunchKernel(zernel_spin)"));
  }
  return Ok{};
}

Result<void> Gpu::synchronize() {
  if (int rc = api_->stream_synchronize(stream_); rc != kCudaSuccess) {
    return Error(EIO, describe(rc, "cuStreamSynchronize"));
  }
  return Ok{};
}

}  // namespace zernel::workload

#pragma once
// NVIDIA's management library: GPUs, their utilisation, the processes that use them (read by the
// daemon's GPU poll), and their clocks and power limits (read and set by power management).
//
// libnvidia-ml.so.1 is loaded at run time with dlopen, never linked, so the daemon runs on
// machines without a driver: there, Nvml::load fails with one clear Error ("libnvidia-ml.so.1 not
// found: GPU metrics are off") that the daemon logs once, and GPU metrics stay off. A path
// override loads another library with the same ABI: the daemon's --emulated-gpu passes the
// project's fake NVML (tools/fake_gpu, docs/emulated-gpu.md), so this code runs unchanged on the
// emulated GPU and on a real one.
//
// Symbols. The entry points every use needs (init, shutdown, error strings, device count,
// handles, names, PCI info) are required: without one, load fails naming it. Every other one is
// optional: a driver that lacks it disables that feature (has() says which are on) and its calls
// return an ENOTSUP Error. The types come from sys/nvml_abi.h, the header the fake library
// implements, so the two cannot drift.
//
// Errors carry the call, the GPU and nvmlErrorString:
//   "nvmlDeviceSetPowerManagementLimit(GPU 1, 100000 mW): Invalid Argument"
// with an errno-style code: EPERM (no permission), EINVAL (bad argument), ENOTSUP (not
// supported), ENOENT (not found), EIO (anything else).
//
// Changing settings. The first change this object makes to a device's application clocks or
// power limit records the value from before; locking clocks records that it did. restore()
// puts back what this object changed (the recorded values; locked clocks are reset, as NVML
// cannot read a previous lock), and the destructor restores whatever is still changed, so a
// daemon that exits through any path leaves the GPUs as it found them.
//
// Not thread-safe: one thread (the daemon's GPU poll) owns an Nvml. NVML itself is.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"

namespace zernel::sys {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

struct GpuDevice {
  std::uint32_t index = 0;  // NVML's index, the driver's numbering
  std::string name;         // "NVIDIA H200"
  std::string bus_id;       // sysfs form, "0000:1b:00.0"
  std::string uuid;         // "GPU-8d0c...": nvmlDeviceGetUUID; empty when the driver cannot tell
};

struct GpuUtilization {
  std::uint32_t gpu_percent = 0;     // time a kernel ran, over the driver's last sample period
  std::uint32_t memory_percent = 0;  // time device memory was read or written
};

struct ComputeProcess {
  std::uint32_t pid = 0;
  std::uint32_t device = 0;                        // GPU index
  std::optional<std::uint64_t> used_memory_bytes;  // nullopt when the driver cannot tell
};

struct GpuClocks {  // MHz
  std::uint32_t sm_current = 0;
  std::uint32_t mem_current = 0;
  std::uint32_t sm_max = 0;
  std::uint32_t mem_max = 0;
  std::uint32_t sm_application = 0;  // application clocks: the target under load
  std::uint32_t mem_application = 0;
};

struct ApplicationClocks {  // MHz
  std::uint32_t mem_mhz = 0;
  std::uint32_t sm_mhz = 0;
  bool operator==(const ApplicationClocks&) const = default;
};

struct PowerLimits {  // milliwatts
  std::uint32_t current_mw = 0;
  std::uint32_t default_mw = 0;
  std::uint32_t min_mw = 0;
  std::uint32_t max_mw = 0;
};

// What this object changed on one device, with the values from before its first change.
struct OriginalSettings {
  std::optional<ApplicationClocks> application_clocks;  // set when it changed them
  bool locked_clocks = false;                           // it locked the clocks
  std::optional<std::uint32_t> power_limit_mw;          // set when it changed the limit
  [[nodiscard]] bool changed() const {
    return application_clocks.has_value() || locked_clocks || power_limit_mw.has_value();
  }
};

enum class NvmlFeature : std::uint8_t {
  device_utilization,   // nvmlDeviceGetUtilizationRates
  process_utilization,  // nvmlDeviceGetProcessUtilization
  compute_processes,    // nvmlDeviceGetComputeRunningProcesses_v3 or _v2
  clocks,               // nvmlDeviceGetClockInfo, GetMaxClockInfo, GetApplicationsClock
  application_clocks,   // nvmlDeviceSetApplicationsClocks, ResetApplicationsClocks
  locked_clocks,        // nvmlDeviceSetGpuLockedClocks, ResetGpuLockedClocks
  power_limits,         // nvmlDeviceGetPowerManagementLimit{,DefaultLimit,LimitConstraints}
  set_power_limit,      // nvmlDeviceSetPowerManagementLimit
};

// "00000000:1B:00.0" or "0000:1B:00.0" (NVML) -> "0000:1b:00.0" (sysfs); an error for anything
// that is not domain:bus:device.function in hex.
Result<std::string> normalize_bus_id(std::string_view nvml_bus_id);

class Nvml {
 public:
  // Loads NVML, initialises it and lists the devices. `library_path` empty: the system's
  // libnvidia-ml.so.1 by soname; otherwise that file (the emulated GPU's library).
  static Result<std::unique_ptr<Nvml>> load(const std::string& library_path = {});

  // Restores what this object changed (errors are logged), shuts NVML down, unloads it.
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  Nvml(Nvml&&) = delete;
  Nvml& operator=(Nvml&&) = delete;

  [[nodiscard]] const std::string& library() const { return library_; }
  [[nodiscard]] const std::string& driver_version() const {
    return driver_version_;
  }  // may be empty
  [[nodiscard]] bool has(NvmlFeature feature) const;

  // The GPUs, in index order (read once at load: NVML's set of devices does not change).
  [[nodiscard]] const std::vector<GpuDevice>& devices() const { return devices_; }

  [[nodiscard]] Result<GpuUtilization> utilization(std::uint32_t device) const;

  // SM utilisation (percent) of each process that used the device since the previous call for
  // this device (the first call: the driver's whole buffer, about the last second). A process
  // without a sample in that window is absent; an empty map means no process ran.
  [[nodiscard]] Result<std::unordered_map<std::uint32_t, std::uint32_t>> process_utilization(
      std::uint32_t device);

  // Every process with a compute context, one entry per (pid, GPU), ascending pid then GPU. One
  // NVML call per GPU while its count grows by at most a few between lists.
  [[nodiscard]] Result<std::vector<ComputeProcess>> compute_process_list() const;
  // The same as pid -> GPU index (the lowest index when a process uses several GPUs): the shape
  // of collect::GpuProcessMap (discovery.hpp).
  [[nodiscard]] Result<std::unordered_map<std::uint32_t, std::uint32_t>> compute_processes() const;

  // Clocks.
  [[nodiscard]] Result<GpuClocks> clocks(std::uint32_t device) const;
  [[nodiscard]] Result<ApplicationClocks> default_application_clocks(std::uint32_t device) const;
  [[nodiscard]] Result<void> set_application_clocks(std::uint32_t device, ApplicationClocks clocks);
  [[nodiscard]] Result<void> reset_application_clocks(std::uint32_t device);
  [[nodiscard]] Result<void> set_locked_clocks(std::uint32_t device, std::uint32_t min_mhz,
                                               std::uint32_t max_mhz);
  [[nodiscard]] Result<void> reset_locked_clocks(std::uint32_t device);

  // Power.
  [[nodiscard]] Result<PowerLimits> power_limits(std::uint32_t device) const;
  [[nodiscard]] Result<void> set_power_limit(std::uint32_t device, std::uint32_t limit_mw);

  // What this object changed on a device and the values from before (nothing changed: all empty).
  [[nodiscard]] OriginalSettings original_settings(std::uint32_t device) const;
  // Puts back what this object changed on the device (or on every device); what could not be
  // restored stays recorded, so a later call may retry.
  [[nodiscard]] Result<void> restore(std::uint32_t device);
  [[nodiscard]] Result<void> restore_all();
  // Forgets what this object changed on the device without putting anything back: its settings
  // now are the ones restore() and the destructor leave alone. For crash recovery, where the
  // values just set are the originals of a daemon that died (enforce/settings_journal.hpp).
  void forget_changes(std::uint32_t device);

  struct Api;  // the resolved entry points (nvml.cpp)

 private:
  Nvml();
  [[nodiscard]] Result<void> check_device(std::uint32_t device) const;

  void* handle_ = nullptr;  // dlopen handle
  bool initialized_ = false;
  std::unique_ptr<Api> api_;
  std::string library_;
  std::string driver_version_;
  std::vector<GpuDevice> devices_;
  std::vector<void*> handles_;               // nvmlDevice_t per index
  std::vector<std::uint64_t> last_seen_us_;  // process_utilization's timestamp per device
  mutable std::vector<unsigned int> list_room_;  // processes each device listed last time
  std::vector<OriginalSettings> originals_;  // per device
};

}  // namespace zernel::sys

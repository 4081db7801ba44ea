#include "sys/nvml.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <map>
#include <system_error>

#include "sys/nvml_abi.h"

namespace zernel::sys {

// The entry points, typed from nvml_abi.h's prototypes.
struct Nvml::Api {
  // Required.
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) error_string = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) device_count = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) handle_by_index = nullptr;
  decltype(&::nvmlDeviceGetName) name = nullptr;
  decltype(&::nvmlDeviceGetPciInfo_v3) pci_info = nullptr;
  // Optional.
  decltype(&::nvmlSystemGetDriverVersion) driver_version = nullptr;
  decltype(&::nvmlDeviceGetUUID) uuid = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&::nvmlDeviceGetProcessUtilization) process_utilization = nullptr;
  // _v3, else _v2: the same prototype and struct layout.
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) compute_processes = nullptr;
  const char* compute_processes_name = "nvmlDeviceGetComputeRunningProcesses_v3";
  decltype(&::nvmlDeviceGetClockInfo) clock_info = nullptr;
  decltype(&::nvmlDeviceGetMaxClockInfo) max_clock_info = nullptr;
  decltype(&::nvmlDeviceGetApplicationsClock) applications_clock = nullptr;
  decltype(&::nvmlDeviceGetDefaultApplicationsClock) default_applications_clock = nullptr;
  decltype(&::nvmlDeviceSetApplicationsClocks) set_applications_clocks = nullptr;
  decltype(&::nvmlDeviceResetApplicationsClocks) reset_applications_clocks = nullptr;
  decltype(&::nvmlDeviceSetGpuLockedClocks) set_locked_clocks = nullptr;
  decltype(&::nvmlDeviceResetGpuLockedClocks) reset_locked_clocks = nullptr;
  decltype(&::nvmlDeviceGetPowerManagementLimit) power_limit = nullptr;
  decltype(&::nvmlDeviceGetPowerManagementDefaultLimit) power_default_limit = nullptr;
  decltype(&::nvmlDeviceGetPowerManagementLimitConstraints) power_constraints = nullptr;
  decltype(&::nvmlDeviceSetPowerManagementLimit) set_power_limit = nullptr;
};

namespace {

namespace fs = std::filesystem;

constexpr const char* kOff = "GPU metrics are off";
// Retries of a list call whose answer outgrew the buffer (the size query and the read of
// process_utilization; the room from the previous count of compute_process_list).
constexpr int kListAttempts = 5;
// Spare room in a process list's buffer beyond the count of the previous list.
constexpr unsigned int kListSlack = 8;

template <typename Fn>
void resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
}

int errno_of(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_ERROR_NO_PERMISSION:
      return EPERM;
    case NVML_ERROR_INVALID_ARGUMENT:
      return EINVAL;
    case NVML_ERROR_NOT_SUPPORTED:
      return ENOTSUP;
    case NVML_ERROR_NOT_FOUND:
      return ENOENT;
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return ENODEV;
    default:
      return EIO;
  }
}

nvmlDevice_t dev_handle(void* h) { return static_cast<nvmlDevice_t>(h); }

std::optional<std::uint32_t> parse_hex(std::string_view s, std::size_t max_digits) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  std::uint32_t v = 0;
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v, 16);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace

Result<std::string> normalize_bus_id(std::string_view nvml_bus_id) {
  const auto bad = [&] {
    return Error(
        EINVAL,
        fmt::format("PCI bus id \"{}\": expected domain:bus:device.function in hex", nvml_bus_id));
  };
  const auto c1 = nvml_bus_id.find(':');
  const auto c2 = c1 == std::string_view::npos ? c1 : nvml_bus_id.find(':', c1 + 1);
  const auto dot = c2 == std::string_view::npos ? c2 : nvml_bus_id.find('.', c2 + 1);
  if (dot == std::string_view::npos) return bad();
  const auto domain = parse_hex(nvml_bus_id.substr(0, c1), 8);
  const auto bus = parse_hex(nvml_bus_id.substr(c1 + 1, c2 - c1 - 1), 2);
  const auto device = parse_hex(nvml_bus_id.substr(c2 + 1, dot - c2 - 1), 2);
  const auto function = parse_hex(nvml_bus_id.substr(dot + 1), 1);
  if (!domain || !bus || !device || !function || *device > 0x1f || *function > 7) return bad();
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", *domain, *bus, *device, *function);
}

Nvml::Nvml() : api_(std::make_unique<Api>()) {}

Nvml::~Nvml() {
  if (initialized_) {
    for (std::uint32_t d = 0; d < originals_.size(); ++d) {  // empty if load failed midway
      if (!originals_[d].changed()) continue;
      if (auto r = restore(d); !r) {
        spdlog::warn("GPU {}: could not restore its clocks/power limit: {}", d,
                     r.error().message());
      }
    }
    (void)api_->shutdown();
  }
  if (handle_ != nullptr) dlclose(handle_);
}

namespace {

// dlopen of the library (by soname when `by_soname`), with the reason it is not there or would
// not load.
Result<void*> dlopen_nvml_library(const std::string& lib, bool by_soname) {
  if (!by_soname && lib.find('/') != std::string::npos) {
    std::error_code ec;
    if (!fs::exists(lib, ec)) return Error(ENOENT, fmt::format("{} not found: {}", lib, kOff));
  }
  dlerror();
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const char* err = dlerror();
  const std::string why = err != nullptr ? err : "unknown error";
  if (by_soname && why.find("No such file") != std::string::npos) {
    return Error(ENOENT, fmt::format("{} not found: {}", kNvmlLibrary, kOff));
  }
  return Error(ELIBBAD, fmt::format("loading {}: {}: {}", lib, why, kOff));
}

// The entry points load cannot do without (and the UUID, which is optional); the error names
// every one missing.
Result<void> resolve_required_nvml_symbols(void* handle, const std::string& lib, Nvml::Api& a) {
  resolve(handle, "nvmlInit_v2", a.init);
  resolve(handle, "nvmlShutdown", a.shutdown);
  resolve(handle, "nvmlErrorString", a.error_string);
  resolve(handle, "nvmlDeviceGetCount_v2", a.device_count);
  resolve(handle, "nvmlDeviceGetHandleByIndex_v2", a.handle_by_index);
  resolve(handle, "nvmlDeviceGetName", a.name);
  resolve(handle, "nvmlDeviceGetPciInfo_v3", a.pci_info);
  resolve(handle, "nvmlDeviceGetUUID", a.uuid);
  std::vector<std::string> missing;
  const auto need = [&missing](const void* fn, const char* name) {
    if (fn == nullptr) missing.emplace_back(name);
  };
  need(reinterpret_cast<const void*>(a.init), "nvmlInit_v2");
  need(reinterpret_cast<const void*>(a.shutdown), "nvmlShutdown");
  need(reinterpret_cast<const void*>(a.error_string), "nvmlErrorString");
  need(reinterpret_cast<const void*>(a.device_count), "nvmlDeviceGetCount_v2");
  need(reinterpret_cast<const void*>(a.handle_by_index), "nvmlDeviceGetHandleByIndex_v2");
  need(reinterpret_cast<const void*>(a.name), "nvmlDeviceGetName");
  need(reinterpret_cast<const void*>(a.pci_info), "nvmlDeviceGetPciInfo_v3");
  if (missing.empty()) return Ok{};
  std::string names;
  for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
  return Error(ENOSYS, fmt::format("{} lacks {} (too old a driver?): {}", lib, names, kOff));
}

// The optional entry points: each feature works when its functions are there (Nvml::has).
void resolve_optional_nvml_symbols(void* handle, Nvml::Api& a) {
  resolve(handle, "nvmlSystemGetDriverVersion", a.driver_version);
  resolve(handle, "nvmlDeviceGetUtilizationRates", a.utilization);
  resolve(handle, "nvmlDeviceGetProcessUtilization", a.process_utilization);
  resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v3", a.compute_processes);
  if (a.compute_processes == nullptr) {
    resolve(handle, "nvmlDeviceGetComputeRunningProcesses_v2", a.compute_processes);
    a.compute_processes_name = "nvmlDeviceGetComputeRunningProcesses_v2";
  }
  resolve(handle, "nvmlDeviceGetClockInfo", a.clock_info);
  resolve(handle, "nvmlDeviceGetMaxClockInfo", a.max_clock_info);
  resolve(handle, "nvmlDeviceGetApplicationsClock", a.applications_clock);
  resolve(handle, "nvmlDeviceGetDefaultApplicationsClock", a.default_applications_clock);
  resolve(handle, "nvmlDeviceSetApplicationsClocks", a.set_applications_clocks);
  resolve(handle, "nvmlDeviceResetApplicationsClocks", a.reset_applications_clocks);
  resolve(handle, "nvmlDeviceSetGpuLockedClocks", a.set_locked_clocks);
  resolve(handle, "nvmlDeviceResetGpuLockedClocks", a.reset_locked_clocks);
  resolve(handle, "nvmlDeviceGetPowerManagementLimit", a.power_limit);
  resolve(handle, "nvmlDeviceGetPowerManagementDefaultLimit", a.power_default_limit);
  resolve(handle, "nvmlDeviceGetPowerManagementLimitConstraints", a.power_constraints);
  resolve(handle, "nvmlDeviceSetPowerManagementLimit", a.set_power_limit);
}

// A failed call at load: "<call>: <NVML's text>: GPU metrics are off".
Error nvml_load_error(const Nvml::Api& a, nvmlReturn_t rc, const std::string& call) {
  const char* text = a.error_string(rc);
  return Error(
      errno_of(rc),
      fmt::format("{}: {}: {}", call,
                  text != nullptr ? text : fmt::format("NVML error {}", static_cast<int>(rc)),
                  kOff));
}

// Every GPU NVML counts, in index order: its name, PCI bus id and UUID, and its handle.
Result<void> list_nvml_devices(const Nvml::Api& a, std::vector<GpuDevice>& devices,
                               std::vector<void*>& handles) {
  unsigned int count = 0;
  if (auto rc = a.device_count(&count); rc != NVML_SUCCESS) {
    return nvml_load_error(a, rc, "nvmlDeviceGetCount_v2");
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    if (auto rc = a.handle_by_index(i, &h); rc != NVML_SUCCESS) {
      return nvml_load_error(a, rc, fmt::format("nvmlDeviceGetHandleByIndex_v2({})", i));
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (auto rc = a.name(h, name, sizeof(name)); rc != NVML_SUCCESS) {
      return nvml_load_error(a, rc, fmt::format("nvmlDeviceGetName(GPU {})", i));
    }
    nvmlPciInfo_t pci{};
    if (auto rc = a.pci_info(h, &pci); rc != NVML_SUCCESS) {
      return nvml_load_error(a, rc, fmt::format("nvmlDeviceGetPciInfo_v3(GPU {})", i));
    }
    pci.busId[sizeof(pci.busId) - 1] = '\0';
    auto bus_id = normalize_bus_id(pci.busId);
    if (!bus_id) return bus_id.error().context(fmt::format("GPU {}", i));
    // Optional: the UUID labels metrics (DCGM's UUID label); a driver that cannot tell leaves it
    // empty rather than failing the load.
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (a.uuid == nullptr || a.uuid(h, uuid, sizeof(uuid)) != NVML_SUCCESS) uuid[0] = '\0';
    devices.push_back(GpuDevice{i, name, std::move(bus_id.value()), uuid});
    handles.push_back(h);
  }
  return Ok{};
}

}  // namespace

Result<std::unique_ptr<Nvml>> Nvml::load(const std::string& library_path) {
  const bool by_soname = library_path.empty();
  const std::string lib = by_soname ? std::string(kNvmlLibrary) : library_path;
  auto handle = dlopen_nvml_library(lib, by_soname);
  if (!handle) return handle.error();
  std::unique_ptr<Nvml> nvml(new Nvml());
  nvml->handle_ = *handle;
  nvml->library_ = lib;
  Api& a = *nvml->api_;
  if (auto r = resolve_required_nvml_symbols(*handle, lib, a); !r) return r.error();
  resolve_optional_nvml_symbols(*handle, a);

  if (auto rc = a.init(); rc != NVML_SUCCESS) return nvml_load_error(a, rc, "nvmlInit_v2");
  nvml->initialized_ = true;
  if (a.driver_version != nullptr) {
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (a.driver_version(buf, sizeof(buf)) == NVML_SUCCESS) nvml->driver_version_ = buf;
  }
  if (auto r = list_nvml_devices(a, nvml->devices_, nvml->handles_); !r) return r.error();
  nvml->last_seen_us_.assign(nvml->devices_.size(), 0);
  nvml->list_room_.assign(nvml->devices_.size(), 0);
  nvml->originals_.assign(nvml->devices_.size(), OriginalSettings{});
  return nvml;
}

bool Nvml::has(NvmlFeature feature) const {
  const Api& a = *api_;
  switch (feature) {
    case NvmlFeature::device_utilization:
      return a.utilization != nullptr;
    case NvmlFeature::process_utilization:
      return a.process_utilization != nullptr;
    case NvmlFeature::compute_processes:
      return a.compute_processes != nullptr;
    case NvmlFeature::clocks:
      return a.clock_info != nullptr && a.max_clock_info != nullptr &&
             a.applications_clock != nullptr;
    case NvmlFeature::application_clocks:
      return a.applications_clock != nullptr && a.set_applications_clocks != nullptr &&
             a.reset_applications_clocks != nullptr;
    case NvmlFeature::locked_clocks:
      return a.set_locked_clocks != nullptr && a.reset_locked_clocks != nullptr;
    case NvmlFeature::power_limits:
      return a.power_limit != nullptr && a.power_default_limit != nullptr &&
             a.power_constraints != nullptr;
    case NvmlFeature::set_power_limit:
      return a.power_limit != nullptr && a.set_power_limit != nullptr;
  }
  return false;
}

namespace {

Error nvml_error(const Nvml::Api& a, nvmlReturn_t rc, const std::string& call) {
  const char* text = a.error_string(rc);
  return Error(errno_of(rc),
               fmt::format("{}: {}", call,
                           text != nullptr ? std::string(text)
                                           : fmt::format("NVML error {}", static_cast<int>(rc))));
}

Error unsupported(const std::string& library, const char* what) {
  return Error(ENOTSUP, fmt::format("{}: this NVML ({}) does not provide it", what, library));
}

}  // namespace

Result<void> Nvml::check_device(std::uint32_t device) const {
  if (device >= devices_.size()) {
    return Error(EINVAL, fmt::format("GPU {}: no such GPU ({} present)", device, devices_.size()));
  }
  return Ok{};
}

Result<GpuUtilization> Nvml::utilization(std::uint32_t device) const {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::device_utilization)) {
    return unsupported(library_, "nvmlDeviceGetUtilizationRates");
  }
  nvmlUtilization_t u{};
  if (auto rc = api_->utilization(dev_handle(handles_[device]), &u); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc, fmt::format("nvmlDeviceGetUtilizationRates(GPU {})", device));
  }
  return GpuUtilization{std::min(u.gpu, 100U), std::min(u.memory, 100U)};
}

Result<std::unordered_map<std::uint32_t, std::uint32_t>> Nvml::process_utilization(
    std::uint32_t device) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::process_utilization)) {
    return unsupported(library_, "nvmlDeviceGetProcessUtilization");
  }
  const auto call = fmt::format("nvmlDeviceGetProcessUtilization(GPU {})", device);
  nvmlDevice_t h = dev_handle(handles_[device]);
  std::uint64_t& last_seen = last_seen_us_[device];
  std::unordered_map<std::uint32_t, std::uint32_t> out;

  unsigned int count = 0;
  nvmlReturn_t rc = api_->process_utilization(h, nullptr, &count, last_seen);
  if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0)) return out;
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) {
    return nvml_error(*api_, rc, call);
  }
  for (int attempt = 0; attempt < kListAttempts; ++attempt) {
    std::vector<nvmlProcessUtilizationSample_t> samples(count + 4);
    auto n = static_cast<unsigned int>(samples.size());
    rc = api_->process_utilization(h, samples.data(), &n, last_seen);
    if (rc == NVML_ERROR_NOT_FOUND) return out;
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      count = n;
      continue;
    }
    if (rc != NVML_SUCCESS) return nvml_error(*api_, rc, call);
    // Several samples of one pid (older drivers keep a buffer of them): their mean.
    std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> sums;  // pid -> (sum, n)
    std::uint64_t newest = last_seen;
    for (unsigned int i = 0; i < std::min(n, static_cast<unsigned int>(samples.size())); ++i) {
      const auto& s = samples[i];
      auto& [sum, k] = sums[s.pid];
      sum += std::min(s.smUtil, 100U);
      ++k;
      newest = std::max(newest, static_cast<std::uint64_t>(s.timeStamp));
    }
    for (const auto& [pid, sk] : sums) {
      out[pid] = static_cast<std::uint32_t>((sk.first + sk.second / 2) / sk.second);
    }
    last_seen = newest;
    return out;
  }
  return Error(EAGAIN, call + ": the number of samples kept changing");
}

Result<std::vector<ComputeProcess>> Nvml::compute_process_list() const {
  if (!has(NvmlFeature::compute_processes)) {
    return unsupported(library_, "nvmlDeviceGetComputeRunningProcesses_v3/_v2");
  }
  std::vector<ComputeProcess> out;
  std::vector<nvmlProcessInfo_t> infos;
  for (std::uint32_t d = 0; d < devices_.size(); ++d) {
    nvmlDevice_t h = dev_handle(handles_[d]);
    // One call per GPU: a buffer with room for the processes it had last time and a few more
    // (the daemon lists often); a GPU that gained more is asked again with its new count.
    auto room = list_room_[d] + kListSlack;
    bool done = false;
    nvmlReturn_t rc = NVML_SUCCESS;
    for (int attempt = 0; attempt < kListAttempts && !done; ++attempt) {
      infos.resize(room);
      auto n = room;
      rc = api_->compute_processes(h, &n, infos.data());
      if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        room = n + kListSlack;
        continue;
      }
      if (rc != NVML_SUCCESS) break;
      n = std::min(n, room);
      for (unsigned int i = 0; i < n; ++i) {
        ComputeProcess p;
        p.pid = infos[i].pid;
        p.device = d;
        if (infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL) {
          p.used_memory_bytes = infos[i].usedGpuMemory;
        }
        out.push_back(p);
      }
      list_room_[d] = n;
      done = true;
    }
    if (!done) {
      const auto call = fmt::format("{}(GPU {})", api_->compute_processes_name, d);
      if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return nvml_error(*api_, rc, call);
      return Error(EAGAIN, call + ": the number of processes kept changing");
    }
  }
  std::sort(out.begin(), out.end(), [](const ComputeProcess& x, const ComputeProcess& y) {
    return x.pid != y.pid ? x.pid < y.pid : x.device < y.device;
  });
  // A process may hold several contexts on one GPU; the driver lists it once, but be safe.
  out.erase(std::unique(out.begin(), out.end(),
                        [](const ComputeProcess& x, const ComputeProcess& y) {
                          return x.pid == y.pid && x.device == y.device;
                        }),
            out.end());
  return out;
}

Result<std::unordered_map<std::uint32_t, std::uint32_t>> Nvml::compute_processes() const {
  auto list = compute_process_list();
  if (!list) return list.error();
  std::unordered_map<std::uint32_t, std::uint32_t> out;
  for (const auto& p : *list) out.emplace(p.pid, p.device);  // sorted: the lowest GPU wins
  return out;
}

Result<GpuClocks> Nvml::clocks(std::uint32_t device) const {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::clocks)) return unsupported(library_, "nvmlDeviceGetClockInfo");
  nvmlDevice_t h = dev_handle(handles_[device]);
  GpuClocks c;
  struct Query {
    decltype(Api::clock_info) fn;
    const char* name;
    nvmlClockType_t type;
    std::uint32_t* out;
  };
  const Query queries[] = {
      {api_->clock_info, "nvmlDeviceGetClockInfo", NVML_CLOCK_SM, &c.sm_current},
      {api_->clock_info, "nvmlDeviceGetClockInfo", NVML_CLOCK_MEM, &c.mem_current},
      {api_->max_clock_info, "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM, &c.sm_max},
      {api_->max_clock_info, "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_MEM, &c.mem_max},
      {api_->applications_clock, "nvmlDeviceGetApplicationsClock", NVML_CLOCK_SM,
       &c.sm_application},
      {api_->applications_clock, "nvmlDeviceGetApplicationsClock", NVML_CLOCK_MEM,
       &c.mem_application},
  };
  for (const auto& q : queries) {
    unsigned int mhz = 0;
    if (auto rc = q.fn(h, q.type, &mhz); rc != NVML_SUCCESS) {
      return nvml_error(
          *api_, rc,
          fmt::format("{}(GPU {}, {})", q.name, device, q.type == NVML_CLOCK_SM ? "SM" : "memory"));
    }
    *q.out = mhz;
  }
  return c;
}

namespace {

// The application clocks now (defaults = false) or the driver's defaults.
Result<ApplicationClocks> read_application_clocks(const Nvml::Api& a, nvmlDevice_t h,
                                                  std::uint32_t device, bool defaults) {
  const auto fn = defaults ? a.default_applications_clock : a.applications_clock;
  const char* name =
      defaults ? "nvmlDeviceGetDefaultApplicationsClock" : "nvmlDeviceGetApplicationsClock";
  ApplicationClocks c;
  for (auto [type, out] :
       {std::pair{NVML_CLOCK_MEM, &c.mem_mhz}, std::pair{NVML_CLOCK_SM, &c.sm_mhz}}) {
    if (auto rc = fn(h, type, out); rc != NVML_SUCCESS) {
      return nvml_error(
          a, rc,
          fmt::format("{}(GPU {}, {})", name, device, type == NVML_CLOCK_SM ? "SM" : "memory"));
    }
  }
  return c;
}

}  // namespace

Result<ApplicationClocks> Nvml::default_application_clocks(std::uint32_t device) const {
  if (auto r = check_device(device); !r) return r.error();
  if (api_->default_applications_clock == nullptr) {
    return unsupported(library_, "nvmlDeviceGetDefaultApplicationsClock");
  }
  return read_application_clocks(*api_, dev_handle(handles_[device]), device, true);
}

Result<void> Nvml::set_application_clocks(std::uint32_t device, ApplicationClocks clocks) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::application_clocks)) {
    return unsupported(library_, "nvmlDeviceSetApplicationsClocks");
  }
  nvmlDevice_t h = dev_handle(handles_[device]);
  auto& original = originals_[device];
  std::optional<ApplicationClocks> before;
  if (!original.application_clocks) {
    auto now = read_application_clocks(*api_, h, device, false);
    if (!now) return now.error();
    before = *now;
  }
  if (auto rc = api_->set_applications_clocks(h, clocks.mem_mhz, clocks.sm_mhz);
      rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc,
                      fmt::format("nvmlDeviceSetApplicationsClocks(GPU {}, mem {} MHz, SM {} MHz)",
                                  device, clocks.mem_mhz, clocks.sm_mhz));
  }
  if (before) original.application_clocks = before;
  return Ok{};
}

Result<void> Nvml::reset_application_clocks(std::uint32_t device) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::application_clocks)) {
    return unsupported(library_, "nvmlDeviceResetApplicationsClocks");
  }
  nvmlDevice_t h = dev_handle(handles_[device]);
  auto& original = originals_[device];
  std::optional<ApplicationClocks> before;
  if (!original.application_clocks) {
    auto now = read_application_clocks(*api_, h, device, false);
    if (!now) return now.error();
    before = *now;
  }
  if (auto rc = api_->reset_applications_clocks(h); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc, fmt::format("nvmlDeviceResetApplicationsClocks(GPU {})", device));
  }
  if (before) original.application_clocks = before;
  return Ok{};
}

Result<void> Nvml::set_locked_clocks(std::uint32_t device, std::uint32_t min_mhz,
                                     std::uint32_t max_mhz) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::locked_clocks))
    return unsupported(library_, "nvmlDeviceSetGpuLockedClocks");
  if (auto rc = api_->set_locked_clocks(dev_handle(handles_[device]), min_mhz, max_mhz);
      rc != NVML_SUCCESS) {
    return nvml_error(
        *api_, rc,
        fmt::format("nvmlDeviceSetGpuLockedClocks(GPU {}, {}-{} MHz)", device, min_mhz, max_mhz));
  }
  originals_[device].locked_clocks = true;
  return Ok{};
}

Result<void> Nvml::reset_locked_clocks(std::uint32_t device) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::locked_clocks)) {
    return unsupported(library_, "nvmlDeviceResetGpuLockedClocks");
  }
  if (auto rc = api_->reset_locked_clocks(dev_handle(handles_[device])); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc, fmt::format("nvmlDeviceResetGpuLockedClocks(GPU {})", device));
  }
  originals_[device].locked_clocks = false;
  return Ok{};
}

Result<PowerLimits> Nvml::power_limits(std::uint32_t device) const {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::power_limits)) {
    return unsupported(library_, "nvmlDeviceGetPowerManagementLimit");
  }
  nvmlDevice_t h = dev_handle(handles_[device]);
  PowerLimits p;
  if (auto rc = api_->power_limit(h, &p.current_mw); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc, fmt::format("nvmlDeviceGetPowerManagementLimit(GPU {})", device));
  }
  if (auto rc = api_->power_default_limit(h, &p.default_mw); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc,
                      fmt::format("nvmlDeviceGetPowerManagementDefaultLimit(GPU {})", device));
  }
  if (auto rc = api_->power_constraints(h, &p.min_mw, &p.max_mw); rc != NVML_SUCCESS) {
    return nvml_error(*api_, rc,
                      fmt::format("nvmlDeviceGetPowerManagementLimitConstraints(GPU {})", device));
  }
  return p;
}

Result<void> Nvml::set_power_limit(std::uint32_t device, std::uint32_t limit_mw) {
  if (auto r = check_device(device); !r) return r.error();
  if (!has(NvmlFeature::set_power_limit)) {
    return unsupported(library_, "nvmlDeviceSetPowerManagementLimit");
  }
  nvmlDevice_t h = dev_handle(handles_[device]);
  auto& original = originals_[device];
  std::optional<std::uint32_t> before;
  if (!original.power_limit_mw) {
    unsigned int mw = 0;
    if (auto rc = api_->power_limit(h, &mw); rc != NVML_SUCCESS) {
      return nvml_error(*api_, rc,
                        fmt::format("nvmlDeviceGetPowerManagementLimit(GPU {})", device));
    }
    before = mw;
  }
  if (auto rc = api_->set_power_limit(h, limit_mw); rc != NVML_SUCCESS) {
    return nvml_error(
        *api_, rc,
        fmt::format("nvmlDeviceSetPowerManagementLimit(GPU {}, {} mW)", device, limit_mw));
  }
  if (before) original.power_limit_mw = before;
  return Ok{};
}

OriginalSettings Nvml::original_settings(std::uint32_t device) const {
  if (device >= originals_.size()) return {};
  return originals_[device];
}

Result<void> Nvml::restore(std::uint32_t device) {
  if (auto r = check_device(device); !r) return r.error();
  auto& original = originals_[device];
  nvmlDevice_t h = dev_handle(handles_[device]);
  std::vector<std::string> failures;
  int code = 0;
  const auto failed = [&](nvmlReturn_t rc, const std::string& call) {
    const Error e = nvml_error(*api_, rc, call);
    if (code == 0) code = e.code();
    failures.push_back(e.message());
  };

  if (original.application_clocks) {
    const ApplicationClocks want = *original.application_clocks;
    // Back at the defaults: reset rather than pin the same values as explicit settings.
    auto defaults = default_application_clocks(device);
    nvmlReturn_t rc = NVML_SUCCESS;
    std::string call;
    if (defaults && *defaults == want) {
      rc = api_->reset_applications_clocks(h);
      call = fmt::format("nvmlDeviceResetApplicationsClocks(GPU {})", device);
    } else {
      rc = api_->set_applications_clocks(h, want.mem_mhz, want.sm_mhz);
      call = fmt::format("nvmlDeviceSetApplicationsClocks(GPU {}, mem {} MHz, SM {} MHz)", device,
                         want.mem_mhz, want.sm_mhz);
    }
    if (rc == NVML_SUCCESS) {
      original.application_clocks.reset();
    } else {
      failed(rc, call);
    }
  }
  if (original.locked_clocks) {
    if (auto rc = api_->reset_locked_clocks(h); rc == NVML_SUCCESS) {
      original.locked_clocks = false;
    } else {
      failed(rc, fmt::format("nvmlDeviceResetGpuLockedClocks(GPU {})", device));
    }
  }
  if (original.power_limit_mw) {
    if (auto rc = api_->set_power_limit(h, *original.power_limit_mw); rc == NVML_SUCCESS) {
      original.power_limit_mw.reset();
    } else {
      failed(rc, fmt::format("nvmlDeviceSetPowerManagementLimit(GPU {}, {} mW)", device,
                             *original.power_limit_mw));
    }
  }
  if (failures.empty()) return Ok{};
  return Error(code, join(failures));
}

Result<void> Nvml::restore_all() {
  std::vector<std::string> failures;
  int code = 0;
  for (std::uint32_t d = 0; d < devices_.size(); ++d) {
    if (auto r = restore(d); !r) {
      if (code == 0) code = r.error().code();
      failures.push_back(r.error().message());
    }
  }
  if (failures.empty()) return Ok{};
  return Error(code, join(failures));
}

void Nvml::forget_changes(std::uint32_t device) {
  if (device < originals_.size()) originals_[device] = OriginalSettings{};
}

}  // namespace zernel::sys

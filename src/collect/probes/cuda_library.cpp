#include "collect/probes/cuda_library.hpp"

#include "collect/wait_state.hpp"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "sys/procfs.hpp"

namespace zernel::collect::probes {
namespace {

template <typename T>
bool parse_hex(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

// The next space-separated field of a maps line; advances `rest`.
std::string_view next_field(std::string_view& rest) {
  const auto start = rest.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(start);
  const auto end = rest.find(' ');
  const auto field = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  return field;
}

}  // namespace

bool is_libcuda_path(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  if (path.ends_with(" (deleted)")) return false;
  const auto slash = path.rfind('/');
  return path.substr(slash + 1).starts_with("libcuda.so");
}

std::vector<MappedLibrary> parse_libcuda_mappings(std::string_view maps_text) {
  std::vector<MappedLibrary> out;
  while (!maps_text.empty()) {
    const auto nl = maps_text.find('\n');
    if (nl == std::string_view::npos) break;  // a cut last line is ignored (procfs.hpp)
    const std::string_view line = maps_text.substr(0, nl);
    maps_text.remove_prefix(nl + 1);

    const auto path = sys::maps_line_path(line);
    if (!path || !is_libcuda_path(*path)) continue;
    std::string_view rest = line;
    next_field(rest);  // range
    next_field(rest);  // perms
    next_field(rest);  // offset
    const auto dev = next_field(rest);
    const auto inode = next_field(rest);
    const auto colon = dev.find(':');
    MappedLibrary lib;
    if (colon == std::string_view::npos || !parse_hex(dev.substr(0, colon), lib.dev_major) ||
        !parse_hex(dev.substr(colon + 1), lib.dev_minor)) {
      continue;
    }
    auto [p, ec] = std::from_chars(inode.data(), inode.data() + inode.size(), lib.inode);
    if (ec != std::errc() || p != inode.data() + inode.size() || lib.inode == 0) continue;
    const bool seen = std::any_of(out.begin(), out.end(), [&](const MappedLibrary& m) {
      return m.dev_major == lib.dev_major && m.dev_minor == lib.dev_minor && m.inode == lib.inode;
    });
    if (seen) continue;
    lib.path = std::string(*path);
    out.push_back(std::move(lib));
  }
  return out;
}

Result<std::vector<MappedLibrary>> read_libcuda_mappings(const std::string& proc_root,
                                                         std::uint32_t pid) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/maps";
  std::string text;
  if (const int err = sys::read_file_at(AT_FDCWD, path.c_str(), text, std::size_t{64} << 20);
      err != 0) {
    return sys::proc_read_error("reading " + path, err);
  }
  return parse_libcuda_mappings(text);
}

Result<std::vector<ElfFunction>> elf_function_offsets(const std::string& path,
                                                      const std::vector<std::string>& names) {
  if (elf_version(EV_CURRENT) == EV_NONE)
    return Error(EIO, "libelf: " + std::string(elf_errmsg(-1)));
  sys::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_error("opening " + path);
  Elf* elf = elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF) {
    if (elf != nullptr) elf_end(elf);
    return Error(ENOEXEC, path + " is not an ELF file");
  }
  std::vector<ElfFunction> found;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    if (shdr.sh_type != SHT_DYNSYM && shdr.sh_type != SHT_SYMTAB) continue;
    if (shdr.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    const auto count = shdr.sh_size / shdr.sh_entsize;
    for (std::size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
          sym.st_shndx >= SHN_LORESERVE) {
        continue;
      }
      const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name == nullptr) continue;
      const std::string_view n(name);
      if (std::find(names.begin(), names.end(), n) == names.end() ||
          std::any_of(found.begin(), found.end(),
                      [&](const ElfFunction& f) { return f.name == n; })) {
        continue;
      }
      // The file offset the kernel's uprobe wants: the address relative to its section's, plus
      // the section's place in the file (what libbpf computes from a symbol name).
      GElf_Shdr text;
      Elf_Scn* in = elf_getscn(elf, sym.st_shndx);
      if (in == nullptr || gelf_getshdr(in, &text) == nullptr || sym.st_value < text.sh_addr) {
        continue;
      }
      found.push_back(ElfFunction{std::string(n), sym.st_value - text.sh_addr + text.sh_offset});
    }
  }
  elf_end(elf);
  return found;
}

Result<std::vector<std::string>> elf_defined_functions(const std::string& path,
                                                       const std::vector<std::string>& names) {
  auto found = elf_function_offsets(path, names);
  if (!found) return found.error();
  std::vector<std::string> out;
  out.reserve(found->size());
  for (ElfFunction& f : *found) out.push_back(std::move(f.name));
  return out;
}

std::optional<std::uint64_t> parse_schedstat_runtime(std::string_view text) {
  if (auto st = parse_schedstat(text)) return st->run_ns;
  return std::nullopt;
}

}  // namespace zernel::collect::probes

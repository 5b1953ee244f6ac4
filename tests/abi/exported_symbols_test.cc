// abi.md item 2: sm70ops_get_api is the only symbol the library defines for others to bind to.
// Reads the ELF dynamic symbol table directly, so the check needs no binutils on the test machine.
#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/abi/plugin_loader.h"

namespace sm70ops_test {
namespace {

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What `nm -D --defined-only` lists: .dynsym entries with a section and non-local binding.
std::vector<std::string> DefinedDynamicSymbols(const std::vector<char>& elf) {
  std::vector<std::string> names;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sections[i].sh_type != SHT_DYNSYM) continue;
    const char* strtab = elf.data() + sections[sections[i].sh_link].sh_offset;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(elf.data() + sections[i].sh_offset);
    for (size_t s = 0; s < sections[i].sh_size / sizeof(Elf64_Sym); ++s) {
      if (syms[s].st_shndx == SHN_UNDEF || ELF64_ST_BIND(syms[s].st_info) == STB_LOCAL) continue;
      names.emplace_back(strtab + syms[s].st_name);
    }
  }
  return names;
}

TEST(Abi_ExportedSymbols, OnlyTheEntryPoint) {
  const std::vector<char> elf = ReadFile(PluginPath());
  ASSERT_GE(elf.size(), sizeof(Elf64_Ehdr)) << "cannot read " << PluginPath();
  ASSERT_EQ(std::memcmp(elf.data(), ELFMAG, SELFMAG), 0);
  ASSERT_EQ(elf[EI_CLASS], ELFCLASS64);
  EXPECT_EQ(DefinedDynamicSymbols(elf), std::vector<std::string>{SM70OPS_ENTRY_POINT_NAME});
}

// The entry point is reachable the way a host binds it, through dlsym on an RTLD_LOCAL handle.
TEST(Abi_ExportedSymbols, EntryPointResolvesThroughDlsym) {
  LoadedPlugin plugin;
  EXPECT_EQ(plugin.error(), "");
  EXPECT_NE(plugin.get_api(), nullptr);
}

}  // namespace
}  // namespace sm70ops_test

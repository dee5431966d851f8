// CPU feature detection (core/cpu_features.h): cpuid leaves 1 and 7, xgetbv for the register
// state the OS saves, the brand string, and the LLMC_CPU_ISA cap.
#include "core/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace llmc {

namespace {

#if defined(__x86_64__)
bool cpuid(unsigned leaf, unsigned subleaf, unsigned regs[4]) {
  return __get_cpuid_count(leaf, subleaf, &regs[0], &regs[1], &regs[2], &regs[3]) != 0;
}

uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t{edx} << 32) | eax;
}

// Linux hands the AMX tile data state (8 KiB per thread) only to a process that asks for it; an
// instruction that touches the tiles without it faults. Asked once; true when granted.
bool requestAmxTileData() {
#if defined(__linux__)
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) != 0) return false;
  unsigned long granted = 0;
  return syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) == 0 &&
         ((granted >> kXfeatureTileData) & 1) != 0;
#else
  return false;
#endif
}
#endif

// LLMC_CPU_ISA as read at startup: the cap, or kCpuIsaTop (none) when unset or unknown.
struct EnvironmentCap {
  CpuIsa cap = kCpuIsaTop;
  std::string text;  // the variable's value, empty when unset
  bool understood = true;
  bool avx_vnni = true;  // avx2 names AVX2 alone; avx_vnni names it with AVX-VNNI
};

const EnvironmentCap& environmentCap() {
  static const EnvironmentCap env = [] {
    EnvironmentCap e;
    const char* value = std::getenv("LLMC_CPU_ISA");
    if (!value || !*value) return e;
    e.text = value;
    // The avx2 level with AVX-VNNI where the CPU has it: an Alder Lake or Sierra Forest class
    // core's kernels, on a CPU that has AVX-512 too.
    if (e.text == "avx_vnni") {
      e.cap = CpuIsa::kAvx2;
      return e;
    }
    e.understood = parseCpuIsa(e.text, &e.cap);
    if (!e.understood) e.cap = kCpuIsaTop;
    e.avx_vnni = e.cap != CpuIsa::kAvx2;
    return e;
  }();
  return env;
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned r[4] = {0, 0, 0, 0};
  if (!cpuid(0, 0, r)) return f;
  const unsigned max_leaf = r[0];
  char vendor[13] = {};
  std::memcpy(vendor, &r[1], 4);
  std::memcpy(vendor + 4, &r[3], 4);
  std::memcpy(vendor + 8, &r[2], 4);
  f.vendor = vendor;
  cpuid(1, 0, r);
  const bool osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
  f.fma = (r[2] >> 12) & 1;
  f.f16c = (r[2] >> 29) & 1;
  bool os_amx = false;
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    f.os_avx = avx && (xcr0 & 0x6) == 0x6;            // XMM and YMM state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM0-15 high, ZMM16-31
    os_amx = (xcr0 & 0x60000) == 0x60000;             // XTILECFG and XTILEDATA
  }
  if (max_leaf >= 7) {
    cpuid(7, 0, r);
    const unsigned ebx = r[1], ecx = r[2], edx = r[3];
    const unsigned subleaves = r[0];
    f.avx2 = (ebx >> 5) & 1;
    f.avx512f = (ebx >> 16) & 1;
    f.avx512dq = (ebx >> 17) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    f.avx512vnni = (ecx >> 11) & 1;
    f.avx512vbmi2 = (ecx >> 6) & 1;
    f.avx512fp16 = (edx >> 23) & 1;
    // The grant has costs for the whole process (larger signal frames: a later sigaltstack()
    // smaller than the AMX frame fails), so a process capped below amx does not ask.
    if (os_amx && ((edx >> 24) & 1) && ((edx >> 25) & 1)) {
      if (environmentCap().cap < CpuIsa::kAmx)
        f.amx_note = "amx_int8 not requested (LLMC_CPU_ISA)";
      else if (!(f.amx_int8 = requestAmxTileData()))
        f.amx_note = "amx_int8 not granted by the OS";
    }
    if (subleaves >= 1) {
      cpuid(7, 1, r);
      f.avxvnni = (r[0] >> 4) & 1;
      f.avx512bf16 = (r[0] >> 5) & 1;
    }
  }
  // Without the OS saving the registers the instructions fault: such features do not count.
  if (!f.os_avx) f.avx2 = f.fma = f.f16c = f.avxvnni = false;
  if (!f.os_avx512)
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = f.avx512fp16 =
        f.avx512vbmi2 = false;
  cpuid(0x80000000, 0, r);
  if (r[0] >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      cpuid(0x80000002 + i, 0, r);
      std::memcpy(brand + 16 * i, r, 16);
    }
    std::string model = brand;
    const size_t first = model.find_first_not_of(' ');
    f.model = first == std::string::npos ? "" : model.substr(first);
  }
#endif
  return f;
}

CpuIsa supportedLevel(const CpuFeatures& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return CpuIsa::kScalar;
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)) return CpuIsa::kAvx2;
  if (!f.avx512vnni) return CpuIsa::kAvx512;
  return f.amx_int8 ? CpuIsa::kAmx : CpuIsa::kAvx512Vnni;
}

std::atomic<uint8_t> test_cap{static_cast<uint8_t>(kCpuIsaTop)};
std::atomic<bool> avx_vnni_allowed{true};

}  // namespace

const CpuFeatures& cpuFeatures() {
  static const CpuFeatures features = detect();
  return features;
}

CpuIsa cpuIsaSupported() {
  static const CpuIsa level = supportedLevel(cpuFeatures());
  return level;
}

std::vector<CpuIsa> cpuIsaLevelsAllowed() {
  std::vector<CpuIsa> levels;
  for (CpuIsa level : kCpuIsaLevels)
    if (level <= cpuIsaSupported() && level <= environmentCap().cap) levels.push_back(level);
  return levels;
}

CpuIsa cpuIsa() {
  uint8_t level = static_cast<uint8_t>(cpuIsaSupported());
  level = std::min(level, static_cast<uint8_t>(environmentCap().cap));
  level = std::min(level, test_cap.load(std::memory_order_relaxed));
  return static_cast<CpuIsa>(level);
}

bool cpuAvxVnni() {
  // LLMC_CPU_ISA=avx2 names AVX2 + FMA + F16C alone, so it turns AVX-VNNI off too.
  return cpuFeatures().avxvnni && cpuIsa() >= CpuIsa::kAvx2 && environmentCap().avx_vnni &&
         avx_vnni_allowed.load(std::memory_order_relaxed);
}

void setAvxVnniForTesting(bool allowed) {
  avx_vnni_allowed.store(allowed, std::memory_order_relaxed);
}

void setCpuIsaCapForTesting(CpuIsa cap) {
  test_cap.store(static_cast<uint8_t>(cap), std::memory_order_relaxed);
}

const char* cpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Vnni: return "avx512_vnni";
    case CpuIsa::kAmx: return "amx";
  }
  return "unknown";
}

bool parseCpuIsa(const std::string& name, CpuIsa* isa) {
  for (CpuIsa level : kCpuIsaLevels)
    if (name == cpuIsaName(level)) {
      *isa = level;
      return true;
    }
  return false;
}

std::string cpuSummary() {
  const CpuFeatures& f = cpuFeatures();
  std::string flags;
  auto flag = [&](bool has, const char* name) {
    if (has) flags += std::string(flags.empty() ? "" : " ") + name;
  };
  flag(f.avx2, "avx2");
  flag(f.fma, "fma");
  flag(f.f16c, "f16c");
  flag(f.avx512f, "avx512f");
  flag(f.avx512bw, "avx512bw");
  flag(f.avx512vl, "avx512vl");
  flag(f.avx512dq, "avx512dq");
  flag(f.avx512vnni, "avx512_vnni");
  flag(f.avx512vbmi2, "avx512_vbmi2");
  flag(f.avxvnni, "avx_vnni");
  flag(f.avx512bf16, "avx512_bf16");
  flag(f.avx512fp16, "avx512_fp16");
  flag(f.amx_int8, "amx_int8");
  flag(!f.amx_note.empty(), f.amx_note.c_str());
  std::string line = (f.model.empty() ? f.vendor : f.model) + "; " +
                     (flags.empty() ? "no AVX2" : flags) + "; kernels: " + cpuIsaName(cpuIsa());
  if (cpuIsa() == CpuIsa::kAvx2 && cpuAvxVnni()) line += " with avx_vnni";
  const EnvironmentCap& env = environmentCap();
  if (!env.text.empty())
    line += env.understood ? " (LLMC_CPU_ISA=" + env.text + ")"
                           : " (LLMC_CPU_ISA='" + env.text +
                                 "' ignored: scalar, avx2, avx_vnni, avx512, avx512_vnni or amx)";
  return line;
}

}  // namespace llmc

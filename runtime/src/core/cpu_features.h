// The CPU the runtime runs on: its features (cpuid, and the OS's support for the vector
// registers through xgetbv), read once, and the ISA level the CPU kernels dispatch on.
//
// One binary runs on any x86-64: each optimized kernel exists per level and the dispatch picks
// the highest level the CPU and the OS support. LLMC_CPU_ISA=scalar|avx2|avx512|avx512_vnni in
// the environment caps the level (to compare kernels, or to run as a smaller CPU would), as
// oneDNN's ONEDNN_MAX_CPU_ISA does; it never raises it. LLMC_CPU_ISA=amx names the top level;
// avx_vnni the avx2 level with AVX-VNNI (avx2 turns AVX-VNNI off).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

struct CpuFeatures {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model;       // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"
  bool os_avx = false;     // XCR0: the OS saves the YMM state
  bool os_avx512 = false;  // XCR0: the OS saves the opmask and ZMM state
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false, avxvnni = false;
  // AVX-512 VBMI2 (byte expand and compress): not a level of its own; the sparse weights'
  // expansion (core/sparse.h) takes it at the AVX-512 levels where the CPU has it.
  bool avx512vbmi2 = false;
  // AMX-TILE and AMX-INT8 with the tile state enabled by the OS (XCR0) and this process granted
  // it (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM), asked once when the features are first read).
  bool amx_int8 = false;
  // Where the CPU and OS have AMX-INT8 but it is not used: why ("amx_int8 not granted by the
  // OS", or not requested under an LLMC_CPU_ISA cap below amx); empty otherwise.
  std::string amx_note;
};

// The kernel levels, each a superset of the one before.
enum class CpuIsa : uint8_t {
  kScalar = 0,      // baseline x86-64 (SSE2): the reference loops
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ
  kAvx512Vnni = 3,  // and AVX-512 VNNI (int8/int16 dot products in one instruction)
  kAmx = 4,         // and AMX-INT8: 16 x 16 int32 tiles of int8 products (prefill's integer GEMMs)
};
// Every level, lowest first.
constexpr CpuIsa kCpuIsaLevels[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512,
                                    CpuIsa::kAvx512Vnni, CpuIsa::kAmx};
constexpr CpuIsa kCpuIsaTop = CpuIsa::kAmx;

// Read once (thread-safe).
const CpuFeatures& cpuFeatures();
// The highest level this CPU and OS support, before any cap.
CpuIsa cpuIsaSupported();
// The level the kernels use: cpuIsaSupported(), capped by LLMC_CPU_ISA and by
// setCpuIsaCapForTesting.
CpuIsa cpuIsa();
// AVX-VNNI (vpdpbusd and vpdpwssd on 256 bits, VEX-encoded; Intel's cores since Alder Lake and
// Sapphire Rapids) is not a level of its own: the avx2 level's integer panels
// take it where the CPU has it, as the AVX-512 levels take VBMI2. Whether they do: the CPU has
// it, the level is avx2 or above, LLMC_CPU_ISA is not avx2 (which names AVX2 + FMA + F16C
// alone: what a CPU without AVX-VNNI runs), and no test turned it off.
bool cpuAvxVnni();
// Tests run the avx2 level's kernels with and without it (true: as the CPU allows).
void setAvxVnniForTesting(bool allowed);
// The levels up to cpuIsaSupported() and LLMC_CPU_ISA's cap, lowest first: what the tests run
// each kernel at (a test's cap lowers the level, never lifts the environment's cap).
std::vector<CpuIsa> cpuIsaLevelsAllowed();
// Tests run each kernel at every level the host supports: cap the level (a value above the
// supported one is clamped), or pass the supported level back to lift the cap.
void setCpuIsaCapForTesting(CpuIsa cap);
const char* cpuIsaName(CpuIsa isa);
// "avx2" etc. into *isa; false for anything else.
bool parseCpuIsa(const std::string& name, CpuIsa* isa);
// One line for benchmarks and `llmc inspect`: the model, the flags that matter here, and the
// level in use ("..., kernels: avx512_vnni" or "..., kernels: avx2 (LLMC_CPU_ISA=avx2)").
std::string cpuSummary();

}  // namespace llmc

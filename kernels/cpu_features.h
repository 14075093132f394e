// The one CPU-feature probe of the process: which instruction sets the CPU kernels may use.
//
// Probed once (thread-safe, on first use) from CPUID and, for AMX, the kernel's permission: Linux
// hands out the AMX tile state only to processes that ask for it, so the probe asks once
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)); a refusal leaves AMX off, with the reason kept.
//
// Levels, each including the ones below it:
//   kBaseline  portable vector code (x86-64 SSE2, or any other architecture)
//   kAvx2      AVX2 + FMA (8-float vectors, 16 registers)
//   kAvx512    AVX-512 F/BW/VL/DQ (16-float vectors, 32 registers), FP32 only
//   kAmx       AMX tiles with BF16 (and AVX-512 BF16 for conversions): the BF16 GEMM; without
//              AMX, a CPU with AVX-512 BF16 runs the BF16 GEMM at kAvx512 with vdpbf16ps
//
// The level the kernels use is the highest the CPU and the OS allow, lowered by the environment
// (JASPER_CPU_ISA=baseline|avx2|avx512|amx caps it; JASPER_KERNELS_BASELINE=1 means baseline)
// or at run time by SetCpuIsaCap (tests force each path in turn; the server's --cpu_isa). The
// cap is one process-wide atomic: kernels read it once per call.
#ifndef JASPER_KERNELS_CPU_FEATURES_H_
#define JASPER_KERNELS_CPU_FEATURES_H_

#include <string>

namespace jasper::kernels {

enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

// "baseline", "avx2", "avx512", "amx".
const char* CpuIsaName(CpuIsa isa);
// Parses a CpuIsaName; false (and `isa` untouched) on anything else.
bool ParseCpuIsa(const std::string& name, CpuIsa* isa);

struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512 = false;       // F, BW, VL and DQ, and the OS saves the ZMM state
  bool avx512_bf16 = false;  // vcvtne2ps2bf16, vdpbf16ps
  bool avx512_vnni = false;
  // vdpbf16ps at twice the multiply-adds of an FP32 FMA per cycle: AMD's AVX-512 BF16 CPUs (Zen 4
  // and later; measured 1.8x FP32 on Zen 5). Intel's issue it on one port, slower than FP32
  // FMA (docs/PERFORMANCE.md).
  bool fast_avx512_bf16 = false;
  bool amx_bf16 = false;  // CPU has AMX-TILE and AMX-BF16
  bool amx_int8 = false;
  bool amx_permitted = false;       // the kernel granted the tile state to this process
  std::string amx_note;             // why AMX is off when the CPU has it ("" otherwise)
  CpuIsa best = CpuIsa::kBaseline;  // highest level this CPU and OS allow (before any cap)
};

// The probe's result; the same object for the life of the process.
const CpuFeatures& GetCpuFeatures();

// The level kernels use now: min(best, cap).
CpuIsa ActiveCpuIsa();

// Whether BF16 GEMMs run in hardware at the active level: AMX tiles (kAmx), or vdpbf16ps
// (kAvx512 on a CPU with AVX-512 BF16, e.g. AMD Zen 4). Without it a kBf16 sub-block runs on
// portable loops (correct, slow).
bool HasBf16Gemm();

// Whether BF16 GEMMs run faster than FP32 ones at the active level: AMX tiles, or vdpbf16ps where
// it is fast (CpuFeatures::fast_avx512_bf16). What --cpu_precision=auto picks BF16 by.
bool Bf16GemmFasterThanFp32();

// Whether a BF16 depthwise conv (vdpbf16ps) beats the FP32 one at the active level: AVX-512 BF16
// where it is fast (CpuFeatures::fast_avx512_bf16) and the level is kAvx512. Not with AMX: there
// vdpbf16ps runs on one port, slower than FP32 FMAs (docs/PERFORMANCE.md). PackSubBlock asks it
// when it packs a kBf16 separable sub-block.
bool Bf16DepthwiseFasterThanFp32();

// Whether INT8 GEMMs run in hardware at the active level: AMX INT8 tiles (kAmx on a CPU with
// AMX-INT8), or vpdpbusd (kAvx512 and up on a CPU with AVX-512 VNNI). Without it a kInt8
// sub-block runs on portable loops (correct, slow).
bool HasInt8Gemm();

// Caps the level (a cap above `best` means `best`); returns the previous cap. Takes effect for
// kernel calls that start afterwards. Thread-safe.
CpuIsa SetCpuIsaCap(CpuIsa cap);

// One line for logs: "avx2 fma avx512 avx512_bf16 avx512_vnni amx_bf16 amx_int8; using amx".
std::string DescribeCpuFeatures();

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_CPU_FEATURES_H_

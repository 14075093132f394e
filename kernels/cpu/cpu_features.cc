// The CPU-feature probe (kernels/cpu_features.h): CPUID, XGETBV and the Linux AMX permission.
#include "kernels/cpu_features.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#define JASPER_PROBE_X86 1
#else
#define JASPER_PROBE_X86 0
#endif
#if JASPER_PROBE_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace jasper::kernels {
namespace {

#if JASPER_PROBE_X86
bool Bit(unsigned value, int bit) { return ((value >> bit) & 1u) != 0; }

// XCR0: the register states the OS saves on a context switch.
std::uint64_t Xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

// Asks Linux for the AMX tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA))
// and checks it was granted (ARCH_GET_XCOMP_PERM). Empty on success, else the reason.
std::string RequestAmxPermission() {
#if defined(__linux__)
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return std::string("the kernel refused the AMX tile state (arch_prctl: ") +
           std::strerror(errno) + ")";
  }
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
      ((granted >> kXfeatureXtiledata) & 1ul) == 0) {
    return "the kernel did not grant the AMX tile state";
  }
  return "";
#else
  return "AMX needs Linux's arch_prctl permission";
#endif
}
#endif  // JASPER_PROBE_X86

CpuFeatures Probe() {
  CpuFeatures f;
#if JASPER_PROBE_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = Bit(c, 12);
  const bool osxsave = Bit(c, 27);
  if (!osxsave) return f;
  const std::uint64_t xcr0 = Xgetbv0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM, YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG, XTILEDATA
  unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d7)) {
    unsigned b71 = 0, c71 = 0, d71 = 0;
    __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  }
  f.avx2_fma = os_avx && fma && Bit(b7, 5);
  f.avx512 = os_avx512 && f.avx2_fma && Bit(b7, 16) && Bit(b7, 17) && Bit(b7, 30) && Bit(b7, 31);
  f.avx512_bf16 = f.avx512 && Bit(a71, 5);
  f.avx512_vnni = f.avx512 && Bit(c7, 11);
  unsigned vendor[3] = {};  // "AuthenticAMD" as EBX, EDX, ECX of leaf 0
  __get_cpuid(0, &a, &vendor[0], &vendor[2], &vendor[1]);
  f.fast_avx512_bf16 = f.avx512_bf16 && std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  const bool amx_tile = Bit(d7, 24);
  f.amx_bf16 = amx_tile && Bit(d7, 22);
  f.amx_int8 = amx_tile && Bit(d7, 25);
  if (f.amx_bf16) {
    if (!f.avx512_bf16) {
      f.amx_note = "AMX without AVX-512 BF16 is not used";
    } else if (!os_amx) {
      f.amx_note = "the OS does not enable the AMX tile state (XCR0)";
    } else {
      f.amx_note = RequestAmxPermission();
      f.amx_permitted = f.amx_note.empty();
    }
  }
  if (f.amx_permitted) {
    f.best = CpuIsa::kAmx;
  } else if (f.avx512) {
    f.best = CpuIsa::kAvx512;
  } else if (f.avx2_fma) {
    f.best = CpuIsa::kAvx2;
  }
#endif
  return f;
}

// The cap from the environment (JASPER_KERNELS_BASELINE=1 or JASPER_CPU_ISA), else no cap.
CpuIsa InitialCap() {
  if (const char* env = std::getenv("JASPER_KERNELS_BASELINE"); env && env[0] == '1') {
    return CpuIsa::kBaseline;
  }
  CpuIsa cap = CpuIsa::kAmx;
  if (const char* env = std::getenv("JASPER_CPU_ISA")) ParseCpuIsa(env, &cap);
  return cap;
}

std::atomic<int>& Cap() {
  static std::atomic<int> cap{static_cast<int>(InitialCap())};
  return cap;
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "?";
}

bool ParseCpuIsa(const std::string& name, CpuIsa* isa) {
  for (CpuIsa candidate : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx}) {
    if (name == CpuIsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

CpuIsa ActiveCpuIsa() {
  const int best = static_cast<int>(GetCpuFeatures().best);
  const int cap = Cap().load(std::memory_order_relaxed);
  return static_cast<CpuIsa>(cap < best ? cap : best);
}

bool HasBf16Gemm() {
  const CpuIsa isa = ActiveCpuIsa();
  return isa == CpuIsa::kAmx || (isa == CpuIsa::kAvx512 && GetCpuFeatures().avx512_bf16);
}

bool Bf16GemmFasterThanFp32() {
  const CpuIsa isa = ActiveCpuIsa();
  return isa == CpuIsa::kAmx || (isa == CpuIsa::kAvx512 && GetCpuFeatures().fast_avx512_bf16);
}

bool Bf16DepthwiseFasterThanFp32() {
  return ActiveCpuIsa() == CpuIsa::kAvx512 && GetCpuFeatures().fast_avx512_bf16;
}

bool HasInt8Gemm() {
  const CpuIsa isa = ActiveCpuIsa();
  const CpuFeatures& f = GetCpuFeatures();
  return (isa == CpuIsa::kAmx && f.amx_int8) ||
         ((isa == CpuIsa::kAmx || isa == CpuIsa::kAvx512) && f.avx512_vnni);
}

CpuIsa SetCpuIsaCap(CpuIsa cap) {
  return static_cast<CpuIsa>(Cap().exchange(static_cast<int>(cap)));
}

std::string DescribeCpuFeatures() {
  const CpuFeatures& f = GetCpuFeatures();
  std::string s;
  auto add = [&s](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2_fma, "avx2 fma");
  add(f.avx512, "avx512");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  if (s.empty()) s = "no AVX2";
  s += "; kernels use ";
  s += CpuIsaName(ActiveCpuIsa());
  if (!f.amx_note.empty()) s += " (" + f.amx_note + ")";
  return s;
}

}  // namespace jasper::kernels

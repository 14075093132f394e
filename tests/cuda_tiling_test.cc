// CPU tests of the CUDA kernel's host-callable arithmetic (kernels/cuda/tiling.h) and weight
// packing (kernels/cuda/weight_pack.h). Built and run everywhere, GPU or not: every index,
// halo, mask and K-concatenation formula the kernel uses is checked against brute force, and
// a CPU emulation that walks the kernel's exact loop structure (tiles, chunks, taps, residual
// steps, packed weights, epilogue) is checked against kernels::SubBlockReference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/tiling.h"
#include "kernels/cuda/weight_pack.h"
#include "kernels/sub_block.h"

namespace jasper::kernels::cuda {

// Readable parameter values in test listings (ctest names).
inline void PrintTo(Precision p, std::ostream* os) {
  *os << (p == Precision::kFp32 ? "fp32" : p == Precision::kFp16 ? "fp16" : "bf16");
}

namespace {

// ---- Tiling ----------------------------------------------------------------------------------

TEST(CudaTilingTest, MTilesCoverEveryFrameOnce) {
  for (int out_time : {1, 2, 63, 64, 65, 100, 127, 128, 129, 1000}) {
    for (int batch : {1, 3, 33}) {
      const int per_item = MTilesPerItem(out_time);
      EXPECT_EQ(per_item, (out_time + kTileM - 1) / kTileM);
      std::vector<int> seen(static_cast<size_t>(batch) * out_time, 0);
      for (int tile = 0; tile < batch * per_item; ++tile) {
        const MTile m = DecodeMTile(tile, per_item);
        ASSERT_GE(m.batch_index, 0);
        ASSERT_LT(m.batch_index, batch);
        ASSERT_EQ(m.first_frame % kTileM, 0);
        const int rows = StoredRows(m.first_frame, out_time);
        ASSERT_GT(rows, 0) << "a tile with nothing to store";
        for (int r = 0; r < rows; ++r) ++seen[m.batch_index * out_time + m.first_frame + r];
        // Rows past StoredRows are past the buffer.
        EXPECT_TRUE(rows == kTileM || m.first_frame + rows == out_time);
      }
      for (int v : seen) ASSERT_EQ(v, 1);
    }
  }
}

TEST(CudaTilingTest, ClampAndPredicateMatchBruteForce) {
  for (int extent : {0, 1, 5, 64}) {
    for (int len = -3; len <= extent + 3; ++len) {
      const int clamped = ClampLength(len, extent);
      EXPECT_EQ(clamped, std::min(std::max(len, 0), extent));
      for (int t = -5; t < extent + 5; ++t) {
        EXPECT_EQ(InputFrameValid(t, clamped), t >= 0 && t < clamped);
      }
    }
  }
  for (int channels : {1, 31, 32, 33, 64, 100}) {
    for (int chunk = 0; chunk < Chunks(channels) + 1; ++chunk) {
      for (int lane = 0; lane < kChunk; ++lane) {
        EXPECT_EQ(ChannelValid(chunk, lane, channels), chunk * kChunk + lane < channels);
      }
    }
  }
}

// Every (tile row, tap) reads the input frame t*stride - padding + tap*dilation (torch.Conv1d),
// through a halo row inside [0, HaloRows), and the last row is used.
TEST(CudaTilingTest, HaloRowsMatchConvolutionDefinition) {
  struct Case {
    int k, s, d, p;
  };
  for (const Case& c : {Case{1, 1, 1, 0}, Case{3, 1, 1, 1}, Case{33, 2, 1, 16}, Case{11, 2, 1, 5},
                        Case{87, 1, 2, 86}, Case{29, 1, 2, 28}, Case{75, 1, 1, 37},
                        Case{4, 3, 1, 0}, Case{5, 1, 3, 2}}) {
    const int rows = HaloRows(kTileM, c.k, c.s, c.d);
    for (int first_frame : {0, 64, 128, 640}) {
      const int first_input = HaloFirstInputFrame(first_frame, c.s, c.p);
      int max_row = -1;
      for (int m = 0; m < kTileM; ++m) {
        for (int tap = 0; tap < c.k; ++tap) {
          const int row = HaloRowOf(m, tap, c.s, c.d);
          ASSERT_GE(row, 0);
          ASSERT_LT(row, rows);
          max_row = std::max(max_row, row);
          EXPECT_EQ(first_input + row, (first_frame + m) * c.s - c.p + tap * c.d);
        }
      }
      EXPECT_EQ(max_row, rows - 1);
    }
  }
}

// The depthwise register window (stride 1, dilation 1) holds the right rows at every tap and
// never loads past the halo.
TEST(CudaTilingTest, DepthwiseSlidingWindowMatchesDirectIndexing) {
  for (int taps : {1, 2, 3, 33, 75, 87}) {
    const int rows = HaloRows(kTileM, taps, 1, 1);
    std::set<int> frames;
    for (int warp = 0; warp < kWarps; ++warp) {
      const int m0 = DwFirstFrame(warp);
      int window[kDwFrames];
      for (int i = 0; i < kDwFrames; ++i) {
        window[i] = m0 + i;
        frames.insert(m0 + i);
      }
      for (int k = 0; k < taps; ++k) {
        for (int i = 0; i < kDwFrames; ++i) {
          ASSERT_EQ(window[i], HaloRowOf(m0 + i, k, 1, 1)) << "warp " << warp << " tap " << k;
        }
        if (k + 1 < taps) {
          for (int i = 0; i + 1 < kDwFrames; ++i) window[i] = window[i + 1];
          window[kDwFrames - 1] = DwWindowNextRow(m0, k);
          ASSERT_LT(window[kDwFrames - 1], rows);
        }
      }
    }
    EXPECT_EQ(static_cast<int>(frames.size()), kTileM);
    EXPECT_EQ(*frames.begin(), 0);
  }
}

TEST(CudaTilingTest, OutputChannelTiles) {
  for (int c_out = 1; c_out <= 1100; ++c_out) {
    const int n_padded = PaddedOutChannels(c_out);
    ASSERT_GE(n_padded, c_out);
    ASSERT_LT(n_padded - c_out, kNPadMultiple);
    ASSERT_EQ(n_padded % kNPadMultiple, 0);
    const int tile_n = TileNFor(n_padded);
    ASSERT_EQ(n_padded % tile_n, 0);
    if (n_padded % kWideN == 0) {
      EXPECT_EQ(tile_n, kWideN);
    }
  }
  EXPECT_EQ(TileNFor(PaddedOutChannels(29)), kNarrowN);  // the CTC decoder
  EXPECT_EQ(TileNFor(PaddedOutChannels(512)), kWideN);
  EXPECT_EQ(TileNFor(PaddedOutChannels(384)), kWideN);
}

// The kernel's loop order (chunks x taps, then residual chunks) is the step order, and the
// packed-row formulas send every canonical weight row to a distinct row of its own step.
TEST(CudaTilingTest, KScheduleAndResidualConcatenationOffsets) {
  struct Case {
    int c_in, k;
    bool separable;
    std::vector<int> residuals;
  };
  const std::vector<Case> cases = {
      {64, 33, true, {}},
      {256, 33, true, {256}},
      {37, 5, true, {19, 64}},
      {40, 11, false, {}},
      {96, 3, false, {96, 33, 1}},
      {1, 1, false, {}},
      {256, 11, false, {256, 256, 256, 384, 384, 512, 512, 640, 640, 768}}};
  for (const Case& c : cases) {
    SubBlockDesc desc;
    desc.in_channels = c.c_in;
    desc.out_channels = 8;
    desc.kernel_size = c.k;
    desc.separable = c.separable;
    const int num_res = static_cast<int>(c.residuals.size());
    // Walk the loop exactly as the kernel does.
    int step = 0;
    std::vector<std::pair<int, int>> main_steps;  // step -> (chunk, tap)
    for (int chunk = 0; chunk < Chunks(c.c_in); ++chunk) {
      for (int tap = 0; tap < TapsPerChunk(c.k, c.separable); ++tap, ++step) {
        ASSERT_EQ(MainStep(chunk, tap, c.k, c.separable), step);
      }
    }
    const int main = MainSteps(c.c_in, c.k, c.separable);
    ASSERT_EQ(step, main);
    int chunks_before = 0;
    for (int p = 0; p < num_res; ++p) {
      for (int chunk = 0; chunk < Chunks(c.residuals[p]); ++chunk, ++step) {
        ASSERT_EQ(ResidualStep(main, chunks_before, chunk), step);
      }
      chunks_before += Chunks(c.residuals[p]);
    }
    ASSERT_EQ(KSteps(desc, c.residuals.data(), num_res), step);

    // Packed rows: distinct, inside their step, lane = channel % kChunk.
    std::set<int> rows;
    for (int tap = 0; tap < (c.separable ? 1 : c.k); ++tap) {
      for (int ch = 0; ch < c.c_in; ++ch) {
        const int row = PackedMainRow(ch, tap, c.k, c.separable);
        ASSERT_EQ(row / kChunk, MainStep(ch / kChunk, tap, c.k, c.separable));
        ASSERT_EQ(row % kChunk, ch % kChunk);
        ASSERT_TRUE(rows.insert(row).second);
      }
    }
    chunks_before = 0;
    for (int p = 0; p < num_res; ++p) {
      for (int ch = 0; ch < c.residuals[p]; ++ch) {
        const int row = PackedResidualRow(main, chunks_before, ch);
        ASSERT_EQ(row / kChunk, ResidualStep(main, chunks_before, ch / kChunk));
        ASSERT_EQ(row % kChunk, ch % kChunk);
        ASSERT_TRUE(rows.insert(row).second);
      }
      chunks_before += Chunks(c.residuals[p]);
    }
    ASSERT_LT(*rows.rbegin(), step * kChunk);
  }
}

TEST(CudaTilingTest, SharedMemoryLayoutIsAlignedAndDisjoint) {
  for (int elem : {2, 4}) {
    for (int tile_n : {kNarrowN, kWideN}) {
      for (int halo_rows : {64, 96, 127, 138, 236}) {
        for (int dw_taps : {0, 1, 33, 87}) {
          const SmemLayout l = MakeSmemLayout(elem, tile_n, halo_rows, dw_taps);
          struct Region {
            int begin, bytes;
          };
          const std::vector<Region> regions = {{l.halo, halo_rows * kChunk * 4},
                                               {l.dw, dw_taps * kChunk * 4},
                                               {l.a, kTileM * l.ld_a * elem},
                                               {l.b0, kChunk * l.ld_b * elem},
                                               {l.b1, kChunk * l.ld_b * elem}};
          for (size_t i = 0; i < regions.size(); ++i) {
            EXPECT_EQ(regions[i].begin % kSmemAlign, 0);
            EXPECT_LE(regions[i].begin + regions[i].bytes, l.main_loop_bytes);
            for (size_t j = i + 1; j < regions.size(); ++j) {
              const bool disjoint = regions[i].begin + regions[i].bytes <= regions[j].begin ||
                                    regions[j].begin + regions[j].bytes <= regions[i].begin;
              EXPECT_TRUE(disjoint || regions[i].bytes == 0 || regions[j].bytes == 0);
            }
          }
          EXPECT_EQ(l.c, 0);
          EXPECT_LE(kTileM * l.ld_c * 4, l.total_bytes);
          EXPECT_LE(l.main_loop_bytes, l.total_bytes);
          // WMMA: ldm multiple of 16 bytes; fragment pointers (16-row / 16-col steps) 32-byte
          // aligned; cp.async: B rows 16-byte aligned.
          EXPECT_EQ(l.ld_a * elem % 16, 0);
          EXPECT_EQ(l.ld_b * elem % 16, 0);
          EXPECT_EQ(l.ld_c * 4 % 16, 0);
          EXPECT_EQ(16 * l.ld_a * elem % 32, 0);
          EXPECT_EQ(16 * l.ld_b * elem % 32, 0);
          EXPECT_EQ(16 * l.ld_c * 4 % 32, 0);
          EXPECT_EQ(BPiecesPerRow(tile_n, elem) * 16, tile_n * elem);
        }
      }
    }
  }
  // The largest QuartzNet window (C2: K=87, dilation 2) fits H100/H200's 227 KiB opt-in and
  // A100's 163 KiB for every precision.
  const int rows = HaloRows(kTileM, 87, 1, 2);
  EXPECT_LE(MakeSmemLayout(4, kWideN, rows, 87).total_bytes, 163 * 1024);
}

TEST(CudaTilingTest, GemmThreadMappingsCoverTheTileOnce) {
  for (int tile_n : {kNarrowN, kWideN}) {
    std::vector<int> simt(kTileM * tile_n, 0);
    for (int tid = 0; tid < kThreads; ++tid) {
      for (int i = 0; i < kTileM / kSimtThreadsM; ++i) {
        for (int j = 0; j < tile_n / kSimtThreadsN; ++j) {
          const int r = SimtRow(tid, i);
          const int c = SimtCol(tid, j);
          ASSERT_LT(r, kTileM);
          ASSERT_LT(c, tile_n);
          ++simt[r * tile_n + c];
        }
      }
    }
    for (int v : simt) ASSERT_EQ(v, 1);

    ASSERT_EQ(WmmaWarpsM(tile_n) * WmmaWarpsN(tile_n), kWarps);
    std::vector<int> wmma(kTileM * tile_n, 0);
    for (int warp = 0; warp < kWarps; ++warp) {
      for (int i = 0; i < WmmaFragsM(tile_n); ++i) {
        for (int j = 0; j < WmmaFragsN(tile_n); ++j) {
          const int r0 = WmmaFragRow(warp, i, tile_n);
          const int c0 = WmmaFragCol(warp, j, tile_n);
          for (int r = r0; r < r0 + 16; ++r) {
            for (int c = c0; c < c0 + 16; ++c) {
              ASSERT_LT(r, kTileM);
              ASSERT_LT(c, tile_n);
              ++wmma[r * tile_n + c];
            }
          }
        }
      }
    }
    for (int v : wmma) ASSERT_EQ(v, 1);
  }
}

// ---- FP16 / BF16 conversions -----------------------------------------------------------------

TEST(CudaConvertTest, HalfAndBf16RoundTripEveryBitPattern) {
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = HalfBitsToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f))));
    } else {
      ASSERT_EQ(FloatToHalfBits(f), h) << bits;
    }
    const float g = Bf16BitsToFloat(h);
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(g))));
    } else {
      ASSERT_EQ(FloatToBf16Bits(g), h) << bits;
    }
  }
}

// Round to nearest, ties to even, against brute force over the two neighbouring codes.
TEST(CudaConvertTest, RoundingIsNearestEven) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 17);
  auto check = [](float x, std::uint16_t got, float (*decode)(std::uint16_t)) {
    const float value = decode(got);
    // The neighbours of `got` in the same sign direction.
    const float up = decode(static_cast<std::uint16_t>(got + 1));
    const float down = (got & 0x7fffu) == 0 ? value : decode(static_cast<std::uint16_t>(got - 1));
    const double err = std::fabs(static_cast<double>(value) - x);
    if (!std::isinf(up)) {
      EXPECT_LE(err, std::fabs(static_cast<double>(up) - x)) << x;
    }
    EXPECT_LE(err, std::fabs(static_cast<double>(down) - x)) << x;
    if (err == std::fabs(static_cast<double>(up) - x) && !std::isinf(up) && err > 0) {
      EXPECT_EQ(got & 1u, 0u) << "tie not to even at " << x;
    }
  };
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(unit(rng), exponent(rng));
    if (std::fabs(x) < 65504.0f) check(x, FloatToHalfBits(x), HalfBitsToFloat);
    check(x, FloatToBf16Bits(x), Bf16BitsToFloat);
  }
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00u);                  // tie rounds to even = Inf
  EXPECT_EQ(FloatToHalfBits(5.9604644775390625e-08f), 0x0001u);   // 2^-24
  EXPECT_EQ(FloatToHalfBits(2.98023223876953125e-08f), 0x0000u);  // 2^-25: tie to even 0
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80u);
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(FloatToHalfBits(1e10f))));
}

// ---- Packing + emulation of the kernel -------------------------------------------------------

float Quantize(Precision precision, float v) {
  switch (precision) {
    case Precision::kFp32:
      return v;
    case Precision::kFp16:
      return HalfBitsToFloat(FloatToHalfBits(v));
    case Precision::kBf16:
      return Bf16BitsToFloat(FloatToBf16Bits(v));
    case Precision::kInt8:  // not a CUDA precision
      break;
  }
  return v;
}

// Runs the fused kernel's algorithm on the CPU, step for step: the same tiles, halo loads with
// the same predicates, the same K-step order over the PACKED weights, the same operand
// rounding (A and B in the run precision, FP32 accumulation) and the same epilogue.
void EmulateKernel(const PackedSubBlock& packed, const float* x, const BatchGeometry& g,
                   const std::vector<const float*>& residual_x, float* y) {
  const SubBlockDesc& d = packed.desc;
  const Precision prec = packed.precision;
  std::vector<float> b_matrix(packed.weight.size() / PrecisionBytes(prec));
  ConvertToFloat(prec, packed.weight.data(), b_matrix.size(), b_matrix.data());
  const int n_pad = packed.n_padded;
  const int tiles = MTilesPerItem(g.out_time);
  const int halo_rows = HaloRows(kTileM, d.kernel_size, d.stride, d.dilation);
  std::vector<float> halo(static_cast<size_t>(halo_rows) * kChunk);
  std::vector<float> a(static_cast<size_t>(kTileM) * kChunk);
  std::vector<float> acc(static_cast<size_t>(kTileM) * n_pad);
  const int c_pad = Chunks(d.in_channels) * kChunk;
  for (int tile = 0; tile < g.batch * tiles; ++tile) {
    const MTile t = DecodeMTile(tile, tiles);
    const int b = t.batch_index;
    const int t0 = t.first_frame;
    const int in_len = ClampLength(g.in_lengths[b], g.in_time);
    const int out_len = ClampLength(g.out_lengths[b], g.out_time);
    const int rows = StoredRows(t0, g.out_time);
    std::fill(acc.begin(), acc.end(), 0.0f);
    int step = 0;
    auto gemm = [&]() {
      for (int m = 0; m < kTileM; ++m) {
        for (int k = 0; k < kChunk; ++k) {
          const float av = a[m * kChunk + k];
          const float* brow = b_matrix.data() + (static_cast<size_t>(step) * kChunk + k) * n_pad;
          for (int n = 0; n < n_pad; ++n) acc[m * n_pad + n] += av * brow[n];
        }
      }
      ++step;
    };
    if (t0 < out_len) {
      const float* xb = x + static_cast<size_t>(b) * g.in_time * d.in_channels;
      const int first_input = HaloFirstInputFrame(t0, d.stride, d.padding);
      for (int chunk = 0; chunk < Chunks(d.in_channels); ++chunk) {
        for (int r = 0; r < halo_rows; ++r) {
          for (int lane = 0; lane < kChunk; ++lane) {
            const int ti = first_input + r;
            halo[r * kChunk + lane] =
                InputFrameValid(ti, in_len) && ChannelValid(chunk, lane, d.in_channels)
                    ? xb[static_cast<size_t>(ti) * d.in_channels + chunk * kChunk + lane]
                    : 0.0f;
          }
        }
        for (int tap = 0; tap < TapsPerChunk(d.kernel_size, d.separable); ++tap) {
          for (int m = 0; m < kTileM; ++m) {
            for (int lane = 0; lane < kChunk; ++lane) {
              float v = 0.0f;
              if (d.separable) {
                for (int k = 0; k < d.kernel_size; ++k) {
                  v += packed.depthwise[static_cast<size_t>(k) * c_pad + chunk * kChunk + lane] *
                       halo[HaloRowOf(m, k, d.stride, d.dilation) * kChunk + lane];
                }
              } else {
                v = halo[HaloRowOf(m, tap, d.stride, d.dilation) * kChunk + lane];
              }
              a[m * kChunk + lane] = Quantize(prec, v);
            }
          }
          gemm();
        }
      }
      for (size_t p = 0; p < residual_x.size(); ++p) {
        const int channels = packed.residual_channels[p];
        const float* xr = residual_x[p] + static_cast<size_t>(b) * g.out_time * channels;
        for (int chunk = 0; chunk < Chunks(channels); ++chunk) {
          for (int m = 0; m < kTileM; ++m) {
            for (int lane = 0; lane < kChunk; ++lane) {
              const int tt = t0 + m;
              a[m * kChunk + lane] =
                  tt < out_len && ChannelValid(chunk, lane, channels)
                      ? xr[static_cast<size_t>(tt) * channels + chunk * kChunk + lane]
                      : 0.0f;
            }
          }
          gemm();
        }
      }
      EXPECT_EQ(step, packed.k_steps);
    }
    float* yb = y + static_cast<size_t>(b) * g.out_time * d.out_channels;
    for (int m = 0; m < rows; ++m) {
      for (int n = 0; n < d.out_channels; ++n) {
        float v = 0.0f;
        if (t0 + m < out_len) {
          v = acc[m * n_pad + n] + packed.bias[n];
          if (d.activation == Activation::kRelu && v < 0.0f) v = 0.0f;
        }
        yb[static_cast<size_t>(t0 + m) * d.out_channels + n] = Quantize(prec, v);
      }
    }
  }
}

struct EmulationCase {
  int c_in, c_out, k, stride, dilation;
  bool separable;
  std::vector<int> residual_channels;  // empty: no residual
  int batch, in_time;
};

void RunEmulation(const EmulationCase& c, Precision precision) {
  std::mt19937 rng(1234 + c.c_in * 7 + c.k);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  SubBlockDesc d;
  d.in_channels = c.c_in;
  d.out_channels = c.c_out;
  d.kernel_size = c.k;
  d.stride = c.stride;
  d.dilation = c.dilation;
  d.padding = c.stride > 1 ? c.k / 2 : c.dilation * (c.k - 1) / 2;
  d.separable = c.separable;
  const int out_time = ConvOutputLength(d, c.in_time);
  ASSERT_GT(out_time, 0);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = dist(rng);
    return v;
  };
  std::vector<float> depthwise = random(static_cast<size_t>(c.k) * c.c_in);
  std::vector<float> weight = random(static_cast<size_t>(c.separable ? 1 : c.k) * c.c_in * c.c_out);
  for (float& w : weight) w *= 0.2f;
  std::vector<float> bias = random(c.c_out);
  std::vector<float> x = random(static_cast<size_t>(c.batch) * c.in_time * c.c_in);
  std::vector<int> in_lengths(c.batch), out_lengths(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    in_lengths[b] = b == 0 ? c.in_time : 1 + static_cast<int>(rng() % c.in_time);
    out_lengths[b] = ConvOutputLength(d, in_lengths[b]);
    // Garbage past the length: the mask must keep it out.
    for (int t = in_lengths[b]; t < c.in_time; ++t) {
      for (int ch = 0; ch < c.c_in; ++ch) {
        x[(static_cast<size_t>(b) * c.in_time + t) * c.c_in + ch] =
            std::numeric_limits<float>::quiet_NaN();
      }
    }
  }
  const int num_res = static_cast<int>(c.residual_channels.size());
  std::vector<std::vector<float>> res_x(num_res), res_w(num_res);
  std::vector<const float*> res_x_ptr, res_w_ptr;
  std::vector<ResidualInput> residuals(num_res);
  for (int p = 0; p < num_res; ++p) {
    const int ch = c.residual_channels[p];
    res_x[p] = random(static_cast<size_t>(c.batch) * out_time * ch);
    for (int b = 0; b < c.batch; ++b) {
      for (int t = out_lengths[b]; t < out_time; ++t) {
        for (int j = 0; j < ch; ++j) {
          res_x[p][(static_cast<size_t>(b) * out_time + t) * ch + j] =
              std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
    res_w[p] = random(static_cast<size_t>(ch) * c.c_out);
    res_x_ptr.push_back(res_x[p].data());
    res_w_ptr.push_back(res_w[p].data());
    residuals[p] = ResidualInput{res_x[p].data(), res_w[p].data(), ch};
  }

  SubBlockWeights weights{c.separable ? depthwise.data() : nullptr, weight.data(), bias.data()};
  PackedSubBlock packed;
  std::string error;
  ASSERT_TRUE(PackSubBlock(d, weights, res_w_ptr.data(), c.residual_channels.data(), num_res,
                           precision, &packed, &error))
      << error;
  ASSERT_EQ(packed.weight.size(), static_cast<size_t>(packed.k_steps) * kChunk * packed.n_padded *
                                      PrecisionBytes(precision));

  BatchGeometry g{c.batch, c.in_time, out_time, in_lengths.data(), out_lengths.data()};
  const size_t y_size = static_cast<size_t>(c.batch) * out_time * c.c_out;
  std::vector<float> expected(y_size, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> got(y_size, std::numeric_limits<float>::quiet_NaN());
  SubBlockReference(d, weights, x.data(), g, residuals.data(), num_res, expected.data());
  EmulateKernel(packed, x.data(), g, res_x_ptr, got.data());

  double dot = 0, ee = 0, gg = 0, max_err = 0, max_ref = 0;
  for (size_t i = 0; i < y_size; ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "element " << i << " unwritten or polluted";
    dot += static_cast<double>(got[i]) * expected[i];
    ee += static_cast<double>(expected[i]) * expected[i];
    gg += static_cast<double>(got[i]) * got[i];
    max_err = std::max(max_err, std::fabs(static_cast<double>(got[i]) - expected[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(expected[i])));
  }
  if (precision == Precision::kFp32) {
    EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref));
  } else {
    const double cosine = dot / std::sqrt(std::max(ee * gg, 1e-30));
    EXPECT_GE(cosine, 0.999);
  }
}

class CudaEmulationTest : public ::testing::TestWithParam<Precision> {};

TEST_P(CudaEmulationTest, SeparableWithResidualMatchesReference) {
  RunEmulation({37, 45, 9, 1, 1, true, {37}, 3, 70}, GetParam());
}
TEST_P(CudaEmulationTest, SeparableStrideTwo) {
  RunEmulation({20, 33, 7, 2, 1, true, {}, 2, 131}, GetParam());
}
TEST_P(CudaEmulationTest, SeparableDilated) {
  RunEmulation({33, 64, 5, 1, 2, true, {}, 2, 66}, GetParam());
}
TEST_P(CudaEmulationTest, DenseWithDenseResiduals) {
  RunEmulation({24, 40, 3, 1, 1, false, {24, 17, 40}, 2, 65}, GetParam());
}
TEST_P(CudaEmulationTest, DensePointwiseDecoderShape) {
  RunEmulation({48, 29, 1, 1, 1, false, {}, 3, 40}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaEmulationTest,
                         ::testing::Values(Precision::kFp32, Precision::kFp16, Precision::kBf16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           switch (info.param) {
                             case Precision::kFp32:
                               return std::string("Fp32");
                             case Precision::kFp16:
                               return std::string("Fp16");
                             case Precision::kBf16:
                               return std::string("Bf16");
                             case Precision::kInt8:  // not a CUDA precision
                               break;
                           }
                           return std::string("Unknown");
                         });

TEST(CudaPackTest, RejectsBadInput) {
  SubBlockDesc d;
  d.in_channels = 4;
  d.out_channels = 4;
  d.kernel_size = 3;
  d.padding = 1;
  d.separable = true;
  std::vector<float> w(16, 1.0f);
  PackedSubBlock packed;
  std::string error;
  EXPECT_FALSE(PackSubBlock(d, SubBlockWeights{nullptr, w.data(), nullptr}, nullptr, nullptr, 0,
                            Precision::kFp32, &packed, &error));
  EXPECT_FALSE(error.empty());
  d.kernel_size = 0;
  EXPECT_FALSE(PackSubBlock(d, SubBlockWeights{w.data(), w.data(), nullptr}, nullptr, nullptr, 0,
                            Precision::kFp32, &packed, &error));
  d.kernel_size = 3;
  std::vector<const float*> many(kMaxResiduals + 1, w.data());
  std::vector<int> channels(kMaxResiduals + 1, 4);
  EXPECT_FALSE(PackSubBlock(d, SubBlockWeights{w.data(), w.data(), nullptr}, many.data(),
                            channels.data(), kMaxResiduals + 1, Precision::kFp32, &packed, &error));
  EXPECT_TRUE(PackSubBlock(d, SubBlockWeights{w.data(), w.data(), nullptr}, many.data(),
                           channels.data(), 2, Precision::kFp16, &packed, &error))
      << error;
  EXPECT_EQ(packed.bias, std::vector<float>(packed.n_padded, 0.0f));
  // INT8 is a CPU precision only: the CUDA packer refuses it, saying so.
  error.clear();
  EXPECT_FALSE(PackSubBlock(d, SubBlockWeights{w.data(), w.data(), nullptr}, nullptr, nullptr, 0,
                            Precision::kInt8, &packed, &error));
  EXPECT_NE(error.find("INT8"), std::string::npos) << error;
}

}  // namespace
}  // namespace jasper::kernels::cuda

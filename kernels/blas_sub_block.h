// The fused CPU sub-block on the caller's unpacked weights with OpenBLAS SGEMMs (library
// jasper_kernels_blas; kernels/cpu/blas_sub_block.cc): the tests' second oracle and the
// benchmark's comparison. Nothing the server runs calls it, so only the tests and jasper_bench
// link OpenBLAS. Same contract, shapes and masking as kernels/sub_block.h.
//
// Thread-safety: reentrant; writes only `y` and `workspace`.
#ifndef JASPER_KERNELS_BLAS_SUB_BLOCK_H_
#define JASPER_KERNELS_BLAS_SUB_BLOCK_H_

#include <cstddef>

#include "kernels/sub_block.h"

namespace jasper::kernels {

// Fused CPU sub-block with OpenBLAS (the backend runs the packed variant
// of kernels/sub_block.h). Time-tiled (256 output frames). Separable: the tile's depthwise output
// stays in cache and feeds one pointwise GEMM. Dense: one GEMM per tap on shifted views of the
// input, summed into the output tile (no im2col: OpenBLAS re-packs the weights per call, so large
// tiles win and im2col of a large tile would not fit in cache). Residual GEMMs accumulate into
// the same tile; bias + ReLU + mask are applied in one pass. `workspace` must hold
// FusedSubBlockWorkspaceFloats(desc) floats and is not read before it is written. No allocation.
std::size_t FusedSubBlockWorkspaceFloats(const SubBlockDesc& desc);
void FusedSubBlockCpu(const SubBlockDesc& desc, const SubBlockWeights& weights, const float* x,
                      const BatchGeometry& geometry, const ResidualInput* residuals,
                      int num_residuals, float* workspace, float* y);

}  // namespace jasper::kernels

#endif  // JASPER_KERNELS_BLAS_SUB_BLOCK_H_

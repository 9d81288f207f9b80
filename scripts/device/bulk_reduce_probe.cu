// Session 24: the bulk reduce-add a fused dQ would need (FlashAttention-3's dQ accumulation), against the per-thread
// vector atomics Gluon can emit (scripts/device/fused_dq_probe.py atomics). Each block plays one dK/dV program of
// BN keys: for every 32-query sub-tile from its first key to S it adds one [D, 32] fp32 dQᵀ tile (16 KB, staged in
// shared memory) into dQacc, laid out tile-contiguous ([B·H, S/32, D, 32]) so that one
// `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32` moves a whole tile. Prints GB of additions, ms, TB/s.
// No Gluon primitive issues this non-tensor form in Triton 3.6, hence CUDA (the tensor form, a TMA reduce-add, is
// reachable through Gluon's builder: fused_dq_probe._reduce_add).
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o bulk_reduce_probe scripts/device/bulk_reduce_probe.cu
//   ./bulk_reduce_probe [S=8192] [BH=64]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

constexpr int D = 128, BM = 32, TILE_FLOATS = D * BM, TILE_BYTES = TILE_FLOATS * 4;

__global__ void __launch_bounds__(128) bulk_add_tiles(float *dq, int S, int BN) {
  extern __shared__ __align__(128) float tile[];
  int kb = blockIdx.x, bh = blockIdx.y;
  for (int i = threadIdx.x; i < TILE_FLOATS; i += blockDim.x) tile[i] = 1.0f;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores, seen by the bulk copy (async proxy)
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned src = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    for (int q0 = kb * BN; q0 < S; q0 += BM) {
      float *dst = dq + (static_cast<size_t>(bh) * (S / BM) + q0 / BM) * TILE_FLOATS;
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                   :: "l"(dst), "r"(src), "r"(TILE_BYTES) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // the tile stays; one reduce ahead
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}

int main(int argc, char **argv) {
  int S = argc > 1 ? atoi(argv[1]) : 8192, BH = argc > 2 ? atoi(argv[2]) : 64;
  float *dq;
  size_t n = static_cast<size_t>(BH) * S * D;
  cudaMalloc(&dq, n * 4);
  cudaMemset(dq, 0, n * 4);
  cudaFuncSetAttribute(bulk_add_tiles, cudaFuncAttributeMaxDynamicSharedMemorySize, TILE_BYTES);
  for (int BN : {128, 64}) {
    dim3 grid(S / BN, BH);
    bulk_add_tiles<<<grid, 128, TILE_BYTES>>>(dq, S, BN);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float ms[5];
    for (float &m : ms) {
      cudaEventRecord(a);
      bulk_add_tiles<<<grid, 128, TILE_BYTES>>>(dq, S, BN);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&m, a, b);
    }
    for (int i = 0; i < 5; ++i)  // median of five
      for (int j = i + 1; j < 5; ++j)
        if (ms[j] < ms[i]) { float t = ms[i]; ms[i] = ms[j]; ms[j] = t; }
    double bytes = 0;
    for (int kb = 0; kb < S / BN; ++kb) bytes += 4.0 * D * BH * (S - kb * BN);
    printf("bulk reduce bn=%3d: %6.2f GB in %7.3f ms = %6.2f TB/s\n", BN, bytes / 1e9, ms[2], bytes / ms[2] / 1e9);
  }
  cudaError_t err = cudaGetLastError();
  float first = 0;
  cudaMemcpy(&first, dq, 4, cudaMemcpyDeviceToHost);  // only key block 0 adds into query 0: once per call, 12 calls
  printf("dq[0] = %.0f, want 12 (%s)\n", first, cudaGetErrorString(err));
  cudaFree(dq);
  return err == cudaSuccess && first == 12.0f ? 0 : 1;
}

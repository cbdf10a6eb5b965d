__global__ void gemm(int ni, int nj, int nk, double alpha, double beta,
                     double *C, const double *A, const double *B) {
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < ni && j < nj) {
    double acc = 0.0; // variant b
    for (int k = 0; k < nk; ++k) acc += A[i * nk + k] * B[k * nj + j];
    C[i * nj + j] = beta * C[i * nj + j] + alpha * acc;
  }
}

/* DIN's small matrix products on CPU: n independent m×m by m×m float32 products, m = 16, 18
 * or 20 (DIN's dim 256, 324, 400), with the gathers and scatters of DIN's interaction layer
 * done inside the loop. Built on first use by models/kernels/native.py for AVX-512F and VL
 * with FMA (cc -O3 -mavx512f -mavx512vl -mfma); the Python side falls back to torch where it
 * cannot be built or the CPU lacks one of them. Register-blocked: each output row is one
 * 16-float zmm register plus one masked 4-float register for columns 16..m-1, and a block of
 * m/2 rows keeps its accumulators in registers while k runs over the inner dimension
 * (benchmarks/small_products.py times this scheme against torch.bmm: about 2× on AMD Zen 4).
 * All matrices row-major and contiguous; idx holds int64 row numbers, each checked against
 * the k matrices it indexes before anything is read or written: a function returns 0, or
 * r + 1 for the first row r whose idx is outside [0, k) (the caller raises). */
#include <immintrin.h>
#include <stdint.h>

/* C += op(A) · B for one m×m product (C = op(A) · B when zero); op(A) = A, or A^T when a_t.
 * Inlined with a constant m,
 * so the loops unroll and the accumulator arrays live in registers. */
static inline __attribute__((always_inline)) void product_add(const int M, const float *A,
                                                              const int a_t, const float *B,
                                                              float *C, const int zero) {
  const int H = M / 2;
  const __mmask8 tail = (__mmask8)((1u << (M - 16)) - 1u);
  for (int h = 0; h < 2; h++) {
    float *c = C + h * H * M;
    __m512 lo[10];
    __m128 hi[10];
    for (int i = 0; i < H; i++) {  /* C's rows, or zeros when C is only written */
      lo[i] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * M);
      if (M > 16) hi[i] = zero ? _mm_setzero_ps() : _mm_maskz_loadu_ps(tail, c + i * M + 16);
    }
    for (int k = 0; k < M; k++) {
      const __m512 b0 = _mm512_loadu_ps(B + k * M);
      const __m128 b1 = M > 16 ? _mm_maskz_loadu_ps(tail, B + k * M + 16) : _mm_setzero_ps();
      for (int i = 0; i < H; i++) {
        const int row = h * H + i;
        const __m512 s = _mm512_set1_ps(a_t ? A[k * M + row] : A[row * M + k]);
        lo[i] = _mm512_fmadd_ps(s, b0, lo[i]);
        if (M > 16) hi[i] = _mm_fmadd_ps(_mm512_castps512_ps128(s), b1, hi[i]);
      }
    }
    for (int i = 0; i < H; i++) {
      _mm512_storeu_ps(c + i * M, lo[i]);
      if (M > 16) _mm_mask_storeu_ps(c + i * M + 16, tail, hi[i]);
    }
  }
}

static inline __attribute__((always_inline)) void transpose(const int M, const float *B,
                                                            float *BT) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < M; j++) BT[j * M + i] = B[i * M + j];
}

/* C[r] += A[r] · B[idx[r]]^T (each B[idx[r]] transposed once per run of equal idx) */
#define GATHERED_T(M)                                                                     \
  {                                                                                       \
    float BT[M * M];                                                                      \
    int64_t last = -1;                                                                    \
    for (int64_t r = 0; r < n; r++) {                                                     \
      if (idx[r] != last) { transpose(M, B + idx[r] * M * M, BT); last = idx[r]; }        \
      product_add(M, A + r * M * M, 0, BT, C + r * M * M, 0);                             \
    }                                                                                     \
  }
/* G[idx[r]] += A[r]^T · D[r], in row order (rows sharing an idx add up) */
#define SCATTERED_T(M)                                                                   \
  for (int64_t r = 0; r < n; r++) product_add(M, A + r * M * M, 1, D + r * M * M,        \
                                              G + idx[r] * M * M, 0);

/* C[r] = A[r] · W, one W for every row */
#define FIXED(M)                                                                         \
  for (int64_t r = 0; r < n; r++) product_add(M, A + r * M * M, 0, W, C + r * M * M, 1);
/* C[r] = bias + S[r] · W + A[r] · B[idx[r]]: the interaction's pre-activation in one pass */
#define BIAS_PRODUCT_GATHERED(M)                                                          \
  for (int64_t r = 0; r < n; r++) {                                                      \
    float *c = C + r * M * M;                                                            \
    for (int j = 0; j < M * M; j++) c[j] = bias[j];                                      \
    product_add(M, S + r * M * M, 0, W, c, 0);                                           \
    product_add(M, A + r * M * M, 0, B + idx[r] * M * M, c, 0);                          \
  }

/* 0 when every idx[r] is in [0, k), else r + 1 for the first that is not */
static int64_t outside(int64_t n, const int64_t *idx, int64_t k) {
  for (int64_t r = 0; r < n; r++)
    if (idx[r] < 0 || idx[r] >= k) return r + 1;
  return 0;
}

int64_t fixed_product(int m, int64_t n, const float *A, const float *W, float *C) {
  if (m == 16) FIXED(16) else if (m == 18) FIXED(18) else if (m == 20) FIXED(20)
  return 0;
}
int64_t bias_product_gathered(int m, int64_t n, const float *bias, const float *S,
                              const float *W, const float *A, const float *B, int64_t k,
                              const int64_t *idx, float *C) {
  const int64_t bad = outside(n, idx, k);
  if (bad) return bad;
  if (m == 16) BIAS_PRODUCT_GATHERED(16) else if (m == 18) BIAS_PRODUCT_GATHERED(18)
  else if (m == 20) BIAS_PRODUCT_GATHERED(20)
  return 0;
}
int64_t gathered_product_t_add(int m, int64_t n, const float *A, const float *B, int64_t k,
                               const int64_t *idx, float *C) {
  const int64_t bad = outside(n, idx, k);
  if (bad) return bad;
  if (m == 16) GATHERED_T(16) else if (m == 18) GATHERED_T(18) else if (m == 20) GATHERED_T(20)
  return 0;
}
int64_t scattered_t_product_add(int m, int64_t n, const float *A, const float *D, int64_t k,
                                const int64_t *idx, float *G) {
  const int64_t bad = outside(n, idx, k);
  if (bad) return bad;
  if (m == 16) SCATTERED_T(16) else if (m == 18) SCATTERED_T(18)
  else if (m == 20) SCATTERED_T(20)
  return 0;
}

/* The elementwise part of one step of PyTorch's GRU cell (nn.GRU, gates in the order r, z, n),
 * forward and backward, in one pass over a step's rows: PyTorch runs it as about ten
 * operations a step, each a pass over memory. The matrix products stay in torch (MKL).
 * Built on first use by models/c_kernels.py (cc -O3 -march=native); models/gru_steps.py
 * falls back to torch where this cannot be built or the CPU has no AVX-512F. Rows are
 * contiguous: a step's gh and gi rows hold 3d floats [r | z | n], its other rows d or 2d. */
#include <stdint.h>

#ifndef __AVX512F__
int available(void) { return 0; }
void gru_forward_step(int64_t n, int64_t d, const float *gh, const float *gi, const float *h,
                      float *rz, float *nout, float *ghn, float *hout) {
  (void)n; (void)d; (void)gh; (void)gi; (void)h; (void)rz; (void)nout; (void)ghn; (void)hout; }
#else
#include <immintrin.h>

int available(void) { return 1; }

/* exp(x) in 16 float32 lanes: x = k·ln 2 + r with |r| <= ln(2)/2 (ln 2 in two parts, so r is
 * exact), e^r by Cephes' degree-7 polynomial (expf's), 2^k by scalef. Within about 1 ulp of
 * the exact value for |x| < 88; clamped outside, where a sigmoid is 0 or 1 anyway. */
static inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(88.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, k);
}

/* σ(x) = 1 / (1 + e^-x), as PyTorch's vectorised sigmoid computes it */
static inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* Forward, for n rows of width d: r, z = σ(gh_rz + gi_rz); n' = tanh(gi_n + r ⊙ gh_n) (as
 * 2σ(2x) − 1, the package's tanh); h' = (h − n') ⊙ z + n'. gh = W_hh h + b_hh and gi = W_ih x
 * + b_ih, (n, 3d) each; h (n, d), NULL for h_0 = 0. Writes [r | z] (n, 2d), n' and gh_n (the
 * backward's), and h' (n, d). */
void gru_forward_step(int64_t n, int64_t d, const float *gh, const float *gi, const float *h,
                      float *rz, float *nout, float *ghn, float *hout) {
  const __m512 two = _mm512_set1_ps(2.0f), minus_one = _mm512_set1_ps(-1.0f);
  for (int64_t i = 0; i < n; i++) {
    const float *gh_i = gh + i * 3 * d, *gi_i = gi + i * 3 * d, *h_i = h ? h + i * d : 0;
    float *rz_i = rz + i * 2 * d;
    for (int64_t j = 0; j < d; j += 16) {
      const __mmask16 lanes = d - j >= 16 ? 0xFFFF : (__mmask16)((1u << (d - j)) - 1u);
      const __m512 r = sigmoid16(_mm512_add_ps(_mm512_maskz_loadu_ps(lanes, gh_i + j),
                                               _mm512_maskz_loadu_ps(lanes, gi_i + j)));
      const __m512 z = sigmoid16(_mm512_add_ps(_mm512_maskz_loadu_ps(lanes, gh_i + d + j),
                                               _mm512_maskz_loadu_ps(lanes, gi_i + d + j)));
      const __m512 gh_n = _mm512_maskz_loadu_ps(lanes, gh_i + 2 * d + j);
      const __m512 pre = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, gi_i + 2 * d + j),
                                       _mm512_mul_ps(gh_n, r));
      const __m512 nn = _mm512_fmadd_ps(two, sigmoid16(_mm512_mul_ps(two, pre)), minus_one);
      const __m512 h_prev = h_i ? _mm512_maskz_loadu_ps(lanes, h_i + j) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(rz_i + j, lanes, r);
      _mm512_mask_storeu_ps(rz_i + d + j, lanes, z);
      _mm512_mask_storeu_ps(nout + i * d + j, lanes, nn);
      _mm512_mask_storeu_ps(ghn + i * d + j, lanes, gh_n);
      _mm512_mask_storeu_ps(hout + i * d + j, lanes,
                            _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(h_prev, nn), z), nn));
    }
  }
}
#endif

/* Backward (no AVX-512 needed: the compiler vectorises it), from g = dL/dh' (n, d) and the
 * forward's [r | z], n', gh_n and h (NULL for h_0 = 0): dL/dn's pre-activation = (g − g ⊙ z) ⊙
 * (1 − n'^2) into dn (n, d); dL/dgh = [dn ⊙ gh_n ⊙ σ' (r) | g ⊙ (h − n') ⊙ σ' (z) | dn ⊙ r] into
 * dgh (n, 3d); and g ⊙ z added to gprev (n, d), the state's gradient (NULL: not needed). */
void gru_backward_step(int64_t n, int64_t d, const float *g, const float *rz, const float *nn,
                       const float *ghn, const float *h, float *dgh, float *dn, float *gprev) {
  for (int64_t i = 0; i < n; i++) {
    const float *g_i = g + i * d, *r = rz + i * 2 * d, *z = r + d, *n_i = nn + i * d;
    const float *gh_n = ghn + i * d, *h_i = h ? h + i * d : 0;
    float *d_r = dgh + i * 3 * d, *d_z = d_r + d, *d_hn = d_r + 2 * d, *dn_i = dn + i * d;
    float *gp = gprev ? gprev + i * d : 0;
    for (int64_t j = 0; j < d; j++) {
      const float gz = g_i[j] * z[j], h_prev = h_i ? h_i[j] : 0.0f;
      const float d_pre = (g_i[j] - gz) * (1.0f - n_i[j] * n_i[j]);
      dn_i[j] = d_pre;
      d_hn[j] = d_pre * r[j];
      d_r[j] = (d_pre * gh_n[j]) * (1.0f - r[j]) * r[j];
      d_z[j] = (g_i[j] * (h_prev - n_i[j])) * (1.0f - z[j]) * z[j];
      if (gp) gp[j] += gz;
    }
  }
}

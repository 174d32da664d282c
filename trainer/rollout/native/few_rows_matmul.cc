// out[b, r, j] = sum_i x[b, r, i] * w[b, j, i] for a few rows r (a decode step's), as an XLA FFI custom call on CPU;
// b is any number of leading batch dimensions, or none (attention's scores: one query group against one head's
// cached keys per entry, the cache passed as it is kept, so XLA can update it in place).
//
// Why hand-written: on the 2-core machines rljob's CPU rollouts run on, XLA's dots (YNNPACK), torch's and
// OpenBLAS's all stream an 8-row product's weights at about half the speed XLA reads the same bytes
// (bench/decode_dot_bandwidth.py, bench/README.md). A decode step is those products, so it sat at 3x the bandwidth
// bound. Weights kept out-features first make each output one contiguous row; two rows at a time and a software
// prefetch a few KiB ahead keep enough loads in flight for the stream to come close to the read speed.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstddef>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kRowBlock = 8;          // rows per pass over the weights: 8 accumulators x 2 weight rows in registers
constexpr int kPrefetchFloats = 2048;  // 8 KiB ahead of each weight row being read

// Output columns [begin, end) of any shape on any CPU: the compiler's vectorisation of the plain loops.
void Generic(const float* x, const float* w, float* out, int64_t rows, int64_t n, int64_t k, int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; ++j) {
    const float* wr = w + j * k;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * k;
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += xr[i] * wr[i];
      out[r * n + j] = acc;
    }
  }
}

// Output columns [begin, end) (both even), rows in blocks of 8, two weight rows per step; k a multiple of 16.
__attribute__((target("avx512f"))) void Avx512(const float* x, const float* w, float* out, int64_t rows, int64_t n, int64_t k,
                                                int64_t begin, int64_t end) {
  for (int64_t j = begin; j < end; j += 2) {
    const float* w0 = w + j * k;
    const float* w1 = w0 + k;
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int64_t block = rows - r0 < kRowBlock ? rows - r0 : kRowBlock;
      const float* xb = x + r0 * k;
      __m512 a[kRowBlock], c[kRowBlock];
      for (int b = 0; b < kRowBlock; ++b) a[b] = c[b] = _mm512_setzero_ps();
      for (int64_t i = 0; i < k; i += 16) {
        if (r0 == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(w0 + i + kPrefetchFloats), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(w1 + i + kPrefetchFloats), _MM_HINT_T0);
        }
        const __m512 v0 = _mm512_loadu_ps(w0 + i);
        const __m512 v1 = _mm512_loadu_ps(w1 + i);
        for (int b = 0; b < block; ++b) {
          const __m512 xv = _mm512_loadu_ps(xb + b * k + i);
          a[b] = _mm512_fmadd_ps(xv, v0, a[b]);
          c[b] = _mm512_fmadd_ps(xv, v1, c[b]);
        }
      }
      for (int b = 0; b < block; ++b) {
        out[(r0 + b) * n + j] = _mm512_reduce_add_ps(a[b]);
        out[(r0 + b) * n + j + 1] = _mm512_reduce_add_ps(c[b]);
      }
    }
  }
}

// w laid out [k, n] (attention's values, [slot, dim]): out[r, j] = sum_i x[r, i] * w[i, j], any shape.
void GenericKn(const float* x, const float* w, float* out, int64_t rows, int64_t n, int64_t k, int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = begin; j < end; ++j) out[r * n + j] = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      const float xi = x[r * k + i];
      for (int64_t j = begin; j < end; ++j) out[r * n + j] += xi * w[i * n + j];
    }
  }
}

// The same for columns [begin, end) in tiles of 64 (n a multiple of 64), rows in blocks of 4: 16 accumulators, each
// row of w read once per block as it streams.
__attribute__((target("avx512f"))) void Avx512Kn(const float* x, const float* w, float* out, int64_t rows, int64_t n, int64_t k,
                                                  int64_t begin, int64_t end) {
  constexpr int kRows = 4;
  for (int64_t j = begin; j < end; j += 64) {
    for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const int64_t block = rows - r0 < kRows ? rows - r0 : kRows;
      __m512 a[kRows][4];
      for (int b = 0; b < kRows; ++b)
        for (int c = 0; c < 4; ++c) a[b][c] = _mm512_setzero_ps();
      for (int64_t i = 0; i < k; ++i) {
        const float* wi = w + i * n + j;
        const __m512 v0 = _mm512_loadu_ps(wi), v1 = _mm512_loadu_ps(wi + 16), v2 = _mm512_loadu_ps(wi + 32), v3 = _mm512_loadu_ps(wi + 48);
        for (int b = 0; b < block; ++b) {
          const __m512 xv = _mm512_set1_ps(x[(r0 + b) * k + i]);
          a[b][0] = _mm512_fmadd_ps(xv, v0, a[b][0]);
          a[b][1] = _mm512_fmadd_ps(xv, v1, a[b][1]);
          a[b][2] = _mm512_fmadd_ps(xv, v2, a[b][2]);
          a[b][3] = _mm512_fmadd_ps(xv, v3, a[b][3]);
        }
      }
      for (int b = 0; b < block; ++b)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + (r0 + b) * n + j + 16 * c, a[b][c]);
    }
  }
}

// The work is units of (batch entry, share of the columns), claimed from a shared counter by the calling thread and
// XLA's intra-op threads: a decode step's products take a fraction of a millisecond each, so the caller works too and
// spins for the rest rather than sleep. The caller finishes every unit no pool thread has claimed (a pool thread blocked
// in another such call cannot stall this one), and the counter is shared with the scheduled closures, which may run
// after this call returns.
struct Claims {
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

// kn: w is [batch..., k, n] rather than [batch..., n, k].
ffi::Error Run(ffi::ThreadPool& pool, const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, ffi::Result<ffi::AnyBuffer>& out, bool kn) {
  const auto xd = x.dimensions();
  const auto wd = w.dimensions();
  const size_t rank = xd.size();
  if (x.element_type() != ffi::F32 || w.element_type() != ffi::F32 || out->element_type() != ffi::F32) {
    return ffi::Error::InvalidArgument("few_rows_matmul: float32 operands expected");
  }
  bool same_batch = rank >= 2 && wd.size() == rank && xd[rank - 1] == wd[kn ? rank - 2 : rank - 1];
  int64_t batch = 1;
  for (size_t i = 0; same_batch && i + 2 < rank; ++i) {
    same_batch = xd[i] == wd[i];
    batch *= xd[i];
  }
  if (!same_batch) {
    return ffi::Error::InvalidArgument(kn ? "few_rows_matmul: x [batch..., rows, k] and w [batch..., k, n] expected"
                                          : "few_rows_matmul: x [batch..., rows, k] and w [batch..., n, k] expected");
  }
  const int64_t rows = xd[rank - 2], k = xd[rank - 1], n = wd[kn ? rank - 1 : rank - 2];
  const float* xp = x.typed_data<float>();
  const float* wp = w.typed_data<float>();
  float* op = out->typed_data<float>();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool wide = avx512 && (kn ? n % 64 == 0 : k % 16 == 0 && n % 2 == 0);
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  // Enough units for every thread, none narrower than 64 columns; a share that is a whole number of the wide kernel's
  // column steps (64 for kn, 2 otherwise), so each starts on one.
  const int64_t step = kn ? 64 : 2;
  const int64_t shares = std::max<int64_t>(1, std::min<int64_t>((threads + batch - 1) / batch, n / 64));
  const int64_t share = (n / shares + step - 1) / step * step;
  const int64_t units = batch * shares;
  auto claims = std::make_shared<Claims>();
  auto work = [=] {
    for (int64_t u; (u = claims->next.fetch_add(1, std::memory_order_relaxed)) < units;) {
      const int64_t b = u / shares, p = u % shares;
      const int64_t begin = std::min(n, p * share), end = p + 1 == shares ? n : std::min(n, (p + 1) * share);
      const float* xb = xp + b * rows * k;
      const float* wb = wp + b * n * k;
      float* ob = op + b * rows * n;
      if (kn) {
        (wide ? Avx512Kn : GenericKn)(xb, wb, ob, rows, n, k, begin, end);
      } else {
        (wide ? Avx512 : Generic)(xb, wb, ob, rows, n, k, begin, end);
      }
      claims->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < std::min(threads, units); ++t) pool.Schedule([work] { work(); });
  work();
  while (claims->done.load(std::memory_order_acquire) != units) _mm_pause();
  return ffi::Error::Success();
}

ffi::Error FewRowsMatmul(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out) {
  return Run(pool, x, w, out, false);
}

ffi::Error FewRowsMatmulKn(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> out) {
  return Run(pool, x, w, out, true);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RljobFewRowsMatmul, FewRowsMatmul,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RljobFewRowsMatmulKn, FewRowsMatmulKn,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>());

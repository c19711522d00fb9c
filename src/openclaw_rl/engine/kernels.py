"""CPU kernels for the fused decoder's decode step: compiled once, cached, optional.

Why: a decode step of B <= 16 rows multiplies a few vectors by every weight matrix, so
it is bound by how fast the weights stream from memory. MKL's sgemm/sgemv reach about
11-12 GB/s on two cores here (one core's worth), llama.cpp's kernels about 20 GB/s on the
same weights. `gemv` reads each weight row once for all rows of the batch (AVX2 + FMA,
eight rows of x per pass, the row in L1; beyond eight, the weights in chunks that stay in
L2 while each block of x passes), split across torch's own intra-op threads
(at::parallel_for), so no second OpenMP pool competes with torch's. The attention's
softmax takes its exponentials eight at a time (a polynomial, within 2 ulp of expf).
`lora_add` adds each row's own personal adapter's delta (engine/adapters.py) in one call
per projection, reading every adapter where it lies.

`available()` compiles the extension with torch.utils.cpp_extension on first use
(~1 min, g++ and ninja) into the cache dir and says whether it can be used: only on
x86-64 CPUs with AVX2 and FMA, and never when OPENCLAW_KERNELS=0. Without it the
decoder multiplies with torch (the same result to float rounding, slower).

(Over 400 lines: the C++ source is one string, compiled as one module, so it stays one file.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import platform
import threading

import ninja
import torch
from torch.utils.cpp_extension import load_inline

from openclaw_rl.engine.loading import cache_dir

log = logging.getLogger(__name__)

MAX_ROWS = 16  # larger batches (and prefill) multiply with torch: there the weights are reused enough

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

static inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

// y[j, n] = sum_k x[j, k] * w[n, k] for one row n of w and NB rows of x, NB independent
// accumulators. One row of w at a time: tiles of 2-8 rows (more accumulators, x shared
// between them) measured 1.3-2x slower here at every batch size (docs/experiments.md).
template <int NB>
static inline void dot_rows(const float* w, const float* x, int64_t K, float* y, int64_t N) {
  __m256 acc[NB];
  for (int j = 0; j < NB; ++j) acc[j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if constexpr (NB <= 4) {  // x into registers first, then the row of w (measured faster at four)
      __m256 xv[NB];
      for (int j = 0; j < NB; ++j) xv[j] = _mm256_loadu_ps(x + j * K + k);
      const __m256 wv = _mm256_loadu_ps(w + k);
      for (int j = 0; j < NB; ++j) acc[j] = _mm256_fmadd_ps(wv, xv[j], acc[j]);
    } else {  // x from L1, and the next row of w fetched meanwhile (1.5x at eight; at four or fewer it only costs)
      _mm_prefetch((const char*)(w + K + k), _MM_HINT_T0);
      const __m256 wv = _mm256_loadu_ps(w + k);
      for (int j = 0; j < NB; ++j) acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + j * K + k), acc[j]);
    }
  }
  for (int j = 0; j < NB; ++j) {
    float s = hsum(acc[j]);
    for (int64_t t = k; t < K; ++t) s += w[t] * x[j * K + t];
    y[j * N] = s;
  }
}

template <int NB>
static void rows(const float* w, const float* x, int64_t K, float* y, int64_t N, int64_t begin, int64_t end) {
  for (int64_t n = begin; n < end; ++n) dot_rows<NB>(w + n * K, x, K, y + n, N);
}

torch::Tensor gemv(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "gemv: x (B, K) and w (N, K)");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "gemv: float32 only");
  x = x.contiguous();
  TORCH_CHECK(w.is_contiguous(), "gemv: w must be contiguous");
  const int64_t B = x.size(0), K = x.size(1), N = w.size(0);
  auto y = torch::empty({B, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Rows of w in chunks small enough to stay in L2 while every block of 8 rows of x passes
  // over them: w streams from memory once per step however many rows x has.
  const int64_t chunk = std::max<int64_t>(8, (int64_t)(64 * 1024 / (4 * K)) / 8 * 8);
  at::parallel_for(0, N, 32, [&](int64_t begin, int64_t end) {
    for (int64_t c0 = begin; c0 < end; c0 += chunk) {
      const int64_t c1 = std::min(end, c0 + chunk);
      for (int64_t b0 = 0; b0 < B; b0 += 8) {
        const float* xb = xp + b0 * K;
        float* yb = yp + b0 * N;
        switch ((int)std::min<int64_t>(8, B - b0)) {
          case 1: rows<1>(wp, xb, K, yb, N, c0, c1); break;
          case 2: rows<2>(wp, xb, K, yb, N, c0, c1); break;
          case 3: rows<3>(wp, xb, K, yb, N, c0, c1); break;
          case 4: rows<4>(wp, xb, K, yb, N, c0, c1); break;
          case 5: rows<5>(wp, xb, K, yb, N, c0, c1); break;
          case 6: rows<6>(wp, xb, K, yb, N, c0, c1); break;
          case 7: rows<7>(wp, xb, K, yb, N, c0, c1); break;
          default: rows<8>(wp, xb, K, yb, N, c0, c1); break;
        }
      }
    }
  });
  return y;
}

// z[i] = a_i . x for the n rows a_i of a (each of length K): dot_rows with its operands' roles
// swapped (the one vector x against eight rows of a at a time, eight independent accumulators).
static inline void dots(const float* a, const float* x, int64_t K, int64_t n, float* z) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) dot_rows<8>(x, a + i * K, K, z + i, 1);
  switch ((int)(n - i)) {
    case 1: dot_rows<1>(x, a + i * K, K, z + i, 1); break;
    case 2: dot_rows<2>(x, a + i * K, K, z + i, 1); break;
    case 3: dot_rows<3>(x, a + i * K, K, z + i, 1); break;
    case 4: dot_rows<4>(x, a + i * K, K, z + i, 1); break;
    case 5: dot_rows<5>(x, a + i * K, K, z + i, 1); break;
    case 6: dot_rows<6>(x, a + i * K, K, z + i, 1); break;
    case 7: dot_rows<7>(x, a + i * K, K, z + i, 1); break;
    default: break;
  }
}

// Each row's own LoRA delta, added to y (B, N) in place (engine/adapters.py). Row j uses
// adapter u = rows[j] of the lists a (u: (r_u, K)) and bt (u: (r_u, N), bt = (scale * B)^T):
//   y_j += bt_u^T (a_u x_j)
// A row with u = -1 (no adapter) is not touched, so it stays the base model's bit for bit. Each row
// multiplies its own adapter only, read where it lies (nothing is stacked or copied when rows join),
// and rows that share an adapter find it in cache: each distinct adapter streams once per step.
torch::Tensor lora_add(torch::Tensor y, torch::Tensor x, std::vector<torch::Tensor> a, std::vector<torch::Tensor> bt,
                       torch::Tensor rows) {
  TORCH_CHECK(y.dim() == 2 && x.dim() == 2 && rows.dim() == 1 && a.size() == bt.size(),
              "lora_add: y (B, N), x (B, K), as many a as bt, rows (B,)");
  TORCH_CHECK(y.scalar_type() == at::kFloat && x.scalar_type() == at::kFloat && rows.scalar_type() == at::kLong &&
              y.is_contiguous() && rows.is_contiguous(), "lora_add: contiguous float32 y, int64 rows");
  x = x.contiguous();
  const int64_t B = x.size(0), K = x.size(1), N = y.size(1), U = (int64_t)a.size();
  TORCH_CHECK(y.size(0) == B && rows.size(0) == B, "lora_add: y, x and rows disagree on the rows");
  std::vector<const float*> ap(U), bp(U);
  std::vector<int64_t> rank(U);
  int64_t rmax = 0;
  for (int64_t u = 0; u < U; ++u) {
    TORCH_CHECK(a[u].scalar_type() == at::kFloat && bt[u].scalar_type() == at::kFloat && a[u].is_contiguous() &&
                bt[u].is_contiguous() && a[u].dim() == 2 && bt[u].dim() == 2 && a[u].size(1) == K &&
                bt[u].size(1) == N && a[u].size(0) == bt[u].size(0), "lora_add: adapter ", u, " is not (r, K), (r, N)");
    ap[u] = a[u].data_ptr<float>();
    bp[u] = bt[u].data_ptr<float>();
    rank[u] = a[u].size(0);
    rmax = std::max(rmax, rank[u]);
  }
  const int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t j = 0; j < B; ++j) TORCH_CHECK(-1 <= rp[j] && rp[j] < U, "lora_add: row ", j, " names no adapter");
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  std::vector<float> z(B * rmax);  // row j's r values at z[j * rmax ..]
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j)
      if (rp[j] >= 0) dots(ap[rp[j]], xp + j * K, K, rank[rp[j]], z.data() + j * rmax);
  });
  constexpr int64_t CHUNK = 256;  // columns of y per pass: the chunk of bt a row reads stays in L1 for the next row
  at::parallel_for(0, N, CHUNK, [&](int64_t begin, int64_t end) {
    alignas(32) float delta[CHUNK];
    for (int64_t n0 = begin; n0 < end; n0 += CHUNK) {
      const int64_t len = std::min(CHUNK, end - n0);
      for (int64_t j = 0; j < B; ++j) {
        const int64_t u = rp[j];
        if (u < 0 || rank[u] == 0) continue;
        for (int64_t n = 0; n < len; ++n) delta[n] = 0.f;
        for (int64_t r = 0; r < rank[u]; ++r) {
          const float zr = z[j * rmax + r];
          const __m256 zv = _mm256_set1_ps(zr);
          const float* row = bp[u] + r * N + n0;
          int64_t n = 0;
          for (; n + 8 <= len; n += 8)
            _mm256_store_ps(delta + n, _mm256_fmadd_ps(zv, _mm256_loadu_ps(row + n), _mm256_load_ps(delta + n)));
          for (; n < len; ++n) delta[n] += zr * row[n];
        }
        float* yj = yp + j * N + n0;
        for (int64_t n = 0; n < len; ++n) yj[n] += delta[n];
      }
    }
  });
  return y;
}

// out[b] = x[b] * rsqrt(mean(x[b]^2) + eps) * w, for rows of x (B, H); with r: x += r first (in place).
static void norm_rows(float* x, const float* r, const float* w, float eps, float* out, int64_t B, int64_t H) {
  for (int64_t b = 0; b < B; ++b) {
    float* xr = x + b * H;
    if (r) for (int64_t i = 0; i < H; ++i) xr[i] += r[b * H + i];
    float ss = 0.f;
    for (int64_t i = 0; i < H; ++i) ss += xr[i] * xr[i];
    const float inv = 1.f / std::sqrt(ss / H + eps);
    for (int64_t i = 0; i < H; ++i) out[b * H + i] = w[i] * (xr[i] * inv);
  }
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor w, double eps) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat, "rms_norm: contiguous float32 x");
  auto out = torch::empty_like(x);
  const int64_t H = x.size(-1);
  norm_rows(x.data_ptr<float>(), nullptr, w.data_ptr<float>(), (float)eps, out.data_ptr<float>(), x.numel() / H, H);
  return out;
}

// x += r in place, then the norm of x.
torch::Tensor add_rms_norm(torch::Tensor x, torch::Tensor r, torch::Tensor w, double eps) {
  TORCH_CHECK(x.is_contiguous() && r.is_contiguous() && x.sizes() == r.sizes(), "add_rms_norm: same-shape contiguous");
  auto out = torch::empty_like(x);
  const int64_t H = x.size(-1);
  norm_rows(x.data_ptr<float>(), r.data_ptr<float>(), w.data_ptr<float>(), (float)eps, out.data_ptr<float>(),
            x.numel() / H, H);
  return out;
}

torch::Tensor silu_mul(torch::Tensor g, torch::Tensor u) {
  TORCH_CHECK(g.is_contiguous() && u.is_contiguous() && g.sizes() == u.sizes(), "silu_mul: same-shape contiguous");
  auto out = torch::empty_like(g);
  const float* gp = g.data_ptr<float>();
  const float* up = u.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t n = g.numel();
  for (int64_t i = 0; i < n; ++i) op[i] = gp[i] / (1.f + std::exp(-gp[i])) * up[i];
  return out;
}

// x[i] = exp(x[i] - shift) for i < n, eight at a time (Cephes' expf: 2^k times a degree-5
// polynomial on [-ln2/2, ln2/2], within 2 ulp); returns the sum. The inputs are <= 0 here.
static inline float exp_shifted(float* x, int64_t n, float shift) {
  const __m256 lo = _mm256_set1_ps(-87.3f), log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 c1 = _mm256_set1_ps(0.693359375f), c2 = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 p0 = _mm256_set1_ps(1.9875691500e-4f), p1 = _mm256_set1_ps(1.3981999507e-3f),
               p2 = _mm256_set1_ps(8.3334519073e-3f), p3 = _mm256_set1_ps(4.1665795894e-2f),
               p4 = _mm256_set1_ps(1.6666665459e-1f), p5 = _mm256_set1_ps(5.0000001201e-1f);
  const __m256 one = _mm256_set1_ps(1.f), sh = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_max_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh), lo);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(v, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(v, _mm256_mul_ps(k, c1)), _mm256_mul_ps(k, c2));
    __m256 y = _mm256_fmadd_ps(p0, r, p1);
    y = _mm256_fmadd_ps(y, r, p2);
    y = _mm256_fmadd_ps(y, r, p3);
    y = _mm256_fmadd_ps(y, r, p4);
    y = _mm256_fmadd_ps(y, r, p5);
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    _mm256_storeu_ps(x + i, y);
    sum = _mm256_add_ps(sum, y);
  }
  float total = hsum(sum);
  for (; i < n; ++i) { x[i] = std::exp(x[i] - shift); total += x[i]; }
  return total;
}

// One decode step of attention for B rows, each at its own position p_b:
// rotate q (B, Hq*D) and k (B, Hk*D) with the rotary tables (P, D) at p_b (transformers'
// rotate_half convention), write k and v (B, Hk*D) into the layer's cache (R, Hk, S, D) at
// p_b, attend each query head to its key head's positions 0..p_b. Returns (B, Hq*D).
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor cos,
                               torch::Tensor sin, torch::Tensor keys, torch::Tensor values,
                               torch::Tensor positions, double scale) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "decode_attention: contiguous q, k, v");
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous() && cos.is_contiguous() && sin.is_contiguous(),
              "decode_attention: contiguous cache and tables");
  const int64_t B = q.size(0), Hk = keys.size(1), S = keys.size(2), D = keys.size(3);
  const int64_t Hq = q.size(1) / D, G = Hq / Hk, half = D / 2;
  auto out = torch::empty_like(q);
  const int64_t* pos = positions.data_ptr<int64_t>();
  float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* K = keys.data_ptr<float>();
  float* V = values.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float sc = (float)scale;
  at::parallel_for(0, B * Hk, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, qr(D);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / Hk, h = task % Hk, p = pos[b];
      TORCH_CHECK(p >= 0 && p < S, "decode_attention: position outside the cache");
      const float* c = cp + p * D;
      const float* s = sp + p * D;
      float* kd = K + ((b * Hk + h) * S + p) * D;
      float* vd = V + ((b * Hk + h) * S + p) * D;
      const float* ks = kp + (b * Hk + h) * D;
      for (int64_t d = 0; d < D; ++d) {
        const float rot = d < half ? -ks[d + half] : ks[d - half];
        kd[d] = ks[d] * c[d] + rot * s[d];
        vd[d] = vp[(b * Hk + h) * D + d];
      }
      const float* Kh = K + (b * Hk + h) * S * D;
      const float* Vh = V + (b * Hk + h) * S * D;
      scores.resize(p + 1);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t hq = h * G + g;
        const float* qs = qp + (b * Hq + hq) * D;
        for (int64_t d = 0; d < D; ++d) {
          const float rot = d < half ? -qs[d + half] : qs[d - half];
          qr[d] = qs[d] * c[d] + rot * s[d];
        }
        float best = -INFINITY;
        for (int64_t t = 0; t <= p; ++t) {
          const float* kt = Kh + t * D;
          float acc = 0.f;
#pragma omp simd reduction(+ : acc)
          for (int64_t d = 0; d < D; ++d) acc += qr[d] * kt[d];
          scores[t] = acc * sc;
          best = std::max(best, scores[t]);
        }
        const float total = exp_shifted(scores.data(), p + 1, best);
        float* o = op + (b * Hq + hq) * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
        for (int64_t t = 0; t <= p; ++t) {
          const float wgt = scores[t] / total;
          const float* vt = Vh + t * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) o[d] += wgt * vt[d];
        }
      }
    }
  });
  return out;
}

// Bound by hand, each call without the GIL (as torch's own ops are): the bindings load_inline
// generates would hold it through every kernel, and a training thread beside the decoder would
// then wait out each decode step before its next Python line.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  auto no_gil = py::call_guard<py::gil_scoped_release>();
  m.def("gemv", &gemv, no_gil);
  m.def("rms_norm", &rms_norm, no_gil);
  m.def("add_rms_norm", &add_rms_norm, no_gil);
  m.def("silu_mul", &silu_mul, no_gil);
  m.def("decode_attention", &decode_attention, no_gil);
  m.def("lora_add", &lora_add, no_gil);
}
"""

# -fopenmp for at::parallel_for's pragmas only: nothing links a second OpenMP runtime, so the
# kernels run on the libgomp torch already loaded, in torch's own thread pool.
_FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]
_lock = threading.Lock()
_module = None
_tried = False


def available() -> bool:
    """Whether the compiled kernels can be used here (compiling them on first call)."""
    global _module, _tried
    with _lock:
        if _tried:
            return _module is not None
        _tried = True
        reason = _unsupported()
        if reason:
            log.info("decode kernels off: %s; multiplying with torch", reason)
            return False
        try:
            _module = _build()
        except Exception as error:  # no compiler, no ninja, a failed build: torch's kernels still work
            log.warning("decode kernels could not be built (%s); multiplying with torch (slower)",
                        str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__)
        return _module is not None


def _unsupported() -> str | None:
    if os.environ.get("OPENCLAW_KERNELS", "1") == "0":
        return "OPENCLAW_KERNELS=0"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"not an x86-64 CPU ({platform.machine()})"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return f"the CPU lacks AVX2 (torch reports {torch.backends.cpu.get_cpu_capability()})"
    return None


def _build():
    # torch runs `ninja` from PATH: the one the ninja package installed beside us counts
    if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")

    key = hashlib.sha256("\n".join([_SOURCE, torch.__version__, *_FLAGS]).encode()).hexdigest()[:12]
    build_dir = cache_dir() / "kernels" / key
    build_dir.mkdir(parents=True, exist_ok=True)
    if not any(build_dir.glob("*.so")):
        log.info("compiling the decode kernels once (about a minute) into %s", build_dir)
    with build_lock(build_dir):
        return load_inline(name=f"openclaw_decode_{key}", cpp_sources=_SOURCE, extra_cflags=_FLAGS,
                           build_directory=str(build_dir), verbose=False)


@contextlib.contextmanager
def build_lock(build_dir):
    """Hold the build directory against other processes; clear a baton a killed build left.

    torch's builder marks a build with a `lock` file it deletes when done, and every later
    process waits for that file to go, forever if its builder was killed. Builders here
    first take an flock on `openclaw.lock`, which the kernel releases when its holder dies,
    so a `lock` file found while holding it is a dead build's and is removed."""
    with open(build_dir / "openclaw.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            baton = build_dir / "lock"
            if baton.exists():
                log.warning("removing %s, left by a kernel build that did not finish", baton)
                baton.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def ops():
    """The compiled module (gemv, rms_norm, add_rms_norm, silu_mul, decode_attention, lora_add); needs available()."""
    return _module

// edgespec::attention.out — attention over a static KV cache whose per-row arithmetic does
// not depend on how many rows a call carries.
//
// A query row's output is computed from the sequence of keys it may see (ascending slots)
// and from nothing else: its scores, their max, the exponentials, the softmax denominator
// and the weighted sum of values are each reduced in an order fixed by a key's place in that
// sequence. Rows share loads (a block of rows reads each key and value once), never
// arithmetic. The library is compiled without floating-point contraction, so every
// expression rounds as written whichever loop (vectorized or not) computes it. Hence a row
// verified among R rows of a speculative step, chain or tree, gives the bits the same token
// decoded alone gives, provided its keys and values are the same bits, which holds by
// induction over layers when the linear layers are per-row (XNNPACK's GEMMs are).
// ExecuTorch's llama::custom_sdpa does not have this property: its BLAS GEMM picks kernels
// by row count and its softmax sums in lanes over a length that includes the other rows.
//
// Contract (the op schema is in edgespec/kernels/ops.py):
//   q [1, T, H, D] fp32, k_cache / v_cache [1, S, Hkv, D] (both fp32 or both fp16: a half
//   cache, `quant.kv_cache: fp16`, each element widened to fp32 as it is read, exactly),
//   contiguous, start_pos;
//   mask None: row t sees keys [0, start_pos + t]  (causal);
//   mask [T, N] additive fp32: row t sees key j < N unless mask[t, j] is -inf, and
//   mask[t, j] is added to that key's score.  out [1, T, H, D].
// Query head h reads key/value head h / (H / Hkv) (grouped-query attention).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "op_api.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "block_linear/contract.h"  // half_to_float
#include "threadpool.h"
#include "vec8.h"

namespace edgespec {
namespace {

using namespace edgespec::vec;
constexpr int kRowBlock = 16;  // query rows that share key/value loads
constexpr int kKeyChunk = 64;  // keys whose K (V) rows stay in L1 while a row block uses them

// 16 elements of a cache row as fp32: an fp16 cache's widened exactly (what eager code's
// .float() gives), so a half cache changes what is stored, not how it is summed.
// The widening is the ISA's conversion instruction (F16C / AVX-512, NEON's fcvtl), else
// contract.h's scalar one (GCC 12 scalarizes a vector _Float16 conversion, and its aarch64 C++
// has no _Float16: elements are held as their bits); every one is exact.
inline v16f load_row16(const float* p) { return load16(p); }
inline v16f load_row16(const uint16_t* p) {  // IEEE binary16 bits (an fp16 cache's elements)
  v16f out;
#if defined(__AVX512F__)
  const __m512 w = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&out, &w, sizeof out);
#elif defined(__F16C__)
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  std::memcpy(&out, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
#elif defined(__aarch64__)
  for (int i = 0; i < 4; ++i) {
    const float32x4_t w = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
    std::memcpy(reinterpret_cast<char*>(&out) + 16 * i, &w, 16);
  }
#else
  for (int i = 0; i < 16; ++i) out[i] = blocks::half_to_float(p[i]);
#endif
  return out;
}

// Dot products of q with K key rows (D = 16 * D16): K independent chains that overlap in the
// pipeline, each reduced exactly as a single one would be: element d in lane d % 16, the
// lanes folded to 8 (fold16) and summed by lane_total's tree. C: the cache's element type.
template <int D16, int K, typename C>
inline void dots(const float* q, const C* const* k, float* out) {
  v16f acc[K];
  for (int j = 0; j < K; ++j) acc[j] = splat16(0.f);
  for (int i = 0; i < D16; ++i) {
    const v16f qi = load16(q + 16 * i);
    for (int j = 0; j < K; ++j) acc[j] = acc[j] + qi * load_row16(k[j] + 16 * i);
  }
  if constexpr (K == 4) lane_totals4(fold16(acc[0]), fold16(acc[1]), fold16(acc[2]), fold16(acc[3]), out);
  else
    for (int j = 0; j < K; ++j) out[j] = lane_total(fold16(acc[j]));
}

// `dots` for G rows at once over the same K keys: each key row is loaded once for the G
// rows, and the G * K chains are independent (more of them in flight than one row's K). Each
// (row, key) chain is `dots`' own, operation for operation: the same bits.
template <int D16, int K, int G, typename C>
inline void dots_rows(const float* const* q, const C* const* k, float* const* out) {
  v16f acc[G][K];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < K; ++j) acc[g][j] = splat16(0.f);
  for (int i = 0; i < D16; ++i) {
    v16f kj[K];
    for (int j = 0; j < K; ++j) kj[j] = load_row16(k[j] + 16 * i);
    for (int g = 0; g < G; ++g) {
      const v16f qi = load16(q[g] + 16 * i);
      for (int j = 0; j < K; ++j) acc[g][j] = acc[g][j] + qi * kj[j];
    }
  }
  for (int g = 0; g < G; ++g) {
    if constexpr (K == 4) lane_totals4(fold16(acc[g][0]), fold16(acc[g][1]), fold16(acc[g][2]), fold16(acc[g][3]), out[g]);
    else
      for (int j = 0; j < K; ++j) out[g][j] = lane_total(fold16(acc[g][j]));
  }
}

// Rows interleaved by the score and value loops: as many as keep their accumulators in
// registers (AVX-512's 32 vector registers; elsewhere one row at a time). Rows interleave
// only where they read the same key list, over the part of it they all see.
template <int D16>
constexpr int interleaved_rows() {
#if defined(__AVX512F__)
  return D16 <= 4 ? 4 : D16 <= 8 ? 2 : 1;
#else
  return 1;
#endif
}

struct Rows {
  int64_t n;                       // rows in the block
  const float* q[kRowBlock];       // the row's query vector (D floats)
  float* out[kRowBlock];           // where its output goes
  const int32_t* keys[kRowBlock];  // the row's visible key slots, ascending
  int64_t n_keys[kRowBlock];
  const float* mask[kRowBlock];  // the row's additive mask over slots, or null
};

// Rows r .. r + G - 1 read the same key list and stand at the same place in it (`at`): the
// shortest one's key count, the part they all see; -1 when they cannot go together.
template <int G>
inline int64_t shared_keys(const Rows& rows, const int64_t* at, int64_t r) {
  if (r + G > rows.n) return -1;
  int64_t n_min = rows.n_keys[r];
  for (int g = 1; g < G; ++g) {
    if (rows.keys[r + g] != rows.keys[r] || at[r + g] != at[r]) return -1;
    n_min = std::min(n_min, rows.n_keys[r + g]);
  }
  return n_min;
}

// One key/value head, a block of query rows reading it (each row a token row and query head):
// out_r = softmax(q_r . K^T * scale + mask_r) V over row r's keys.
// w: scratch, [rows][w_stride] with w_stride >= the longest key list rounded up to 8.
// D = 16 * D16.
template <int D16, typename C>
void attend_rows(const Rows& rows, const C* k, const C* v, int64_t row_stride, float scale, float* w, int64_t w_stride) {
  int64_t slot_end = 0;
  for (int64_t r = 0; r < rows.n; ++r)
    if (rows.n_keys[r] > 0) slot_end = std::max<int64_t>(slot_end, rows.keys[r][rows.n_keys[r] - 1] + 1);
  // scores, a chunk of key slots at a time for every row of the block
  constexpr int G = interleaved_rows<D16>();
  int64_t at[kRowBlock] = {};
  for (int64_t c1 = kKeyChunk; c1 - kKeyChunk < slot_end; c1 += kKeyChunk) {
    for (int64_t r = 0; r < rows.n;) {
      const int32_t* keys = rows.keys[r];
      // a group of G rows on the same key list, at the same place: 4 keys at a time for all,
      // up to the shortest row's end within this chunk
      int64_t i = at[r];
      if constexpr (G > 1) {
        const int64_t n_min = shared_keys<G>(rows, at, r);
        if (n_min >= 0) {
          const float* qg[G];
          float* og[G];
          for (; i + 4 <= n_min && keys[i + 3] < c1; i += 4) {
            const C* kb[4] = {k + keys[i] * row_stride, k + keys[i + 1] * row_stride, k + keys[i + 2] * row_stride, k + keys[i + 3] * row_stride};
            for (int g = 0; g < G; ++g) {
              qg[g] = rows.q[r + g];
              og[g] = w + (r + g) * w_stride + i;
            }
            dots_rows<D16, 4, G>(qg, kb, og);
          }
          for (int g = 1; g < G; ++g) at[r + g] = i;  // each row finishes the chunk alone
        }
      }
      for (int g = 0; g < std::max(1, G) && r < rows.n; ++g, ++r) {
        const int64_t n = rows.n_keys[r];
        const float* q = rows.q[r];
        float* wr = w + r * w_stride;
        const int32_t* kr = rows.keys[r];
        int64_t j = g == 0 ? i : at[r];
        for (; j + 4 <= n && kr[j + 3] < c1; j += 4) {
          const C* kb[4] = {k + kr[j] * row_stride, k + kr[j + 1] * row_stride, k + kr[j + 2] * row_stride, k + kr[j + 3] * row_stride};
          dots<D16, 4>(q, kb, wr + j);
        }
        for (; j < n && kr[j] < c1; ++j) {
          const C* kb[1] = {k + kr[j] * row_stride};
          dots<D16, 1>(q, kb, wr + j);
        }
        at[r] = j;
      }
    }
  }
  // softmax weights per row (unnormalized) and the inverse of their sum
  float inv_denom[kRowBlock];
  for (int64_t r = 0; r < rows.n; ++r) {
    const int64_t n = rows.n_keys[r];
    float* wr = w + r * w_stride;
    float m = -std::numeric_limits<float>::infinity();
    int64_t i = 0;
    if (rows.mask[r] == nullptr) {  // 8 scores at a time (the max is exact in any order)
      v8f mv = splat(m);
      for (; i + kLanes <= n; i += kLanes) {
        const v8f s = load8(wr + i) * splat(scale);
        store8(wr + i, s);
        mv = s > mv ? s : mv;
      }
      for (int j = 0; j < kLanes; ++j) m = mv[j] > m ? mv[j] : m;
    }
    for (; i < n; ++i) {
      float s = wr[i] * scale;
      if (rows.mask[r] != nullptr) s = s + rows.mask[r][rows.keys[r][i]];
      wr[i] = s;
      m = s > m ? s : m;
    }
    v8f lanes = splat(0.f);
    i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      const v8f e = exp_nonpositive(load8(wr + i) - splat(m));
      store8(wr + i, e);
      lanes = lanes + e;
    }
    if (i < n) {  // the tail through the same lanes: element i still in lane i % 8
      float tail[kLanes] = {};
      for (int64_t j = i; j < n; ++j) tail[j - i] = wr[j];
      const v8f e = exp_nonpositive(load8(tail) - splat(m));
      for (int64_t j = i; j < n; ++j) {
        wr[j] = e[j - i];
        lanes[j - i] = lanes[j - i] + e[j - i];
      }
    }
    inv_denom[r] = n > 0 ? 1.0f / lane_total(lanes) : 0.0f;
  }
  // weighted values: out_r[d] accumulates over row r's keys in order
  v16f acc[kRowBlock][D16];
  for (int64_t r = 0; r < rows.n; ++r) {
    for (int d = 0; d < D16; ++d) acc[r][d] = splat16(0.f);
    at[r] = 0;
  }
  for (int64_t c1 = kKeyChunk; c1 - kKeyChunk < slot_end; c1 += kKeyChunk) {
    for (int64_t r = 0; r < rows.n;) {
      const int32_t* keys = rows.keys[r];
      int64_t i = at[r];
      if constexpr (G > 1) {  // G rows on the same key list: each value row loaded once for all
        const int64_t n_min = shared_keys<G>(rows, at, r);
        if (n_min >= 0) {
          v16f o[G][D16];
          for (int g = 0; g < G; ++g)
            for (int d = 0; d < D16; ++d) o[g][d] = acc[r + g][d];
          for (; i < n_min && keys[i] < c1; ++i) {
            const C* vi = v + keys[i] * row_stride;
            v16f vd[D16];
            for (int d = 0; d < D16; ++d) vd[d] = load_row16(vi + 16 * d);
            for (int g = 0; g < G; ++g) {
              const v16f wi = splat16(w[(r + g) * w_stride + i]);
              for (int d = 0; d < D16; ++d) o[g][d] = o[g][d] + wi * vd[d];
            }
          }
          for (int g = 0; g < G; ++g) {
            for (int d = 0; d < D16; ++d) acc[r + g][d] = o[g][d];
            at[r + g] = i;  // each row finishes the chunk alone
          }
        }
      }
      for (int g = 0; g < std::max(1, G) && r < rows.n; ++g, ++r) {
        const int32_t* kr = rows.keys[r];
        const float* wr = w + r * w_stride;
        v16f o[D16];
        for (int d = 0; d < D16; ++d) o[d] = acc[r][d];
        int64_t j = at[r];
        for (; j < rows.n_keys[r] && kr[j] < c1; ++j) {
          const C* vj = v + kr[j] * row_stride;
          const v16f wj = splat16(wr[j]);
          for (int d = 0; d < D16; ++d) o[d] = o[d] + wj * load_row16(vj + 16 * d);
        }
        at[r] = j;
        for (int d = 0; d < D16; ++d) acc[r][d] = o[d];
      }
    }
  }
  for (int64_t r = 0; r < rows.n; ++r) {
    float* out = rows.out[r];
    for (int d = 0; d < D16; ++d) store16(out + 16 * d, acc[r][d] * splat16(inv_denom[r]));
  }
}

template <typename C>
using AttendRows = void (*)(const Rows&, const C*, const C*, int64_t, float, float*, int64_t);

template <typename C>
AttendRows<C> attend_rows_for(int64_t D) {
  switch (D) {
    case 16: return attend_rows<1, C>;
    case 32: return attend_rows<2, C>;
    case 48: return attend_rows<3, C>;
    case 64: return attend_rows<4, C>;
    case 96: return attend_rows<6, C>;
    case 128: return attend_rows<8, C>;
    case 256: return attend_rows<16, C>;
    default: return nullptr;
  }
}

// The rows of one call attended: token row t reads its key list keys[t] (ascending cache rows,
// n_keys[t] of them) with, where mask is given, mask + t * mask_stride as its additive mask over
// cache rows. `longest`: the longest list (the scratch rows' width).
struct KeyLists {
  const int32_t* const* keys;
  const int64_t* n_keys;
  const float* mask;
  int64_t mask_stride;
  int64_t longest;
};

void attend_call(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, bool half, const KeyLists& lists, Tensor& out) {
  const int64_t T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k_cache.size(2);
  const float* qd = q.const_data_ptr<float>();
  // an fp16 cache's elements: IEEE binary16 bits (what c10::Half holds), widened by load_row16
  const void* kd = k_cache.const_data_ptr();
  const void* vd = v_cache.const_data_ptr();
  const AttendRows<float> attend32 = half ? nullptr : attend_rows_for<float>(D);
  const AttendRows<uint16_t> attend16 = half ? attend_rows_for<uint16_t>(D) : nullptr;
  float* od = out.mutable_data_ptr<float>();
  const int64_t group = H / Hkv, row_stride = Hkv * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t* nk = lists.n_keys;
  // The rows of a call are its (token row t, query head h) pairs; those of key/value head g,
  // n = T * group of them, are items g * n + t * group + (h - g * group) (for T == 1, item h).
  // The items split among the threads in contiguous ranges (parallel_for: equal counts), and a
  // range's items of one key/value head are the rows of its blocks (at most kRowBlock rows,
  // of balanced sizes): a block reads each key and value row once for all its rows, where one
  // task per query head read them once per head of the group. A row's arithmetic is its own
  // whichever block, range or thread computes it. (T = 4 rows of SmolLM2, 9 heads over 3
  // key/value heads: 3 blocks of 12 rows at one thread, 4 blocks at two, was 9 tasks.)
  const int64_t w_stride = (lists.longest + kLanes - 1) / kLanes * kLanes;
  const int64_t n_per_kv = T * group;
  pool::parallel_for(0, Hkv * n_per_kv, 1, [&](int64_t begin, int64_t end) {
    static thread_local std::vector<float> w;
    w.resize(kRowBlock * w_stride);
    for (int64_t seg = begin, seg_end; seg < end; seg = seg_end) {
      const int64_t g = seg / n_per_kv;
      seg_end = std::min(end, (g + 1) * n_per_kv);  // this range's items of key/value head g
      const int64_t m = seg_end - seg, nblocks = (m + kRowBlock - 1) / kRowBlock;
      for (int64_t b = 0; b < nblocks; ++b) {
        Rows rows;
        const int64_t first = seg + m * b / nblocks;
        rows.n = seg + m * (b + 1) / nblocks - first;
        for (int64_t r = 0; r < rows.n; ++r) {
          const int64_t p = first + r - g * n_per_kv, t = p / group, h = g * group + p % group;
          rows.q[r] = qd + (t * H + h) * D;
          rows.out[r] = od + (t * H + h) * D;
          rows.keys[r] = lists.keys[t];
          rows.n_keys[r] = nk[t];
          rows.mask[r] = lists.mask == nullptr ? nullptr : lists.mask + t * lists.mask_stride;
        }
        if (half)
          attend16(rows, static_cast<const uint16_t*>(kd) + g * D, static_cast<const uint16_t*>(vd) + g * D, row_stride, scale, w.data(), w_stride);
        else
          attend32(rows, static_cast<const float*>(kd) + g * D, static_cast<const float*>(vd) + g * D, row_stride, scale, w.data(), w_stride);
      }
    }
  });
}

Tensor& attention_out(KernelRuntimeContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start_pos,
                      const executorch::aten::optional<Tensor>& mask, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, q.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4, InvalidArgument, out,
                      "edgespec::attention: q and the caches must be 4-D [1, T|S, H, D]");
  const bool half = k_cache.scalar_type() == ScalarType::Half;
  ET_KERNEL_CHECK_MSG(ctx,
                      q.scalar_type() == ScalarType::Float && (half || k_cache.scalar_type() == ScalarType::Float) &&
                          v_cache.scalar_type() == k_cache.scalar_type(),
                      InvalidArgument, out, "edgespec::attention: fp32 q, and fp32 or fp16 caches (both the same)");
  ET_KERNEL_CHECK_MSG(ctx, out.scalar_type() == ScalarType::Float, InvalidArgument, out, "edgespec::attention: out must be fp32");
  const int64_t T = q.size(1), H = q.size(2), D = q.size(3);
  const int64_t S = k_cache.size(1), Hkv = k_cache.size(2);
  ET_KERNEL_CHECK_MSG(ctx, q.size(0) == 1 && k_cache.size(3) == D && Hkv > 0 && H % Hkv == 0 && v_cache.size(1) == S, InvalidArgument, out,
                      "edgespec::attention: shapes do not match");
  ET_KERNEL_CHECK_MSG(ctx, k_cache.size(0) == 1 && v_cache.sizes() == k_cache.sizes(), InvalidArgument, out,
                      "edgespec::attention: the caches must both be [1, S, Hkv, D]");
  ET_KERNEL_CHECK_MSG(ctx, attend_rows_for<float>(D) != nullptr, InvalidArgument, out, "edgespec::attention: head size must be 16, 32, 48, 64, 96, 128 or 256");
  const float* mask_data = nullptr;
  int64_t N = start_pos + T;  // key slots any row may see
  if (mask.has_value()) {
    const Tensor& mk = mask.value();
    ET_KERNEL_CHECK_MSG(ctx, mk.scalar_type() == ScalarType::Float && mk.dim() == 2 && mk.size(0) == T && mk.size(1) <= S, InvalidArgument,
                        out, "edgespec::attention: mask must be fp32 [T, N] with N <= cache length");
    mask_data = mk.const_data_ptr<float>();
    N = mk.size(1);
  } else {
    // start_pos + T <= S without the sum, which overflows for a start_pos near 2^63
    ET_KERNEL_CHECK_MSG(ctx, start_pos >= 0 && start_pos <= S - T, InvalidArgument, out, "edgespec::attention: rows past the cache");
  }
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, q.sizes()) == executorch::runtime::Error::Ok, InvalidArgument, out);

  // every row's visible key slots: causal rows are prefixes of one ascending list
  static thread_local std::vector<int32_t> slots;
  static thread_local std::vector<int32_t> masked_keys;
  static thread_local std::vector<int64_t> n_keys;
  n_keys.resize(T);
  if (mask_data == nullptr) {
    slots.resize(N);
    for (int64_t j = 0; j < N; ++j) slots[j] = static_cast<int32_t>(j);
    for (int64_t t = 0; t < T; ++t) n_keys[t] = start_pos + t + 1;
  } else {
    masked_keys.resize(T * N);
    for (int64_t t = 0; t < T; ++t) {
      int64_t n = 0;
      for (int64_t j = 0; j < N; ++j)
        if (mask_data[t * N + j] != -std::numeric_limits<float>::infinity()) masked_keys[t * N + n++] = static_cast<int32_t>(j);
      n_keys[t] = n;
    }
  }
  const int32_t* slot_list = mask_data == nullptr ? slots.data() : masked_keys.data();
  const int64_t list_stride = mask_data == nullptr ? 0 : N;
  static thread_local std::vector<const int32_t*> row_keys;
  row_keys.resize(T);
  for (int64_t t = 0; t < T; ++t) row_keys[t] = slot_list + t * list_stride;
  attend_call(q, k_cache, v_cache, half, KeyLists{row_keys.data(), n_keys.data(), mask_data, N, N}, out);
  return out;
}

// edgespec::attention_ranges.out: row t sees the cache rows [first[t], first[t] + count[t]) and
// no others (a batched call's rows, each over its own sequence's slot: Transformer.decode_rows).
// Its arithmetic is that of the causal rows of `attention` over the same keys: a sequence's
// row gives the bits it gives decoded alone.
Tensor& attention_ranges_out(KernelRuntimeContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& first,
                             const Tensor& count, Tensor& out) {
  ET_KERNEL_CHECK_MSG(ctx, q.dim() == 4 && k_cache.dim() == 4 && v_cache.dim() == 4 && q.size(0) == 1 && k_cache.size(0) == 1, InvalidArgument, out,
                      "edgespec::attention_ranges: q [1, T, H, D] and the caches [1, S, Hkv, D]");
  const bool half = k_cache.scalar_type() == ScalarType::Half;
  ET_KERNEL_CHECK_MSG(ctx,
                      q.scalar_type() == ScalarType::Float && (half || k_cache.scalar_type() == ScalarType::Float) &&
                          v_cache.scalar_type() == k_cache.scalar_type() && out.scalar_type() == ScalarType::Float,
                      InvalidArgument, out, "edgespec::attention_ranges: fp32 q and out, and fp32 or fp16 caches (both the same)");
  const int64_t T = q.size(1), H = q.size(2), D = q.size(3), S = k_cache.size(1), Hkv = k_cache.size(2);
  ET_KERNEL_CHECK_MSG(ctx, k_cache.size(3) == D && Hkv > 0 && H % Hkv == 0 && v_cache.sizes() == k_cache.sizes(), InvalidArgument, out,
                      "edgespec::attention_ranges: shapes do not match");
  ET_KERNEL_CHECK_MSG(ctx, attend_rows_for<float>(D) != nullptr, InvalidArgument, out, "edgespec::attention_ranges: head size must be 16, 32, 48, 64, 96, 128 or 256");
  ET_KERNEL_CHECK_MSG(ctx,
                      first.scalar_type() == ScalarType::Long && count.scalar_type() == ScalarType::Long && first.dim() == 1 && count.dim() == 1 &&
                          first.size(0) == T && count.size(0) == T,
                      InvalidArgument, out, "edgespec::attention_ranges: first and count must be int64 [T]");
  const int64_t* f = first.const_data_ptr<int64_t>();
  const int64_t* c = count.const_data_ptr<int64_t>();
  int64_t longest = 0;
  for (int64_t t = 0; t < T; ++t) {
    ET_KERNEL_CHECK_MSG(ctx, f[t] >= 0 && c[t] >= 1 && f[t] <= S - c[t], InvalidArgument, out, "edgespec::attention_ranges: a row's keys past the cache");
    longest = std::max(longest, c[t]);
  }
  ET_KERNEL_CHECK(ctx, executorch::runtime::resize_tensor(out, q.sizes()) == executorch::runtime::Error::Ok, InvalidArgument, out);
  static thread_local std::vector<int32_t> slots;  // 0, 1, 2, ...: a row's keys are a window of it
  if (static_cast<int64_t>(slots.size()) < S) {
    const int64_t had = static_cast<int64_t>(slots.size());
    slots.resize(S);
    for (int64_t j = had; j < S; ++j) slots[j] = static_cast<int32_t>(j);
  }
  static thread_local std::vector<const int32_t*> row_keys;
  row_keys.resize(T);
  for (int64_t t = 0; t < T; ++t) row_keys[t] = slots.data() + f[t];
  attend_call(q, k_cache, v_cache, half, KeyLists{row_keys.data(), c, nullptr, 0, longest}, out);
  return out;
}

}  // namespace
}  // namespace edgespec

EXECUTORCH_LIBRARY(edgespec, "attention.out", edgespec::attention_out);
EXECUTORCH_LIBRARY(edgespec, "attention_ranges.out", edgespec::attention_ranges_out);

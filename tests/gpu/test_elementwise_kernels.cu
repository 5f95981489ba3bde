// rms_norm, rope, swiglu, embedding, argmax, add, row scatter and the random fill on the GPU against
// their CPU twins, and row invariance; the fused norms against the standalone kernels, bit for bit.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/kernels/activation.h"
#include "backends/cpu/kernels/linear.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/rope.h"
#include "backends/cuda/activation.cuh"
#include "backends/cuda/add.cuh"
#include "backends/cuda/argmax.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/fill_random.cuh"
#include "backends/cuda/fused_norms.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "backends/cuda/rope.cuh"
#include "backends/cuda/scatter_rows.cuh"
#include "core/tensor.h"
#include "gpu_test.h"
#include "models/rope_frequencies.h"
#include "sampling/sampler.h"

using namespace tf;
using namespace tf::gpu_test;
using tf::cuda::DeviceBuffer;

namespace {

// Rounding to bf16 once leaves a relative error of at most 2^-9 per element.
constexpr double kBf16Tolerance = 4e-3;

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(host.size());
  buffer.copy_from_host(host);
  return buffer;
}

std::vector<uint16_t> gpu_rms_norm(const std::vector<uint16_t>& x, int64_t n_rows, int64_t dim,
                                   const DeviceBuffer<uint16_t>& gain) {
  auto x_device = to_device(x);
  DeviceBuffer<uint16_t> y(x.size());
  y.fill_bytes(0xff);
  cuda::rms_norm_bf16(x_device.data(), n_rows, dim, gain.data(), 1e-6f, y.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  return y.to_host();
}

void test_rms_norm(std::mt19937& rng) {
  for (int64_t dim : {128, 4096, 1000}) {
    const int64_t n_rows = 37;
    std::vector<uint16_t> x = random_bf16(size_t(n_rows * dim), rng, 2.0f);
    std::vector<uint16_t> gain_host = random_bf16(size_t(dim), rng, 1.0f);
    auto gain = to_device(gain_host);
    std::vector<uint16_t> y = gpu_rms_norm(x, n_rows, dim, gain);
    std::vector<float> reference(x.size());
    WeightVector gain_vector{dim, DType::bf16, gain_host.data()};
    cpu::rms_norm(bf16_to_f32(x).data(), n_rows, dim, gain_vector, 1e-6f, reference.data());
    const double error = relative_error(bf16_to_f32(y), reference);
    check(error < kBf16Tolerance, "rms_norm parity with cpu dim=" + std::to_string(dim) + " rel_err=" + format_error(error));
    // Row 5 alone equals row 5 among the others.
    std::vector<uint16_t> row(x.begin() + 5 * dim, x.begin() + 6 * dim);
    std::vector<uint16_t> y_alone = gpu_rms_norm(row, 1, dim, gain);
    check(bitwise_equal(y_alone.data(), y.data() + 5 * dim, size_t(dim)), "rms_norm row alone = among others dim=" + std::to_string(dim));
  }
}

void test_rope(std::mt19937& rng) {
  const int64_t n_rows = 9, n_heads = 4, head_dim = 128;
  const std::vector<float> inverse_frequencies = rope_inverse_frequencies(head_dim, 1000000.0);
  std::vector<uint16_t> x = random_bf16(size_t(n_rows * n_heads * head_dim), rng);
  std::vector<int32_t> positions = {0, 1, 2, 17, 100, 4095, 32767, 40000, 131071};
  auto x_device = to_device(x);
  auto positions_device = to_device(positions);
  auto frequencies_device = to_device(inverse_frequencies);
  cuda::rope_bf16(x_device.data(), n_rows, n_heads, head_dim, positions_device.data(), frequencies_device.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> reference = bf16_to_f32(x);
  cpu::rope_apply(reference.data(), n_rows, n_heads, head_dim, positions.data(), inverse_frequencies);
  const double error = relative_error(bf16_to_f32(x_device.to_host()), reference);
  check(error < kBf16Tolerance, "rope parity with cpu (positions up to 131071) rel_err=" + format_error(error));
}

void test_swiglu(std::mt19937& rng) {
  const int64_t n = 3 * 12288 + 5;
  std::vector<uint16_t> gate = random_bf16(size_t(n), rng, 3.0f), up = random_bf16(size_t(n), rng);
  auto gate_device = to_device(gate), up_device = to_device(up);
  DeviceBuffer<uint16_t> out(static_cast<size_t>(n));
  out.fill_bytes(0xff);
  cuda::swiglu_bf16(gate_device.data(), up_device.data(), n, out.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> reference(static_cast<size_t>(n));
  cpu::swiglu(bf16_to_f32(gate).data(), bf16_to_f32(up).data(), n, reference.data());
  const double error = relative_error(bf16_to_f32(out.to_host()), reference);
  check(error < kBf16Tolerance, "swiglu parity with cpu rel_err=" + format_error(error));
}

// f32 sum rounded once to bf16, the CPU's f32_to_bf16 of the same sum.
void test_add(std::mt19937& rng) {
  const int64_t n = 4096 * 3 + 7;
  std::vector<uint16_t> a = random_bf16(size_t(n), rng, 4.0f), b = random_bf16(size_t(n), rng, 0.1f);
  auto a_device = to_device(a), b_device = to_device(b);
  DeviceBuffer<uint16_t> out(static_cast<size_t>(n));
  out.fill_bytes(0xff);
  cuda::add_bf16(a_device.data(), b_device.data(), n, out.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> got = out.to_host(), want(static_cast<size_t>(n));
  for (size_t i = 0; i < want.size(); ++i) want[i] = f32_to_bf16(tf::bf16_to_f32(a[i]) + tf::bf16_to_f32(b[i]));
  check(bitwise_equal(got.data(), want.data(), got.size()), "add equals the cpu's rounded f32 sum exactly");
}

// Rows from a strided source land in their slots unchanged; other slots are untouched.
void test_scatter_rows(std::mt19937& rng) {
  const int64_t n_rows = 9, dim = 48, stride = 3 * dim, n_slots = 40;
  std::vector<uint16_t> source = random_bf16(size_t(n_rows * stride), rng);
  std::vector<int32_t> slots = {3, 39, 0, 17, 18, 5, 22, 31, 8};
  auto source_device = to_device(source);
  auto slots_device = to_device(slots);
  DeviceBuffer<uint16_t> table(size_t(n_slots * dim));
  table.fill_bytes(0xff);
  cuda::scatter_rows_bf16(source_device.data() + dim, stride, n_rows, dim, slots_device.data(), table.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> want(size_t(n_slots * dim), 0xffff), got = table.to_host();
  for (int64_t r = 0; r < n_rows; ++r)
    std::copy_n(source.begin() + r * stride + dim, dim, want.begin() + slots[size_t(r)] * dim);
  check(bitwise_equal(got.data(), want.data(), got.size()), "scatter_rows puts each row in its slot and nothing else");
}

// add then rms_norm, as two kernels, against the fused kernel; and the fused kernel with no residual
// against rms_norm alone.
void test_add_rms_norm(std::mt19937& rng) {
  for (int64_t dim : {128, 4096, 1000}) {
    const int64_t n_rows = 21, n = n_rows * dim;
    const std::vector<uint16_t> hidden = random_bf16(size_t(n), rng, 2.0f), residual = random_bf16(size_t(n), rng);
    auto gain = to_device(random_bf16(size_t(dim), rng, 1.0f));
    auto residual_device = to_device(residual);
    auto hidden_apart = to_device(hidden), hidden_fused = to_device(hidden);
    DeviceBuffer<uint16_t> normed_apart{size_t(n)}, normed_fused{size_t(n)};
    normed_fused.fill_bytes(0xff);
    cuda::add_bf16(hidden_apart.data(), residual_device.data(), n, hidden_apart.data());
    cuda::rms_norm_bf16(hidden_apart.data(), n_rows, dim, gain.data(), 1e-6f, normed_apart.data());
    cuda::add_rms_norm_bf16(hidden_fused.data(), residual_device.data(), n_rows, dim, gain.data(), 1e-6f,
                            normed_fused.data());
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> a = hidden_apart.to_host(), b = hidden_fused.to_host();
    const std::vector<uint16_t> na = normed_apart.to_host(), nb = normed_fused.to_host();
    check(bitwise_equal(a.data(), b.data(), a.size()) && bitwise_equal(na.data(), nb.data(), na.size()),
          "add_rms_norm = add_bf16 then rms_norm_bf16, bit for bit, dim=" + std::to_string(dim));

    auto plain = to_device(hidden);
    cuda::add_rms_norm_bf16(plain.data(), nullptr, n_rows, dim, gain.data(), 1e-6f, normed_fused.data());
    cuda::rms_norm_bf16(plain.data(), n_rows, dim, gain.data(), 1e-6f, normed_apart.data());
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> unchanged = plain.to_host(), fused = normed_fused.to_host(), apart = normed_apart.to_host();
    check(bitwise_equal(unchanged.data(), hidden.data(), hidden.size()) &&
              bitwise_equal(fused.data(), apart.data(), fused.size()),
          "add_rms_norm without a residual = rms_norm_bf16 and leaves hidden alone, dim=" + std::to_string(dim));
  }
}

// The model's former sequence (copy q and k out of qkv, per-head rms_norm, rope, scatter k and v to
// their slots) against the fused kernel, for two head sizes and GQA groups.
void test_qk_norm_rope_to_cache(std::mt19937& rng) {
  struct Case {
    int n_heads, n_kv_heads, head_dim;
  };
  for (const Case c : {Case{32, 8, 128}, Case{4, 2, 64}, Case{6, 3, 256}}) {
    const int64_t n_rows = 11, n_slots = 50, q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
    const int64_t qkv_dim = q_dim + 2 * kv_dim;
    const std::vector<uint16_t> qkv = random_bf16(size_t(n_rows * qkv_dim), rng, 3.0f);
    const std::vector<int32_t> positions = {0, 1, 5, 63, 64, 100, 511, 4095, 9000, 32767, 2};
    const std::vector<int32_t> slots = {7, 0, 49, 12, 13, 31, 2, 40, 41, 22, 9};
    auto qkv_device = to_device(qkv);
    auto q_gain = to_device(random_bf16(size_t(c.head_dim), rng, 1.0f));
    auto k_gain = to_device(random_bf16(size_t(c.head_dim), rng, 1.0f));
    auto positions_device = to_device(positions);
    auto slots_device = to_device(slots);
    auto frequencies = to_device(rope_inverse_frequencies(c.head_dim, 1000000.0));

    DeviceBuffer<uint16_t> q(size_t(n_rows * q_dim)), k(size_t(n_rows * kv_dim));
    DeviceBuffer<uint16_t> k_cache(size_t(n_slots * kv_dim)), v_cache(size_t(n_slots * kv_dim));
    k_cache.fill_bytes(0);
    v_cache.fill_bytes(0);
    TF_CUDA_CHECK(cudaMemcpy2D(q.data(), size_t(q_dim) * 2, qkv_device.data(), size_t(qkv_dim) * 2, size_t(q_dim) * 2,
                               size_t(n_rows), cudaMemcpyDeviceToDevice));
    TF_CUDA_CHECK(cudaMemcpy2D(k.data(), size_t(kv_dim) * 2, qkv_device.data() + q_dim, size_t(qkv_dim) * 2,
                               size_t(kv_dim) * 2, size_t(n_rows), cudaMemcpyDeviceToDevice));
    cuda::rms_norm_bf16(q.data(), n_rows * c.n_heads, c.head_dim, q_gain.data(), 1e-6f, q.data());
    cuda::rms_norm_bf16(k.data(), n_rows * c.n_kv_heads, c.head_dim, k_gain.data(), 1e-6f, k.data());
    cuda::rope_bf16(q.data(), n_rows, c.n_heads, c.head_dim, positions_device.data(), frequencies.data());
    cuda::rope_bf16(k.data(), n_rows, c.n_kv_heads, c.head_dim, positions_device.data(), frequencies.data());
    cuda::scatter_rows_bf16(k.data(), kv_dim, n_rows, kv_dim, slots_device.data(), k_cache.data());
    cuda::scatter_rows_bf16(qkv_device.data() + q_dim + kv_dim, qkv_dim, n_rows, kv_dim, slots_device.data(),
                            v_cache.data());

    DeviceBuffer<uint16_t> q_fused(size_t(n_rows * q_dim));
    DeviceBuffer<uint16_t> k_cache_fused(size_t(n_slots * kv_dim)), v_cache_fused(size_t(n_slots * kv_dim));
    q_fused.fill_bytes(0xff);
    k_cache_fused.fill_bytes(0);
    v_cache_fused.fill_bytes(0);
    cuda::qk_norm_rope_to_cache_bf16(qkv_device.data(), n_rows, {c.n_heads, c.n_kv_heads, c.head_dim}, q_gain.data(),
                                     k_gain.data(), 1e-6f, positions_device.data(), frequencies.data(),
                                     slots_device.data(), q_fused.data(), k_cache_fused.data(), v_cache_fused.data());
    TF_CUDA_CHECK(cudaDeviceSynchronize());
    const auto same = [](const DeviceBuffer<uint16_t>& a, const DeviceBuffer<uint16_t>& b) {
      const std::vector<uint16_t> x = a.to_host(), y = b.to_host();
      return bitwise_equal(x.data(), y.data(), x.size());
    };
    check(same(q, q_fused) && same(k_cache, k_cache_fused) && same(v_cache, v_cache_fused),
          "qk_norm_rope_to_cache = copy, rms_norm, rope, scatter, bit for bit, heads " + std::to_string(c.n_heads) + "/" +
              std::to_string(c.n_kv_heads) + " x " + std::to_string(c.head_dim));
  }
}

// Same seed, same values; values within the scale (plus bf16 rounding) and centred.
void test_fill_random() {
  const int64_t n = 1 << 20;
  DeviceBuffer<uint16_t> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
  cuda::fill_random_bf16(first.data(), n, 11, 0.02f);
  cuda::fill_random_bf16(second.data(), n, 11, 0.02f);
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> a = first.to_host(), b = second.to_host();
  double sum = 0, largest = 0;
  for (uint16_t bits : a) {
    sum += tf::bf16_to_f32(bits);
    largest = std::max(largest, double(std::fabs(tf::bf16_to_f32(bits))));
  }
  check(bitwise_equal(a.data(), b.data(), a.size()) && largest <= 0.0201 && std::fabs(sum / double(n)) < 1e-4,
        "fill_random is deterministic, within +-scale and centred");
}

void test_embedding(std::mt19937& rng) {
  const int64_t n_vocab = 1000, dim = 256;
  std::vector<uint16_t> table = random_bf16(size_t(n_vocab * dim), rng);
  std::vector<int32_t> ids = {0, 999, 5, 5, 123};
  auto table_device = to_device(table);
  auto ids_device = to_device(ids);
  DeviceBuffer<uint16_t> out(ids.size() * size_t(dim));
  out.fill_bytes(0xff);
  cuda::embedding_bf16(table_device.data(), n_vocab, dim, ids_device.data(), int64_t(ids.size()), out.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  WeightMatrix matrix;
  matrix.n_rows = n_vocab;
  matrix.n_cols = dim;
  matrix.dtype = DType::bf16;
  matrix.data = table.data();
  std::vector<float> reference(ids.size() * size_t(dim));
  cpu::embedding_rows(matrix, ids.data(), int64_t(ids.size()), reference.data());
  std::vector<float> got = bf16_to_f32(out.to_host());
  check(bitwise_equal(got.data(), reference.data(), got.size()), "embedding equals cpu::embedding_rows exactly");
}

void test_argmax(std::mt19937& rng) {
  const int64_t n_rows = 6, n_vocab = 151936;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(size_t(n_rows * n_vocab));
  for (float& v : logits) v = normal(rng);
  // Row 1: a tie between two ids far apart; row 2: the maximum at the last id; row 3: NaNs and a
  // tie at the very top; row 4: all -inf; row 5: ties everywhere.
  float* row = logits.data() + n_vocab;
  row[70000] = 50.0f;
  row[123] = 50.0f;
  logits[size_t(2 * n_vocab + n_vocab - 1)] = 60.0f;
  row = logits.data() + 3 * n_vocab;
  row[10] = NAN;
  row[20000] = 40.0f;
  row[20001] = 40.0f;
  row[0] = NAN;
  std::fill(logits.begin() + 4 * n_vocab, logits.begin() + 5 * n_vocab, -INFINITY);
  std::fill(logits.begin() + 5 * n_vocab, logits.begin() + 6 * n_vocab, 1.0f);
  auto logits_device = to_device(logits);
  DeviceBuffer<int32_t> ids(static_cast<size_t>(n_rows));
  ids.fill_bytes(0xff);
  cuda::argmax_f32(logits_device.data(), n_rows, n_vocab, ids.data());
  TF_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> got = ids.to_host();
  bool ok = true;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int32_t expected = argmax(logits.data() + r * n_vocab, n_vocab);
    if (got[size_t(r)] != expected) {
      std::printf("  argmax row %lld: gpu %d cpu %d\n", (long long)r, got[size_t(r)], expected);
      ok = false;
    }
  }
  check(ok, "argmax equals the cpu argmax (ties to the lowest id, NaN skipped, all -inf gives 0)");
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  try {
    test_rms_norm(rng);
    test_rope(rng);
    test_swiglu(rng);
    test_add(rng);
    test_scatter_rows(rng);
    test_add_rms_norm(rng);
    test_qk_norm_rope_to_cache(rng);
    test_fill_random();
    test_embedding(rng);
    test_argmax(rng);
  } catch (const std::exception& e) {
    check(false, std::string("exception: ") + e.what());
  }
  return finish("test_elementwise_kernels");
}

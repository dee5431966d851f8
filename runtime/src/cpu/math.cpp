// CPU reference kernels, math family: MatMul, Gemm and Einsum (the normalizations and
// Softmax live in math_norm.cpp).
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc {

void registerNormalizationKernels(KernelRegistry& registry);  // math_norm.cpp

namespace {

// The accumulator of a product sum: float for float32 and the half types (what BLAS does),
// double for float64, 64-bit integers for integer types.
template <typename T>
using DotAccum = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<kIsFloating<T>, float,
                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>>;

// Einsum multiplies several operands per term, so its float accumulator is double.
template <typename T>
using EinsumAccum = std::conditional_t<kIsFloating<T>, double,
                                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

Status unsupportedDType(const KernelContext& ctx, const char* op, DType dtype) {
  return unimplemented("node '" + ctx.nodeName() + "': " + op + " does not support dtype " +
                       dtypeName(dtype));
}

// The dtypes of ONNX MatMul and Gemm: float types and 32/64-bit integers.
bool isMatMulDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt32:
    case DType::kUInt64: return true;
    default: return false;
  }
}

// --- MatMul -------------------------------------------------------------------------------

// Computes sum_k a[m * a_row + k * a_col] * b[k * b_row + n * b_col] for every (m, n),
// accumulating each row of the result in `row` (length n_size) in ascending k, and hands
// each sum to emit(m, n, sum).
template <typename T, typename Emit>
void matMulTile(const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row, int64_t b_col,
                int64_t m_size, int64_t n_size, int64_t k_size, std::vector<DotAccum<T>>& row,
                Emit&& emit) {
  using A = DotAccum<T>;
  for (int64_t m = 0; m < m_size; ++m) {
    std::fill(row.begin(), row.end(), A{0});
    for (int64_t k = 0; k < k_size; ++k) {
      const A a_value = static_cast<A>(load(a[m * a_row + k * a_col]));
      const T* b_row_ptr = b + k * b_row;
      for (int64_t n = 0; n < n_size; ++n) {
        row[n] += a_value * static_cast<A>(load(b_row_ptr[n * b_col]));
      }
    }
    for (int64_t n = 0; n < n_size; ++n) emit(m, n, row[n]);
  }
}

Status matMulKernel(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  if (!a || !b) return kernelError(ctx, "MatMul needs inputs A and B");
  if (a->dtype() != b->dtype()) {
    return kernelError(ctx, std::string("MatMul operands differ in dtype: ") +
                                dtypeName(a->dtype()) + " and " + dtypeName(b->dtype()));
  }
  const DType dtype = a->dtype();
  if (!isMatMulDType(dtype)) return unsupportedDType(ctx, "MatMul", dtype);
  if (a->rank() == 0 || b->rank() == 0) {
    return kernelError(ctx, "MatMul operands must have rank >= 1, got " +
                                shapeToString(a->shape()) + " and " + shapeToString(b->shape()));
  }
  // Numpy semantics: a 1-D A is a row [1, K], a 1-D B a column [K, 1]; the added dim is
  // dropped from the result.
  Shape a_shape = a->shape();
  Shape b_shape = b->shape();
  if (a_shape.size() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b_shape.size() == 1) b_shape.push_back(1);
  const int64_t m_size = a_shape[a_shape.size() - 2];
  const int64_t k_size = a_shape.back();
  const int64_t n_size = b_shape.back();
  if (b_shape[b_shape.size() - 2] != k_size) {
    return kernelError(ctx, "MatMul inner dimensions differ: " + shapeToString(a->shape()) + " x " +
                                shapeToString(b->shape()));
  }
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2);
  const Shape b_batch(b_shape.begin(), b_shape.end() - 2);
  Shape batch;
  LLMC_RETURN_IF_ERROR(broadcastShapes(a_batch, b_batch, ctx.nodeName(), &batch));
  Shape out_shape = batch;
  if (a->rank() > 1) out_shape.push_back(m_size);
  if (b->rank() > 1) out_shape.push_back(n_size);
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  // Element offsets of each operand's matrix for every batch index (0 strides broadcast).
  const size_t batch_rank = batch.size();
  auto batchStrides = [&](const Shape& operand_batch, int64_t matrix_size) {
    std::vector<int64_t> strides(batch_rank, 0);
    const size_t lead = batch_rank - operand_batch.size();
    int64_t stride = matrix_size;
    for (size_t d = operand_batch.size(); d-- > 0;) {
      strides[lead + d] = operand_batch[d] == 1 ? 0 : stride;
      stride *= operand_batch[d];
    }
    return strides;
  };
  const std::vector<int64_t> a_strides = batchStrides(a_batch, m_size * k_size);
  const std::vector<int64_t> b_strides = batchStrides(b_batch, k_size * n_size);
  const int64_t batch_count = shapeNumElements(batch);

  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* a_data = a->data<T>();
      const T* b_data = b->data<T>();
      T* y = out->data<T>();
      std::vector<DotAccum<T>> row(static_cast<size_t>(n_size));
      std::vector<int64_t> index(batch_rank, 0);
      int64_t a_offset = 0, b_offset = 0;
      for (int64_t batch_index = 0; batch_index < batch_count; ++batch_index) {
        T* y_batch = y + batch_index * m_size * n_size;
        matMulTile(a_data + a_offset, k_size, 1, b_data + b_offset, n_size, 1, m_size, n_size,
                   k_size, row, [&](int64_t m, int64_t n, DotAccum<T> sum) {
                     y_batch[m * n_size + n] = store<T>(sum);
                   });
        for (size_t d = batch_rank; d-- > 0;) {
          a_offset += a_strides[d];
          b_offset += b_strides[d];
          if (++index[d] < batch[d]) break;
          a_offset -= a_strides[d] * batch[d];
          b_offset -= b_strides[d] * batch[d];
          index[d] = 0;
        }
      }
    }
  });
  return okStatus();
}

// --- Gemm ---------------------------------------------------------------------------------

Status gemmKernel(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  const Tensor* c = ctx.input(2);
  if (!a || !b) return kernelError(ctx, "Gemm needs inputs A and B");
  const DType dtype = a->dtype();
  if (b->dtype() != dtype || (c && c->dtype() != dtype)) {
    return kernelError(ctx, "Gemm operands differ in dtype");
  }
  if (!isMatMulDType(dtype)) return unsupportedDType(ctx, "Gemm", dtype);
  if (a->rank() != 2 || b->rank() != 2) {
    return kernelError(ctx, "Gemm needs 2-D A and B, got " + shapeToString(a->shape()) + " and " +
                                shapeToString(b->shape()));
  }
  const bool trans_a = ctx.params().getInt("transA", 0) != 0;
  const bool trans_b = ctx.params().getInt("transB", 0) != 0;
  const double alpha = ctx.params().getFloat("alpha", 1.0);
  const double beta = ctx.params().getFloat("beta", 1.0);
  const int64_t m_size = trans_a ? a->dim(1) : a->dim(0);
  const int64_t k_size = trans_a ? a->dim(0) : a->dim(1);
  const int64_t n_size = trans_b ? b->dim(0) : b->dim(1);
  const int64_t b_k_size = trans_b ? b->dim(1) : b->dim(0);
  if (b_k_size != k_size) {
    return kernelError(ctx, "Gemm inner dimensions differ: A " + shapeToString(a->shape()) +
                                (trans_a ? " (transposed)" : "") + ", B " +
                                shapeToString(b->shape()) + (trans_b ? " (transposed)" : ""));
  }
  // C broadcasts one way to [M, N].
  int64_t c_row_stride = 0, c_col_stride = 0;
  if (c) {
    if (c->rank() > 2) {
      return kernelError(ctx, "Gemm C must have rank <= 2, got " + shapeToString(c->shape()));
    }
    const int64_t c_rows = c->rank() == 2 ? c->dim(0) : 1;
    const int64_t c_cols = c->rank() >= 1 ? c->dim(c->rank() - 1) : 1;
    if ((c_rows != 1 && c_rows != m_size) || (c_cols != 1 && c_cols != n_size)) {
      return kernelError(ctx, "Gemm C of shape " + shapeToString(c->shape()) +
                                  " does not broadcast to [" + std::to_string(m_size) + ", " +
                                  std::to_string(n_size) + "]");
    }
    c_row_stride = c_rows == 1 ? 0 : c_cols;
    c_col_stride = c_cols == 1 ? 0 : 1;
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, {m_size, n_size}, &out));
  if (ctx.shapeOnly()) return okStatus();

  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using A = DotAccum<T>;
      T* y = out->data<T>();
      std::vector<A> row(static_cast<size_t>(n_size));
      // A[m, k] and B[k, n] in element strides, whatever the transposition.
      const int64_t a_row = trans_a ? 1 : k_size, a_col = trans_a ? m_size : 1;
      const int64_t b_row = trans_b ? 1 : n_size, b_col = trans_b ? k_size : 1;
      const T* c_data = c ? c->data<T>() : nullptr;
      matMulTile(a->data<T>(), a_row, a_col, b->data<T>(), b_row, b_col, m_size, n_size, k_size,
                 row, [&](int64_t m, int64_t n, A sum) {
                   const T c_value = c_data ? c_data[m * c_row_stride + n * c_col_stride] : T{};
                   if constexpr (kIsFloating<T>) {
                     double result = alpha * static_cast<double>(sum);
                     if (c_data) result += beta * static_cast<double>(load(c_value));
                     y[m * n_size + n] = store<T>(result);
                   } else {  // integer Gemm: alpha and beta are integral in any sensible model
                     A result = static_cast<A>(alpha) * sum;
                     if (c_data) result += static_cast<A>(beta) * static_cast<A>(c_value);
                     y[m * n_size + n] = static_cast<T>(result);
                   }
                 });
    }
  });
  return okStatus();
}

// --- Einsum -------------------------------------------------------------------------------

// Label ids: a letter is its ASCII code; dim e of the (right-aligned, broadcast) ellipsis is
// kEllipsisLabel + e.
constexpr int kEllipsisLabel = 128;

// One subscript list ("ij", "...ii") split into letters around an optional ellipsis.
struct EinsumTerm {
  std::string before;  // letters before "..." (all letters when there is none)
  std::string after;   // letters after "..."
  bool has_ellipsis = false;
};

bool isLabelLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

Status parseEinsumTerm(const KernelContext& ctx, const std::string& text, EinsumTerm* term) {
  *term = EinsumTerm();
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (isLabelLetter(c)) {
      (term->has_ellipsis ? term->after : term->before) += c;
    } else if (c == '.' && text.compare(i, 3, "...") == 0 && !term->has_ellipsis) {
      term->has_ellipsis = true;
      i += 2;
    } else {
      return kernelError(
          ctx, "Einsum subscripts '" + text + "' are malformed at '" + std::string(1, c) + "'");
    }
  }
  return okStatus();
}

// An equation resolved against the input shapes.
struct EinsumPlan {
  std::vector<int> out_labels;
  std::vector<int> reduced_labels;
  std::vector<int64_t> label_size;  // by label id
  // Per input: the element stride each label id moves (0 for absent or broadcast).
  std::vector<std::vector<int64_t>> strides;
};

Status planEinsum(const KernelContext& ctx, const std::string& raw_equation,
                  const std::vector<const Tensor*>& inputs, EinsumPlan* plan) {
  std::string equation;
  for (char c : raw_equation) {
    if (c != ' ' && c != '\t') equation += c;
  }
  const size_t arrow = equation.find("->");
  const bool explicit_output = arrow != std::string::npos;
  const std::string lhs = explicit_output ? equation.substr(0, arrow) : equation;
  std::vector<EinsumTerm> terms;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    EinsumTerm term;
    LLMC_RETURN_IF_ERROR(parseEinsumTerm(
        ctx, lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start),
        &term));
    terms.push_back(term);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != inputs.size()) {
    return kernelError(ctx, "Einsum equation '" + raw_equation + "' has " +
                                std::to_string(terms.size()) + " operands but the node has " +
                                std::to_string(inputs.size()) + " inputs");
  }

  // Each input's dims as label ids.
  int64_t ellipsis_rank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t letters = static_cast<int64_t>(terms[i].before.size() + terms[i].after.size());
    const int64_t rank = inputs[i]->rank();
    if (terms[i].has_ellipsis ? rank < letters : rank != letters) {
      return kernelError(ctx, "Einsum operand " + std::to_string(i) + " of shape " +
                                  shapeToString(inputs[i]->shape()) +
                                  " does not match subscripts in '" + raw_equation + "'");
    }
    if (terms[i].has_ellipsis) ellipsis_rank = std::max(ellipsis_rank, rank - letters);
  }
  std::vector<std::vector<int>> dim_labels(inputs.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    const EinsumTerm& term = terms[i];
    for (char c : term.before) dim_labels[i].push_back(c);
    if (term.has_ellipsis) {
      const int64_t own =
          inputs[i]->rank() - static_cast<int64_t>(term.before.size() + term.after.size());
      for (int64_t e = ellipsis_rank - own; e < ellipsis_rank; ++e)
        dim_labels[i].push_back(kEllipsisLabel + static_cast<int>(e));
    }
    for (char c : term.after) dim_labels[i].push_back(c);
  }

  // Label sizes, broadcasting size-1 dims.
  const size_t label_count = static_cast<size_t>(kEllipsisLabel + ellipsis_rank);
  plan->label_size.assign(label_count, -1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t d = 0; d < dim_labels[i].size(); ++d) {
      int64_t& size = plan->label_size[dim_labels[i][d]];
      const int64_t dim = inputs[i]->dim(static_cast<int64_t>(d));
      if (size == -1 || size == 1) {
        size = dim;
      } else if (dim != 1 && dim != size) {
        return kernelError(ctx, "Einsum label sizes disagree (" + std::to_string(size) + " vs " +
                                    std::to_string(dim) + ") in '" + raw_equation + "'");
      }
    }
  }

  // Output labels.
  plan->out_labels.clear();
  if (explicit_output) {
    EinsumTerm out_term;
    LLMC_RETURN_IF_ERROR(parseEinsumTerm(ctx, equation.substr(arrow + 2), &out_term));
    for (char c : out_term.before) plan->out_labels.push_back(c);
    if (out_term.has_ellipsis) {
      for (int64_t e = 0; e < ellipsis_rank; ++e)
        plan->out_labels.push_back(kEllipsisLabel + static_cast<int>(e));
    }
    for (char c : out_term.after) plan->out_labels.push_back(c);
    std::vector<bool> seen(label_count, false);
    for (int label : plan->out_labels) {
      if (label < kEllipsisLabel && plan->label_size[label] == -1) {
        return kernelError(ctx, std::string("Einsum output label '") + static_cast<char>(label) +
                                    "' is not in any input of '" + raw_equation + "'");
      }
      if (seen[label]) {
        return kernelError(ctx, "Einsum output repeats a label in '" + raw_equation + "'");
      }
      seen[label] = true;
    }
  } else {
    // Implicit form: the broadcast ellipsis dims, then letters used exactly once, sorted.
    for (int64_t e = 0; e < ellipsis_rank; ++e)
      plan->out_labels.push_back(kEllipsisLabel + static_cast<int>(e));
    std::vector<int> uses(kEllipsisLabel, 0);
    for (const auto& labels : dim_labels) {
      for (int label : labels) {
        if (label < kEllipsisLabel) ++uses[label];
      }
    }
    for (int label = 0; label < kEllipsisLabel; ++label) {
      if (uses[label] == 1) plan->out_labels.push_back(label);
    }
  }
  // Everything else is summed over (including ellipsis dims an explicit output leaves out).
  plan->reduced_labels.clear();
  for (size_t label = 0; label < label_count; ++label) {
    if (plan->label_size[label] == -1) continue;
    if (std::find(plan->out_labels.begin(), plan->out_labels.end(), static_cast<int>(label)) ==
        plan->out_labels.end()) {
      plan->reduced_labels.push_back(static_cast<int>(label));
    }
  }

  // Strides; a repeated label within one operand (a diagonal) adds its strides.
  plan->strides.assign(inputs.size(), std::vector<int64_t>(label_count, 0));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int64_t> element_strides = stridesOf(inputs[i]->shape());
    for (size_t d = 0; d < dim_labels[i].size(); ++d) {
      const int label = dim_labels[i][d];
      if (inputs[i]->dim(static_cast<int64_t>(d)) == 1 && plan->label_size[label] != 1) continue;
      plan->strides[i][label] += element_strides[d];
    }
  }
  return okStatus();
}

// Steps a row-major counter over `labels`, moving every operand offset along.
class LabelCounter {
 public:
  LabelCounter(const std::vector<int>& labels, const EinsumPlan& plan)
      : labels_(labels), plan_(plan) {
    index_.assign(labels.size(), 0);
  }
  void reset() { std::fill(index_.begin(), index_.end(), 0); }
  void next(std::vector<int64_t>& offsets) {
    for (size_t d = labels_.size(); d-- > 0;) {
      const int label = labels_[d];
      const int64_t size = plan_.label_size[label];
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] += plan_.strides[i][label];
      if (++index_[d] < size) return;
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] -= plan_.strides[i][label] * size;
      index_[d] = 0;
    }
  }

 private:
  const std::vector<int>& labels_;
  const EinsumPlan& plan_;
  std::vector<int64_t> index_;
};

Status einsumKernel(KernelContext& ctx) {
  const KernelParams& params = ctx.params();
  if (!params.has("equation")) return kernelError(ctx, "Einsum needs an 'equation'");
  const std::string equation = params.getString("equation", "");
  std::vector<const Tensor*> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor* input = ctx.input(i);
    if (!input) return kernelError(ctx, "Einsum input " + std::to_string(i) + " is missing");
    inputs.push_back(input);
  }
  if (inputs.empty()) return kernelError(ctx, "Einsum needs at least one input");
  const DType dtype = inputs[0]->dtype();
  for (const Tensor* input : inputs) {
    if (input->dtype() != dtype) return kernelError(ctx, "Einsum inputs differ in dtype");
  }
  if (dtype == DType::kBool || !dispatchAll(dtype, [](auto) {})) {
    return unsupportedDType(ctx, "Einsum", dtype);
  }
  EinsumPlan plan;
  LLMC_RETURN_IF_ERROR(planEinsum(ctx, equation, inputs, &plan));
  Shape out_shape;
  for (int label : plan.out_labels) out_shape.push_back(plan.label_size[label]);
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();

  int64_t reduced_count = 1;
  for (int label : plan.reduced_labels) reduced_count *= plan.label_size[label];
  const int64_t out_count = out->numElements();
  dispatchAll(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using A = EinsumAccum<T>;
      std::vector<const T*> data;
      for (const Tensor* input : inputs) data.push_back(input->data<T>());
      T* y = out->data<T>();
      LabelCounter out_counter(plan.out_labels, plan);
      LabelCounter reduced_counter(plan.reduced_labels, plan);
      std::vector<int64_t> base(inputs.size(), 0), offsets(inputs.size(), 0);
      for (int64_t o = 0; o < out_count; ++o) {
        A sum{0};
        offsets = base;
        reduced_counter.reset();
        for (int64_t r = 0; r < reduced_count; ++r) {
          A product{1};
          for (size_t i = 0; i < data.size(); ++i)
            product *= static_cast<A>(load(data[i][offsets[i]]));
          sum += product;
          reduced_counter.next(offsets);
        }
        y[o] = store<T>(sum);
        out_counter.next(base);
      }
    }
  });
  return okStatus();
}

}  // namespace

void registerMathKernels(KernelRegistry& registry) {
  registry.add({"MatMul", 2, 2, 1, 1, &matMulKernel});
  registry.add({"Gemm", 2, 3, 1, 1, &gemmKernel});
  registry.add({"Einsum", 1, -1, 1, 1, &einsumKernel});
  registerNormalizationKernels(registry);
}

}  // namespace llmc

// RUN: llmc-opt --split-input-file --llmc-quantize-weights %s | FileCheck %s
// RUN: llmc-opt --split-input-file --llmc-quantize-weights="format=int4 group=32" %s | FileCheck %s --check-prefix=INT4
// RUN: llmc-opt --split-input-file --llmc-quantize-weights="format=int4_zp group=32" %s | FileCheck %s --check-prefix=ZP
// RUN: llmc-opt --split-input-file --llmc-quantize-weights="keep-float=lm_head" %s | FileCheck %s --check-prefix=KEEP
// RUN: llmc-opt --split-input-file --llmc-quantize-weights="format=fp8" %s | FileCheck %s --check-prefix=FP8

// Tests that a product with a constant [K, N] weight becomes llm.quant_matmul over the [N, K]
// quantized weight (int8: a float scale per output channel; int4: packed pairs and a float16
// scale per group; int4_zp: with uint8 zero points), keeping bias and activation.
// CHECK-LABEL: func @product
// CHECK-DAG: %[[Q:.+]] = nn.constant {{.*}} : tensor<3x64xi8>
// CHECK-DAG: %[[S:.+]] = nn.constant {{.*}} : tensor<3x1xf32>
// CHECK: llm.quant_matmul(%{{.+}}, %[[Q]], %[[S]], %{{.+}}, %{{.+}}) {activation = "gelu_erf", format = "int8", group = 64 : i64}
// CHECK-NOT: llm.fused_matmul
// INT4-LABEL: func @product
// INT4-DAG: nn.constant {{.*}} : tensor<3x32xui8>
// INT4-DAG: nn.constant {{.*}} : tensor<3x2xf16>
// INT4: llm.quant_matmul{{.*}}format = "int4", group = 32 : i64
// ZP-LABEL: func @product
// ZP-DAG: %[[Z:.+]] = nn.constant {{.*}} : tensor<3x2xui8>
// ZP: llm.quant_matmul(%{{.+}}, %{{.+}}, %{{.+}}, %[[Z]], %{{.+}}) {{.*}}format = "int4_zp"
// FP8-LABEL: func @product
// FP8-DAG: nn.constant {{.*}} : tensor<3x64xui8>
// FP8-DAG: nn.constant {{.*}} : tensor<3x1xf32>
// FP8: llm.quant_matmul{{.*}}format = "fp8", group = 64 : i64
func.func @product(%x: tensor<2x64xf32>) -> tensor<2x3xf32> {
  %w = nn.constant dense<0.5> : tensor<64x3xf32>
  %b = nn.constant dense<1.0> : tensor<3xf32>
  %y = llm.fused_matmul(%x, %w, %b) {activation = "gelu_erf"} : (tensor<2x64xf32>, tensor<64x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that the gated MLP's [K, 2F] weight becomes a gated llm.quant_matmul over [2F, K], that
// a plain nn.matmul with a constant weight is quantized too, and a Gather of a constant table
// (the embedding) becomes llm.quant_gather over its rows.
// CHECK-LABEL: func @gated
// CHECK: llm.quant_gather{{.*}}{format = "int8", group = 32 : i64} : (tensor<2xi64>, tensor<16x32xi8>, tensor<16x1xf32>, none) -> tensor<2x32xf32>
// CHECK: llm.quant_matmul{{.*}}{activation = "silu", format = "int8", gated = 1 : i64, group = 32 : i64}
// CHECK-SAME: -> tensor<2x32xf32>
// CHECK: llm.quant_matmul{{.*}}{format = "int8", group = 32 : i64}
// CHECK-SAME: (tensor<2x32xf32>, tensor<8x32xi8>, tensor<8x1xf32>, none, none) -> tensor<2x8xf32>
// ZP-LABEL: func @gated
// ZP: llm.quant_gather({{.*}}) {format = "int4_zp", group = 32 : i64} : (tensor<2xi64>, tensor<16x16xui8>, tensor<16x1xf16>, tensor<16x1xui8>)
func.func @gated(%ids: tensor<2xi64>) -> tensor<2x8xf32> {
  %table = nn.constant dense<0.125> : tensor<16x32xf32>
  %x = nn.gather(%table, %ids) {axis = 0 : i64} : (tensor<16x32xf32>, tensor<2xi64>) -> tensor<2x32xf32>
  %w = nn.constant dense<0.25> : tensor<32x64xf32>
  %h = llm.gated_mlp(%x, %w) {activation = "silu"} : (tensor<2x32xf32>, tensor<32x64xf32>) -> tensor<2x32xf32>
  %d = nn.constant dense<0.5> : tensor<32x8xf32>
  %y = nn.matmul(%h, %d) : (tensor<2x32xf32>, tensor<32x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a product whose K is not a multiple of 32 stays float32, as does a product of two
// activations, and one whose node name a keep-float pattern names.
// CHECK-LABEL: func @stays_float
// CHECK: llm.fused_matmul
// CHECK: nn.matmul
// CHECK: llm.quant_matmul
// KEEP-LABEL: func @stays_float
// KEEP-NOT: llm.quant_matmul
func.func @stays_float(%x: tensor<2x48xf32>, %a: tensor<2x32xf32>, %c: tensor<32x32xf32>) -> (tensor<2x3xf32>, tensor<2x32xf32>, tensor<2x32xf32>) {
  %none = nn.none
  %w = nn.constant dense<0.5> : tensor<48x3xf32>
  %y = llm.fused_matmul(%x, %w, %none) : (tensor<2x48xf32>, tensor<48x3xf32>, none) -> tensor<2x3xf32>
  %z = nn.matmul(%a, %c) : (tensor<2x32xf32>, tensor<32x32xf32>) -> tensor<2x32xf32>
  %h = nn.constant dense<0.5> : tensor<32x32xf32>
  %l = llm.fused_matmul(%a, %h, %none) : (tensor<2x32xf32>, tensor<32x32xf32>, none) -> tensor<2x32xf32> loc("lm_head")
  return %y, %z, %l : tensor<2x3xf32>, tensor<2x32xf32>, tensor<2x32xf32>
}

// -----

// Tests that a product whose activations shape inference left unranked is still quantized (the
// kernel checks K when it runs; torch's BERT exports leave some of these).
// CHECK-LABEL: func @unranked
// KEEP-LABEL: func @unranked
// INT4-LABEL: func @unranked
// ZP-LABEL: func @unranked
// FP8-LABEL: func @unranked
// CHECK: llm.quant_matmul{{.*}}format = "int8"{{.*}}(tensor<*xf32>, tensor<16x32xi8>, tensor<16x1xf32>, none, none) -> tensor<*xf32>
func.func @unranked(%x: tensor<*xf32>) -> tensor<*xf32> {
  %w = nn.constant dense<0.5> : tensor<32x16xf32>
  %y = nn.matmul(%x, %w) : (tensor<*xf32>, tensor<32x16xf32>) -> tensor<*xf32>
  return %y : tensor<*xf32>
}

// RUN: llmc-opt --split-input-file --llmc-strip-kv-io %s | FileCheck %s

// Tests that a cache export loses its past inputs (each becomes an empty tensor of the
// input's batch), position_ids (llm.positions broadcast to [batch, tokens]) and present
// outputs, and that the attention mask takes the new tokens' length.
// CHECK-LABEL: func @cache_export
// CHECK-SAME: (%[[IDS:.+]]: tensor<?x?xi64> {llmc.dims = ["batch", "seq"], llmc.name = "input_ids"}, %{{.+}}: tensor<?x?xi64> {llmc.dims = ["batch", "seq"], llmc.name = "attention_mask"})
// CHECK-SAME: -> tensor<?x?x4xf32>
// CHECK-SAME: llmc.output_names = ["logits"]
// CHECK-SAME: llmc.stripped_kv_io
// CHECK-SAME: llmc.symbols = ["batch", "seq"]
// CHECK: %[[SHAPE:.+]] = nn.shape(%[[IDS]])
// CHECK: %[[BATCH:.+]] = nn.slice(%[[SHAPE]]
// CHECK: %[[TARGET:.+]] = nn.concat(%[[BATCH]], %{{.+}}) {axis = 0 : i64}
// CHECK: %[[EMPTY:.+]] = nn.constant_of_shape(%[[TARGET]]) {{.*}} -> tensor<?x2x0x4xf32>
// CHECK: %[[POS:.+]] = llm.positions(%[[IDS]])
// CHECK: nn.expand
// CHECK: nn.concat(%[[EMPTY]], %{{.+}}) {axis = 2 : i64}
// CHECK: return %{{.+}} : tensor<?x?x4xf32>
func.func @cache_export(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]},
                        %mask: tensor<?x?xi64> {llmc.name = "attention_mask", llmc.dims = ["batch", "past + seq"]},
                        %pos: tensor<?x?xi64> {llmc.name = "position_ids", llmc.dims = ["batch", "seq"]},
                        %pk: tensor<?x2x?x4xf32> {llmc.name = "past_key_values.0.key", llmc.dims = ["batch", "", "past", ""]})
    -> (tensor<?x?x4xf32>, tensor<?x2x?x4xf32>)
    attributes {llmc.output_names = ["logits", "present.0.key"], llmc.symbols = ["batch", "seq", "past + seq", "past"]} {
  %k = nn.constant dense<1.0> : tensor<1x2x1x4xf32>
  %present = nn.concat(%pk, %k) {axis = 2 : i64} : (tensor<?x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<?x2x?x4xf32>
  %pf = nn.cast(%pos) {to = 1 : i64} : (tensor<?x?xi64>) -> tensor<?x?xf32>
  %mf = nn.cast(%mask) {to = 1 : i64} : (tensor<?x?xi64>) -> tensor<?x?xf32>
  %u = nn.constant dense<[2]> : tensor<1xi64>
  %pu = nn.unsqueeze(%pf, %u) : (tensor<?x?xf32>, tensor<1xi64>) -> tensor<?x?x1xf32>
  %w = nn.constant dense<0.5> : tensor<1x4xf32>
  %logits = nn.mul(%pu, %w) : (tensor<?x?x1xf32>, tensor<1x4xf32>) -> tensor<?x?x4xf32>
  return %logits, %present : tensor<?x?x4xf32>, tensor<?x2x?x4xf32>
}

// -----

// Tests that a model without past_key_values inputs is left alone.
// CHECK-LABEL: func @plain
// CHECK-SAME: llmc.name = "position_ids"
// CHECK-NOT: llm.positions
func.func @plain(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]},
                 %pos: tensor<?x?xi64> {llmc.name = "position_ids", llmc.dims = ["batch", "seq"]}) -> tensor<?x?xi64>
    attributes {llmc.output_names = ["y"], llmc.symbols = ["batch", "seq"]} {
  %y = nn.add(%ids, %pos) : (tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?xi64>
  return %y : tensor<?x?xi64>
}

// -----

// Tests GPT-BigCode's packed multi-query cache: `past_key_values.N.key_value` [batch, past,
// 2 x head_dim] becomes an empty [batch, 0, 2 x head_dim] (its past axis is 1) and its
// `present.N.key_value` output goes.
// CHECK-LABEL: func @packed_key_value
// CHECK-SAME: llmc.output_names = ["logits"]
// CHECK: nn.constant_of_shape({{.*}}) {{.*}} -> tensor<?x0x8xf32>
// CHECK: return %{{.+}} : tensor<?x?x8xf32>
func.func @packed_key_value(%ids: tensor<?x?xi64> {llmc.name = "input_ids", llmc.dims = ["batch", "seq"]},
                            %kv: tensor<?x?x8xf32> {llmc.name = "past_key_values.0.key_value", llmc.dims = ["batch", "past", ""]})
    -> (tensor<?x?x8xf32>, tensor<?x?x8xf32>)
    attributes {llmc.output_names = ["logits", "present.0.key_value"], llmc.symbols = ["batch", "seq", "past"]} {
  %new = nn.constant dense<1.0> : tensor<1x1x8xf32>
  %present = nn.concat(%kv, %new) {axis = 1 : i64} : (tensor<?x?x8xf32>, tensor<1x1x8xf32>) -> tensor<?x?x8xf32>
  return %present, %present : tensor<?x?x8xf32>, tensor<?x?x8xf32>
}

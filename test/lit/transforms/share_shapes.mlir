// RUN: llmc-opt --split-input-file --llmc-share-shapes %s | FileCheck %s

// Tests that two layers' Shape of activations proven the same shape ([batch, seq, 8]) become
// one, and that the arithmetic on them (Gather of the same index, despite different node
// names) merges, while a Shape of a differently shaped value stays.
// CHECK-LABEL: func @per_layer_shapes
func.func @per_layer_shapes(%x: tensor<?x?x8xf32> {llmc.dims = ["batch", "seq", ""], llmc.name = "x"},
                            %z: tensor<?x?x8xf32> {llmc.dims = ["batch", "other", ""], llmc.name = "z"})
    -> (tensor<?x?x8xf32>, tensor<i64>, tensor<i64>, tensor<i64>) {
  %zero = nn.constant dense<0> : tensor<i64>
  %also_zero = nn.constant dense<0> : tensor<i64>
  %y = nn.relu(%x) {llmc.dims = [["batch", "seq", ""]]} : (tensor<?x?x8xf32>) -> tensor<?x?x8xf32>
  // CHECK: %[[S:.+]] = nn.shape(%{{.+}})
  // CHECK: %[[G:.+]] = nn.gather(%[[S]]
  // CHECK: %[[SZ:.+]] = nn.shape(%{{.+}})
  // CHECK: %[[GZ:.+]] = nn.gather(%[[SZ]]
  // CHECK-NOT: nn.shape
  // CHECK-NOT: nn.gather
  // CHECK: return %{{.+}}, %[[G]], %[[G]], %[[GZ]]
  %s0 = nn.shape(%x) {llmc.names = ["layer0/Shape"]} : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %g0 = nn.gather(%s0, %zero) {axis = 0 : i64, llmc.names = ["layer0/Gather"]} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %s1 = nn.shape(%y) {llmc.names = ["layer1/Shape"]} : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %g1 = nn.gather(%s1, %also_zero) {axis = 0 : i64, llmc.names = ["layer1/Gather"]} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %sz = nn.shape(%z) : (tensor<?x?x8xf32>) -> tensor<3xi64>
  %gz = nn.gather(%sz, %zero) {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %y, %g0, %g1, %gz : tensor<?x?x8xf32>, tensor<i64>, tensor<i64>, tensor<i64>
}

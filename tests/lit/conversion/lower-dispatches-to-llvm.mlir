// RUN: xcc-opt %s -xcc-xg-lower-dispatches-to-llvm | FileCheck %s

// Only dispatch functions survive; each gets an internal implementation on
// bare pointers and an exported entry with the runtime's ABI that loads its
// bindings from the pointer array. Every binding is noalias: PlanMemory never
// places a dispatch's result over another of its bindings, and saying so lets
// LLVM vectorize loops whose runtime alias checks it cannot form.
// CHECK-NOT: func.func
// CHECK-NOT: @entry
// CHECK: llvm.func internal @add_0_impl(%{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64)
// CHECK-SAME: passthrough = ["alwaysinline"]
// CHECK: llvm.fadd
// CHECK-LABEL: llvm.func @add_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64)
// CHECK: %[[P0:.*]] = llvm.getelementptr %arg0[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[B0:.*]] = llvm.load %[[P0]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[P1:.*]] = llvm.getelementptr %arg0[1]
// CHECK: %[[B1:.*]] = llvm.load %[[P1]]
// CHECK: %[[P2:.*]] = llvm.getelementptr %arg0[2]
// CHECK: %[[B2:.*]] = llvm.load %[[P2]]
// CHECK: llvm.call @add_0_impl(%[[B0]], %[[B1]], %[[B2]], %arg2, %arg3)
// CHECK: llvm.return
func.func @entry(%x: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {xg.entry} {
  return %x : tensor<4x8xf32>
}

func.func @add_0(%a: memref<32xf32>, %b: memref<32xf32>, %out: memref<32xf32>, %lo: index, %hi: index) attributes {xg.dispatch_func} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %va = memref.reinterpret_cast %a to offset: [0], sizes: [4, 8], strides: [8, 1] : memref<32xf32> to memref<4x8xf32, strided<[8, 1]>>
  %vb = memref.reinterpret_cast %b to offset: [0], sizes: [4, 8], strides: [8, 1] : memref<32xf32> to memref<4x8xf32, strided<[8, 1]>>
  %vo = memref.reinterpret_cast %out to offset: [0], sizes: [4, 8], strides: [8, 1] : memref<32xf32> to memref<4x8xf32, strided<[8, 1]>>
  scf.for %r = %lo to %hi step %c1 {
    scf.for %c = %c0 to %c8 step %c1 {
      %x = memref.load %va[%r, %c] : memref<4x8xf32, strided<[8, 1]>>
      %y = memref.load %vb[%r, %c] : memref<4x8xf32, strided<[8, 1]>>
      %s = arith.addf %x, %y : f32
      memref.store %s, %vo[%r, %c] : memref<4x8xf32, strided<[8, 1]>>
    }
  }
  return
}

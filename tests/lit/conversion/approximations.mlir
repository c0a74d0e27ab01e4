// RUN: xcc-opt %s -xcc-xg-lower-dispatches-to-llvm | FileCheck %s

// exp becomes a polynomial (vectorizable arithmetic, no libm call)...
// CHECK-LABEL: llvm.func internal @sigmoid_0_impl
// CHECK-NOT: llvm.intr.exp
// CHECK-NOT: llvm.call
// CHECK: llvm.fmul
// CHECK-LABEL: llvm.func @sigmoid_0(
func.func @sigmoid_0(%x: memref<16xf32>, %out: memref<16xf32>, %lo: index, %hi: index) attributes {xg.dispatch_func} {
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  scf.for %i = %lo to %hi step %c1 {
    %v = memref.load %x[%i] : memref<16xf32>
    %n = arith.negf %v : f32
    %e = math.exp %n : f32
    %d = arith.addf %one, %e : f32
    %s = arith.divf %one, %d : f32
    memref.store %s, %out[%i] : memref<16xf32>
  }
  return
}

// ...but a function with sin/cos keeps the exact intrinsics (large rope angles).
// CHECK-LABEL: llvm.func internal @rotate_0_impl
// CHECK: llvm.intr.sin
// CHECK: llvm.intr.cos
func.func @rotate_0(%x: memref<16xf32>, %out: memref<16xf32>, %lo: index, %hi: index) attributes {xg.dispatch_func} {
  %c1 = arith.constant 1 : index
  scf.for %i = %lo to %hi step %c1 {
    %v = memref.load %x[%i] : memref<16xf32>
    %s = math.sin %v : f32
    %c = math.cos %v : f32
    %e = math.exp %v : f32
    %a = arith.addf %s, %c : f32
    %b = arith.addf %a, %e : f32
    memref.store %b, %out[%i] : memref<16xf32>
  }
  return
}

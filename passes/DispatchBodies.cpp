//===- DispatchBodies.cpp - scf loop nests of generated xg ops ------------===//
//
// Every body is written per row: workgroup r computes row r of the result, so
// rows are independent and a row's value never depends on the bucket or on
// the other rows in the batch. Reductions use `reassoc` so LLVM may vectorize
// them; the order is still fixed by the code, not by the batch.
//
//===----------------------------------------------------------------------===//
#include "passes/DispatchBodies.h"

#include "dialects/XG/IR/XGOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace xcc {
namespace {

using BodyFn = function_ref<void(OpBuilder &, Location, Value)>;

class Emitter {
public:
  Emitter(OpBuilder &b, Location loc) : b_(b), loc_(loc) {}

  Value index(int64_t v) { return b_.create<arith::ConstantIndexOp>(loc_, v); }
  Value f32(float v) {
    return b_.create<arith::ConstantOp>(loc_, b_.getF32FloatAttr(v));
  }
  Value i32(int32_t v) {
    return b_.create<arith::ConstantOp>(loc_, b_.getI32IntegerAttr(v));
  }

  // for (iv = lo; iv < hi; ++iv) body(iv)
  void loop(Value lo, Value hi, function_ref<void(Value)> body) {
    b_.create<scf::ForOp>(loc_, lo, hi, index(1), ValueRange{},
                          [&](OpBuilder &nb, Location, Value iv, ValueRange) {
                            OpBuilder::InsertionGuard g(b_);
                            b_.setInsertionPoint(nb.getInsertionBlock(),
                                                 nb.getInsertionPoint());
                            body(iv);
                            b_.create<scf::YieldOp>(loc_);
                          });
  }
  void loop(int64_t lo, int64_t hi, function_ref<void(Value)> body) {
    loop(index(lo), index(hi), body);
  }

  // acc = init; for (iv in [lo, hi)) acc = body(iv, acc); return acc
  Value reduce(int64_t lo, int64_t hi, Value init,
               function_ref<Value(Value, Value)> body) {
    auto op = b_.create<scf::ForOp>(
        loc_, index(lo), index(hi), index(1), ValueRange{init},
        [&](OpBuilder &nb, Location, Value iv, ValueRange args) {
          OpBuilder::InsertionGuard g(b_);
          b_.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value next = body(iv, args[0]);
          b_.create<scf::YieldOp>(loc_, next);
        });
    return op.getResult(0);
  }

  // if (cond) then() else otherwise()
  void ifElse(Value cond, function_ref<void()> then,
              function_ref<void()> otherwise) {
    b_.create<scf::IfOp>(
        loc_, cond,
        [&](OpBuilder &nb, Location) {
          OpBuilder::InsertionGuard g(b_);
          b_.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          then();
          b_.create<scf::YieldOp>(loc_);
        },
        [&](OpBuilder &nb, Location) {
          OpBuilder::InsertionGuard g(b_);
          b_.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          otherwise();
          b_.create<scf::YieldOp>(loc_);
        });
  }

  Value load(Value m, ValueRange idx) {
    return b_.create<memref::LoadOp>(loc_, m, idx);
  }
  void store(Value v, Value m, ValueRange idx) {
    b_.create<memref::StoreOp>(loc_, v, m, idx);
  }

  Value add(Value a, Value c) { return b_.create<arith::AddFOp>(loc_, a, c); }
  Value sub(Value a, Value c) { return b_.create<arith::SubFOp>(loc_, a, c); }
  Value mul(Value a, Value c) { return b_.create<arith::MulFOp>(loc_, a, c); }
  Value div(Value a, Value c) { return b_.create<arith::DivFOp>(loc_, a, c); }
  // An add that LLVM may reassociate (to vectorize a reduction).
  Value addReassoc(Value a, Value c) {
    return b_.create<arith::AddFOp>(
        loc_, a, c,
        arith::FastMathFlagsAttr::get(b_.getContext(),
                                      arith::FastMathFlags::reassoc));
  }

  Value toIndex(Value i32v) {
    return b_.create<arith::IndexCastOp>(loc_, b_.getIndexType(), i32v);
  }
  // 0 <= v < bound, for an i32 value.
  Value inRange(Value v, int64_t bound) {
    Value ge =
        b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::sge, v, i32(0));
    Value lt = b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::slt, v,
                                        i32(static_cast<int32_t>(bound)));
    return b_.create<arith::AndIOp>(loc_, ge, lt);
  }

  OpBuilder &builder() { return b_; }
  Location loc() { return loc_; }

private:
  OpBuilder &b_;
  Location loc_;
};

int64_t dim(Value v, unsigned d) {
  return cast<ShapedType>(v.getType()).getDimSize(d);
}

// out[r, :] = rows(r) copied from `src` row `srcRow`, or zeros if !valid.
void copyRowOrZero(Emitter &e, Value valid, Value src, Value srcRow, Value out,
                   Value r, int64_t cols) {
  e.ifElse(
      valid,
      [&] {
        e.loop(0, cols, [&](Value c) {
          e.store(e.load(src, {srcRow, c}), out, {r, c});
        });
      },
      [&] {
        e.loop(0, cols, [&](Value c) { e.store(e.f32(0.0f), out, {r, c}); });
      });
}

// out[r, :] = src[idx[r], :], or zeros when idx[r] is outside [0, rows):
// embedding lookups (idx = token ids) and logits row gathers (idx = row
// indices, -1 for padding requests).
LogicalResult buildGatherRows(Emitter &e, ArrayRef<Value> v, Value lo,
                              Value hi) {
  Value src = v[0], idx = v[1], out = v[2];
  int64_t rows = dim(src, 0), cols = dim(src, 1);
  e.loop(lo, hi, [&](Value r) {
    Value i = e.load(idx, {r});
    Value valid = e.inRange(i, rows);
    // Clamp the index so the (unexecuted) load stays in bounds in IR terms.
    Value safe =
        e.builder().create<arith::SelectOp>(e.loc(), valid, i, e.i32(0));
    copyRowOrZero(e, valid, src, e.toIndex(safe), out, r, cols);
  });
  return success();
}

LogicalResult buildRmsNorm(Emitter &e, xg::RmsNormOp op, ArrayRef<Value> v,
                           Value lo, Value hi) {
  Value in = v[0], w = v[1], out = v[2];
  int64_t cols = dim(in, 1);
  float eps = static_cast<float>(op.getEps().convertToDouble());
  e.loop(lo, hi, [&](Value r) {
    Value sum = e.reduce(0, cols, e.f32(0.0f), [&](Value c, Value acc) {
      Value x = e.load(in, {r, c});
      return e.addReassoc(acc, e.mul(x, x));
    });
    Value mean = e.div(sum, e.f32(static_cast<float>(cols)));
    Value rstd = e.div(e.f32(1.0f), e.builder().create<math::SqrtOp>(
                                        e.loc(), e.add(mean, e.f32(eps))));
    e.loop(0, cols, [&](Value c) {
      Value x = e.load(in, {r, c});
      e.store(e.mul(e.load(w, {c}), e.mul(x, rstd)), out, {r, c});
    });
  });
  return success();
}

LogicalResult buildRope(Emitter &e, xg::RopeOp op, ArrayRef<Value> v, Value lo,
                        Value hi) {
  Value in = v[0], pos = v[1], invFreq = v[2], out = v[3];
  int64_t headDim = static_cast<int64_t>(op.getHeadDim());
  int64_t half = headDim / 2, heads = dim(in, 1) / headDim;
  e.loop(lo, hi, [&](Value r) {
    Value p = e.builder().create<arith::SIToFPOp>(
        e.loc(), e.builder().getF32Type(), e.load(pos, {r}));
    e.loop(0, half, [&](Value i) {
      Value angle = e.mul(p, e.load(invFreq, {i}));
      Value cos = e.builder().create<math::CosOp>(e.loc(), angle);
      Value sin = e.builder().create<math::SinOp>(e.loc(), angle);
      e.loop(0, heads, [&](Value h) {
        Value base =
            e.builder().create<arith::MulIOp>(e.loc(), h, e.index(headDim));
        Value c1 = e.builder().create<arith::AddIOp>(e.loc(), base, i);
        Value c2 =
            e.builder().create<arith::AddIOp>(e.loc(), c1, e.index(half));
        Value x1 = e.load(in, {r, c1}), x2 = e.load(in, {r, c2});
        e.store(e.sub(e.mul(x1, cos), e.mul(x2, sin)), out, {r, c1});
        e.store(e.add(e.mul(x2, cos), e.mul(x1, sin)), out, {r, c2});
      });
    });
  });
  return success();
}

LogicalResult buildSiluMul(Emitter &e, ArrayRef<Value> v, Value lo, Value hi) {
  Value gate = v[0], up = v[1], out = v[2];
  int64_t cols = dim(gate, 1);
  e.loop(lo, hi, [&](Value r) {
    e.loop(0, cols, [&](Value c) {
      Value g = e.load(gate, {r, c});
      Value negG = e.builder().create<arith::NegFOp>(e.loc(), g);
      Value sig = e.div(
          e.f32(1.0f),
          e.add(e.f32(1.0f), e.builder().create<math::ExpOp>(e.loc(), negG)));
      e.store(e.mul(e.mul(g, sig), e.load(up, {r, c})), out, {r, c});
    });
  });
  return success();
}

LogicalResult buildAdd(Emitter &e, ArrayRef<Value> v, Value lo, Value hi) {
  Value a = v[0], c = v[1], out = v[2];
  int64_t cols = dim(a, 1);
  e.loop(lo, hi, [&](Value r) {
    e.loop(0, cols, [&](Value col) {
      e.store(e.add(e.load(a, {r, col}), e.load(c, {r, col})), out, {r, col});
    });
  });
  return success();
}

} // namespace

bool isGeneratedDispatchOp(Operation *op) {
  return isa<xg::EmbeddingOp, xg::GatherRowsOp, xg::RmsNormOp, xg::RopeOp,
             xg::SiluMulOp, xg::AddOp>(op);
}

int64_t dispatchWorkgroups(Operation *op) {
  return cast<ShapedType>(op->getResult(0).getType()).getDimSize(0);
}

LogicalResult buildDispatchBody(OpBuilder &b, Operation *op,
                                ArrayRef<Value> views, Value wgBegin,
                                Value wgEnd) {
  Emitter e(b, op->getLoc());
  if (views.size() != op->getNumOperands() + op->getNumResults())
    return op->emitError()
           << "dispatch body needs one view per operand and result";
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<xg::EmbeddingOp, xg::GatherRowsOp>(
          [&](auto) { return buildGatherRows(e, views, wgBegin, wgEnd); })
      .Case<xg::RmsNormOp>(
          [&](auto o) { return buildRmsNorm(e, o, views, wgBegin, wgEnd); })
      .Case<xg::RopeOp>(
          [&](auto o) { return buildRope(e, o, views, wgBegin, wgEnd); })
      .Case<xg::SiluMulOp>(
          [&](auto) { return buildSiluMul(e, views, wgBegin, wgEnd); })
      .Case<xg::AddOp>([&](auto) { return buildAdd(e, views, wgBegin, wgEnd); })
      .Default([](Operation *o) {
        return o->emitError() << "no dispatch lowering for this op";
      });
}

} // namespace xcc

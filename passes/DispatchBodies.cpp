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

// Integer helpers on index values.
Value idxMul(Emitter &e, Value a, int64_t c) {
  return e.builder().create<arith::MulIOp>(e.loc(), a, e.index(c));
}
Value idxAdd(Emitter &e, Value a, Value c) {
  return e.builder().create<arith::AddIOp>(e.loc(), a, c);
}
Value idxDiv(Emitter &e, Value a, int64_t c) {
  return e.builder().create<arith::DivUIOp>(e.loc(), a, e.index(c));
}
Value idxRem(Emitter &e, Value a, int64_t c) {
  return e.builder().create<arith::RemUIOp>(e.loc(), a, e.index(c));
}

// A typed 1-D view of the flat bytes of a packed weight.
Value viewAs(Emitter &e, Value bytes, Type elementType, int64_t elementBytes) {
  int64_t n = cast<MemRefType>(bytes.getType()).getDimSize(0) / elementBytes;
  return e.builder().create<memref::ViewOp>(e.loc(),
                                            MemRefType::get({n}, elementType),
                                            bytes, e.index(0), ValueRange{});
}

// f32 value of f16 bits (an i16).
Value halfToF32(Emitter &e, Value bits) {
  OpBuilder &b = e.builder();
  Value h = b.create<arith::BitcastOp>(e.loc(), b.getF16Type(), bits);
  return b.create<arith::ExtFOp>(e.loc(), b.getF32Type(), h);
}

// f32 value of bfloat16 bits (an i16): the bits are the f32's upper half.
Value bf16ToF32(Emitter &e, Value bits) {
  OpBuilder &b = e.builder();
  Value wide = b.create<arith::ExtUIOp>(e.loc(), b.getI32Type(), bits);
  Value shifted = b.create<arith::ShLIOp>(
      e.loc(), wide,
      b.create<arith::ConstantOp>(e.loc(), b.getI32IntegerAttr(16)));
  return b.create<arith::BitcastOp>(e.loc(), b.getF32Type(), shifted);
}

// q5_0 / q5_1 / q5_k (xrt::HasFifthBits): bit 4 of each quant sits in 16
// bytes per quad of k-rows (xrt::K5HighByte / K5HighBit); q3_k's bit 2 the
// same way. The terms of a lane
// (column j) that do not depend on the k-row: the byte's offset in its k-row,
// 4 (j % 4), and the bit, 4 (j % 8 / 4) + 2 (j % 16 / 8) + j / 16, as an i8
// shift.
struct FifthBitLane {
  Value byte, shift;
};

FifthBitLane fifthBitLane(Emitter &e, Value lane) {
  OpBuilder &b = e.builder();
  Value twoHn = idxAdd(e, idxMul(e, idxDiv(e, idxRem(e, lane, 16), 8), 2),
                       idxDiv(e, lane, 16));
  Value bit = idxAdd(e, idxMul(e, idxDiv(e, idxRem(e, lane, 8), 4), 4), twoHn);
  return {idxMul(e, idxRem(e, lane, 4), 4),
          b.create<arith::IndexCastOp>(e.loc(), b.getI8Type(), bit)};
}

// The quant's bit 4 (q3_k: `toBit` 2) at k-row `row` of a group or
// super-block whose fifth bits start at byte `fifthBits`: byte 16 (row / 4) +
// row % 4 + the lane's, as an i8 0 or 1 << toBit.
Value fifthBit(Emitter &e, Value bytes, Value fifthBits, Value row,
               const FifthBitLane &lane, int64_t toBit = 4) {
  OpBuilder &b = e.builder();
  Location loc = e.loc();
  auto i8c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(v)).getResult();
  };
  Value at = idxAdd(
      e, fifthBits,
      idxAdd(e, idxAdd(e, idxMul(e, idxDiv(e, row, 4), 16), idxRem(e, row, 4)),
             lane.byte));
  Value bit = b.create<arith::AndIOp>(
      loc, b.create<arith::ShRUIOp>(loc, e.load(bytes, {at}), lane.shift),
      i8c(1));
  return b.create<arith::ShLIOp>(loc, bit, i8c(toBit));
}

// The f32 value of xrt::kIQ4Values[nibble] (`nibble` an i8 in 0..15): the
// table as two i64 constants of eight entries each, little-endian, one picked
// by bit 3 and shifted down by 8 (nibble % 8) bits.
Value iq4Value(Emitter &e, Value nibble) {
  OpBuilder &b = e.builder();
  Location loc = e.loc();
  auto i64c = [&](uint64_t v) {
    return b
        .create<arith::ConstantOp>(loc,
                                   b.getI64IntegerAttr(static_cast<int64_t>(v)))
        .getResult();
  };
  uint64_t words[2] = {0, 0};
  for (int i = 0; i < 16; ++i)
    words[i / 8] |=
        static_cast<uint64_t>(static_cast<uint8_t>(xrt::kIQ4Values[i]))
        << (8 * (i % 8));
  Value n = b.create<arith::ExtUIOp>(loc, b.getI64Type(), nibble);
  Value upper =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, n, i64c(8));
  Value word =
      b.create<arith::SelectOp>(loc, upper, i64c(words[1]), i64c(words[0]));
  Value shift = b.create<arith::MulIOp>(
      loc, b.create<arith::AndIOp>(loc, n, i64c(7)), i64c(8));
  Value entry = b.create<arith::TruncIOp>(
      loc, b.getI8Type(), b.create<arith::ShRUIOp>(loc, word, shift));
  return b.create<arith::SIToFPOp>(loc, b.getF32Type(), entry);
}

// Row `lane` of a K-quant table (q3_k, q4_k, q5_k, q6_k, iq4_xs; the panel at
// byte `panelBase`) into out[r, 0 .. cols): super-blocks of 256 k-rows, each
// value computed as the kernels do (weight_format.h): q4_k / q5_k (d * sc) * q
// - dmin * m, q6_k (d * sc) * (q - 32), q3_k (d * sc) * (q - 4), iq4_xs (d *
// sc) * xrt::kIQ4Values[q], the products d * sc, dmin * m and q4_k / q5_k's
// product with q exact in f32.
void gatherKQuantRow(Emitter &e, xrt::WeightFormat format, Value bytes,
                     Value i16s, Value panelBase, Value lane, int64_t cols,
                     Value out, Value r) {
  OpBuilder &b = e.builder();
  Location loc = e.loc();
  auto i8c = [&](int64_t v) {
    return b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(v)).getResult();
  };
  auto band = [&](Value x, int64_t m) {
    return b.create<arith::AndIOp>(loc, x, i8c(m)).getResult();
  };
  auto shr = [&](Value x, Value s) {
    return b.create<arith::ShRUIOp>(loc, x, s).getResult();
  };
  auto shl = [&](Value x, int64_t s) {
    return b.create<arith::ShLIOp>(loc, x, i8c(s)).getResult();
  };
  auto bor = [&](Value x, Value y) {
    return b.create<arith::OrIOp>(loc, x, y).getResult();
  };
  auto toF32 = [&](Value x) {
    return b.create<arith::UIToFPOp>(loc, b.getF32Type(), x).getResult();
  };
  auto at = [&](Value base, int64_t off) {
    return e.load(bytes, {idxAdd(e, base, e.index(off))});
  };
  const bool six = format == xrt::WeightFormat::kQ6_K;
  const bool five = format == xrt::WeightFormat::kQ5_K;
  const bool three = format == xrt::WeightFormat::kQ3_K;
  const bool int8Scales =
      xrt::HasKInt8Scales(format);             // q3_k, q6_k, iq4_xs: no min
  const bool table = xrt::HasIQ4Table(format); // iq4_xs
  const int64_t sbBytes = xrt::SuperBlockBytes(format);
  const int subRows = xrt::KSubBlockRows(format);
  const int64_t lowAt = xrt::KLowQuantsOffset(format);
  // Per lane (column j), the layout's terms that do not depend on the k-row
  // (weight_format.h): the low nibble at byte 64 (kk / 4) + 4 (j % 16) +
  // kk % 4 (xrt::QuadNibbleByte), high for j >= 16; q5_k's bit 4 as
  // fifthBitLane says; q6_k's field at byte 32 (kk / 4) + 4 (j % 8) + kk %
  // 4, shift xrt::K6HighShift(j). q3_k's low 2 bits at the nibble's byte of
  // quad pair kk / 8, shifted by 2 ((kk / 4) % 2) more (xrt::CrumbByte /
  // CrumbShift), and its bit 2 as q5_k's bit 4.
  Value nibbleByte = idxMul(e, idxRem(e, lane, 16), 4);
  Value high = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge, lane,
                                       e.index(16));
  Value nibbleShift = b.create<arith::SelectOp>(loc, high, i8c(4), i8c(0));
  Value fieldByte, fieldShift; // q6_k
  FifthBitLane fifth;          // q5_k, q3_k
  if (six) {
    fieldByte = idxMul(e, idxRem(e, lane, 8), 4);
    Value fieldIndex =
        idxAdd(e, idxMul(e, idxDiv(e, idxRem(e, lane, 16), 8), 2),
               idxDiv(e, lane, 16)); // 2h + n
    fieldShift = b.create<arith::IndexCastOp>(loc, b.getI8Type(),
                                              idxMul(e, fieldIndex, 2));
  } else if (five || three) {
    fifth = fifthBitLane(e, lane);
  }
  e.loop(0, cols / xrt::kSuperBlock, [&](Value sb) {
    Value base = idxAdd(e, panelBase, idxMul(e, sb, sbBytes));
    Value half = idxDiv(e, base, 2);
    Value d = halfToF32(e, e.load(i16s, {idxAdd(e, half, lane)}));
    Value dmin;
    if (!int8Scales)
      dmin = halfToF32(
          e, e.load(i16s,
                    {idxAdd(e, idxAdd(e, half, e.index(xrt::kKDminOffset / 2)),
                            lane)}));
    Value laneBase = idxAdd(e, base, lane);
    Value col0 = idxMul(e, sb, xrt::kSuperBlock);
    for (int s = 0; s < xrt::kSuperBlock / subRows; ++s) {
      Value mul, sub;
      if (int8Scales) {
        Value sc = at(laneBase, xrt::kK6ScalesOffset + s * 32);
        mul = e.mul(d, b.create<arith::SIToFPOp>(loc, b.getF32Type(), sc));
      } else {
        Value lo = at(laneBase, xrt::kKScaleLoOffset + s * 32);
        Value hi = shr(at(laneBase, xrt::kKScaleHiOffset + s / 2 * 32),
                       i8c(4 * (s % 2)));
        Value sc = bor(band(lo, 15), shl(band(hi, 3), 4));
        Value m = bor(shr(lo, i8c(4)), shl(band(shr(hi, i8c(2)), 3), 4));
        mul = e.mul(d, toF32(sc));
        sub = e.mul(dmin, toF32(m));
      }
      e.loop(0, subRows, [&](Value kk) {
        Value row = idxAdd(e, kk, e.index(s * subRows));
        // The k-row's quad and its row in the quad.
        Value quad = idxDiv(e, row, 4), inQuad = idxRem(e, row, 4);
        Value x, q;
        if (three) {
          Value pairBase = idxAdd(
              e, idxAdd(e, base, idxMul(e, idxDiv(e, row, 8), 64)), inQuad);
          Value pairShift = b.create<arith::IndexCastOp>(
              loc, b.getI8Type(), idxMul(e, idxRem(e, quad, 2), 2));
          Value crumbs =
              shr(shr(at(idxAdd(e, pairBase, nibbleByte), lowAt), nibbleShift),
                  pairShift);
          q = bor(band(crumbs, 3),
                  fifthBit(e, bytes,
                           idxAdd(e, base, e.index(xrt::kK3HighOffset)), row,
                           fifth, 2));
          x = e.mul(mul, e.sub(toF32(q), e.f32(4.0f)));
          e.store(x, out, {r, idxAdd(e, col0, row)});
          return;
        }
        Value rowBase = idxAdd(e, idxAdd(e, base, idxMul(e, quad, 64)), inQuad);
        q = band(shr(at(idxAdd(e, rowBase, nibbleByte), lowAt), nibbleShift),
                 15);
        if (six) {
          Value highBase =
              idxAdd(e, idxAdd(e, base, idxMul(e, quad, 32)), inQuad);
          q = bor(q, shl(band(shr(at(idxAdd(e, highBase, fieldByte),
                                     xrt::kK6HighOffset),
                                  fieldShift),
                              3),
                         4));
          x = e.mul(mul, e.sub(toF32(q), e.f32(32.0f)));
        } else if (table) {
          x = e.mul(mul, iq4Value(e, q));
        } else {
          if (five)
            q = bor(q, fifthBit(e, bytes,
                                idxAdd(e, base,
                                       e.index(xrt::FifthBitsOffset(format))),
                                row, fifth));
          x = e.sub(e.mul(mul, toF32(q)), sub);
        }
        e.store(x, out, {r, idxAdd(e, col0, row)});
      });
    }
  });
}

// Embedding lookup from a table in the packed layout of the matmul kernels
// (runtime/kernels/weight_format.h): row `id` of W [N][K] is column
// id % nr of panel id / nr. Each value is dequantized exactly as the matmul
// kernels do, so a tied table gives the same numbers to both.
LogicalResult buildGatherPacked(Emitter &e, xg::WeightOp table,
                                ArrayRef<Value> v, Value lo, Value hi) {
  Value bytes = v[0], idx = v[1], out = v[2];
  auto type = table.getType();
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t nr = *table.getPackNr();
  xrt::WeightFormat format = table.getWeightFormat();
  if (xrt::IsBf16PairsFormat(format)) // the compiler keeps tables plain bf16
    return table.emitError()
           << "an embedding table in " << xrt::WeightFormatName(format)
           << " is not supported";
  OpBuilder &b = e.builder();
  Location loc = e.loc();
  Value f32s, i16s;
  if (format == xrt::WeightFormat::kF32)
    f32s = viewAs(e, bytes, b.getF32Type(), 4);
  else
    i16s = viewAs(e, bytes, b.getI16Type(), 2);
  const int64_t panelBytes = xrt::PackedPanelBytes(format, cols);
  e.loop(lo, hi, [&](Value r) {
    Value i = e.load(idx, {r});
    Value valid = e.inRange(i, rows);
    e.ifElse(
        valid,
        [&] {
          Value id = e.toIndex(i);
          Value panel = idxDiv(e, id, nr);
          Value lane = idxRem(e, id, nr);
          switch (format) {
          case xrt::WeightFormat::kF32:
          case xrt::WeightFormat::kF16:
          case xrt::WeightFormat::kBF16: {
            // element (panel, k, lane) at (panel*K + k)*nr + lane
            Value base = idxAdd(e, idxMul(e, panel, cols * nr), lane);
            e.loop(0, cols, [&](Value c) {
              Value at = idxAdd(e, base, idxMul(e, c, nr));
              Value x;
              if (format == xrt::WeightFormat::kF32)
                x = e.load(f32s, {at});
              else if (format == xrt::WeightFormat::kF16)
                x = halfToF32(e, e.load(i16s, {at}));
              else
                x = bf16ToF32(e, e.load(i16s, {at}));
              e.store(x, out, {r, c});
            });
            return;
          }
          case xrt::WeightFormat::kQ3_K:
          case xrt::WeightFormat::kQ4_K:
          case xrt::WeightFormat::kQ5_K:
          case xrt::WeightFormat::kQ6_K:
          case xrt::WeightFormat::kIQ4_XS:
            gatherKQuantRow(e, format, bytes, i16s,
                            idxMul(e, panel, panelBytes), lane, cols, out, r);
            return;
          case xrt::WeightFormat::kQ8_0:
          case xrt::WeightFormat::kQ4_0:
          case xrt::WeightFormat::kQ4_1:
          case xrt::WeightFormat::kQ5_0:
          case xrt::WeightFormat::kQ5_1:
          case xrt::WeightFormat::kIQ4_NL:
            break;
          case xrt::WeightFormat::kBF16Pairs:
          case xrt::WeightFormat::kBF16PairsAmx:
            return; // rejected above
          }
          // Groups of 32 k-values: f16 scales [32], (q4_1, q5_1) f16 mins
          // [32], (q5) the fifth bits, 16 bytes per quad, then the quants:
          // q8_0 32 k-rows of 32 bytes, q4 / q5 / iq4_nl 8 quads of 64.
          const bool q8 = format == xrt::WeightFormat::kQ8_0;
          const bool five = xrt::HasFifthBits(format);
          const int64_t header = xrt::QuantGroupQuantsOffset(format);
          const int64_t groupBytes = xrt::QuantGroupBytes(format);
          Value panelBase = idxMul(e, panel, panelBytes);
          // q4 / q5 (xrt::QuadNibbleByte): byte 64 (kk / 4) + 4 (lane % 16)
          // + kk % 4, low nibble for lanes < 16; q5's bit 4 as fifthBitLane
          // says.
          Value byteInRow = lane, shift;
          FifthBitLane fifth;
          if (five)
            fifth = fifthBitLane(e, lane);
          if (!q8) {
            byteInRow = idxMul(e, idxRem(e, lane, 16), 4);
            Value high = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::uge,
                                                 lane, e.index(16));
            shift = b.create<arith::SelectOp>(
                loc, high,
                b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(4)),
                b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(0)));
          }
          e.loop(0, cols / 32, [&](Value g) {
            Value groupBase = idxAdd(e, panelBase, idxMul(e, g, groupBytes));
            Value half = idxDiv(e, groupBase, 2);
            Value scale = halfToF32(e, e.load(i16s, {idxAdd(e, half, lane)}));
            Value offset;
            if (xrt::HasGroupMin(format))
              offset = halfToF32(
                  e, e.load(i16s,
                            {idxAdd(e, idxAdd(e, half, e.index(32)), lane)}));
            else if (!q8 && !xrt::HasIQ4Table(format))
              offset = e.mul(scale, e.f32(-static_cast<float>(
                                        xrt::QuantGroupQuantOffset(format))));
            Value quants =
                idxAdd(e, idxAdd(e, groupBase, e.index(header)), byteInRow);
            Value col0 = idxMul(e, g, 32);
            e.loop(0, 32, [&](Value kk) {
              Value inGroup = q8 ? idxMul(e, kk, 32)
                                 : idxAdd(e, idxMul(e, idxDiv(e, kk, 4), 64),
                                          idxRem(e, kk, 4));
              Value byte = e.load(bytes, {idxAdd(e, quants, inGroup)});
              Value x;
              if (q8) {
                x = e.mul(scale,
                          b.create<arith::SIToFPOp>(loc, b.getF32Type(), byte));
              } else {
                Value nibble = b.create<arith::AndIOp>(
                    loc, b.create<arith::ShRUIOp>(loc, byte, shift),
                    b.create<arith::ConstantOp>(loc, b.getI8IntegerAttr(15)));
                if (five)
                  nibble = b.create<arith::OrIOp>(
                      loc, nibble,
                      fifthBit(e, bytes,
                               idxAdd(e, groupBase,
                                      e.index(xrt::FifthBitsOffset(format))),
                               kk, fifth));
                if (xrt::HasIQ4Table(format)) {
                  x = e.mul(scale, iq4Value(e, nibble));
                } else {
                  Value q =
                      b.create<arith::UIToFPOp>(loc, b.getF32Type(), nibble);
                  x = b.create<math::FmaOp>(loc, scale, q, offset);
                }
              }
              e.store(x, out, {r, idxAdd(e, col0, kk)});
            });
          });
        },
        [&] {
          e.loop(0, cols, [&](Value c) { e.store(e.f32(0.0f), out, {r, c}); });
        });
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

LogicalResult buildRopeCosSin(Emitter &e, ArrayRef<Value> v, Value lo,
                              Value hi) {
  Value pos = v[0], invFreq = v[1], out = v[2];
  int64_t half = dim(invFreq, 0);
  e.loop(lo, hi, [&](Value r) {
    Value p = e.builder().create<arith::SIToFPOp>(
        e.loc(), e.builder().getF32Type(), e.load(pos, {r}));
    e.loop(0, half, [&](Value i) {
      Value angle = e.mul(p, e.load(invFreq, {i}));
      e.store(e.builder().create<math::CosOp>(e.loc(), angle), out, {r, i});
      e.store(e.builder().create<math::SinOp>(e.loc(), angle), out,
              {r, idxAdd(e, i, e.index(half))});
    });
  });
  return success();
}

LogicalResult buildRope(Emitter &e, xg::RopeOp op, ArrayRef<Value> v, Value lo,
                        Value hi) {
  Value in = v[0], cosSin = v[1], out = v[2];
  int64_t headDim = static_cast<int64_t>(op.getHeadDim());
  int64_t half = headDim / 2, heads = dim(in, 1) / headDim;
  // Heads outside, i inside: the inner loop reads consecutive columns of the
  // row and of its cos / sin table row, which vectorizes.
  e.loop(lo, hi, [&](Value r) {
    e.loop(0, heads, [&](Value h) {
      Value c1Base = idxMul(e, h, headDim);
      e.loop(0, half, [&](Value i) {
        Value cos = e.load(cosSin, {r, i});
        Value sin = e.load(cosSin, {r, idxAdd(e, i, e.index(half))});
        Value c1 = idxAdd(e, c1Base, i);
        Value c2 = idxAdd(e, c1, e.index(half));
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

// Row r of the result is patch (py, px) of image n, r = (n * grid + py) * grid
// + px; column (c * p + ky) * p + kx is pixel (c, py * p + ky, px * p + kx).
LogicalResult buildPatchify(Emitter &e, xg::PatchifyOp op, ArrayRef<Value> v,
                            Value lo, Value hi) {
  Value px = v[0], out = v[1];
  int64_t channels = op.getChannels(), size = op.getImageSize(),
          p = op.getPatchSize(), grid = size / p;
  e.loop(lo, hi, [&](Value r) {
    Value n = idxDiv(e, r, grid * grid);
    Value inImage = idxRem(e, r, grid * grid);
    Value y0 = idxMul(e, idxDiv(e, inImage, grid), p);
    Value x0 = idxMul(e, idxRem(e, inImage, grid), p);
    e.loop(0, channels, [&](Value c) {
      e.loop(0, p, [&](Value ky) {
        // Source column of (c, y0 + ky, x0) and destination column of (c, ky,
        // 0).
        Value srcRow = idxAdd(e, idxMul(e, c, size * size),
                              idxMul(e, idxAdd(e, y0, ky), size));
        Value src0 = idxAdd(e, srcRow, x0);
        Value dst0 = idxMul(e, idxAdd(e, idxMul(e, c, p), ky), p);
        e.loop(0, p, [&](Value kx) {
          e.store(e.load(px, {n, idxAdd(e, src0, kx)}), out,
                  {r, idxAdd(e, dst0, kx)});
        });
      });
    });
  });
  return success();
}

LogicalResult buildVisionEmbed(Emitter &e, xg::VisionEmbedOp op,
                               ArrayRef<Value> v, Value lo, Value hi) {
  Value patches = v[0], pos = v[1];
  Value cls = op.getClassEmbedding() ? v[2] : Value();
  Value out = v.back();
  int64_t seq = dim(pos, 0), cols = dim(pos, 1);
  int64_t perImage = cls ? seq - 1 : seq;
  e.loop(lo, hi, [&](Value r) {
    Value n = idxDiv(e, r, seq), s = idxRem(e, r, seq);
    auto addPatch = [&](Value s) {
      // Patch row of position s (s >= 1 with a class row).
      Value patchRow = idxAdd(
          e, idxMul(e, n, perImage),
          cls ? e.builder().create<arith::SubIOp>(e.loc(), s, e.index(1)) : s);
      e.loop(0, cols, [&](Value c) {
        e.store(e.add(e.load(patches, {patchRow, c}), e.load(pos, {s, c})), out,
                {r, c});
      });
    };
    if (!cls) {
      addPatch(s);
      return;
    }
    Value isClass = e.builder().create<arith::CmpIOp>(
        e.loc(), arith::CmpIPredicate::eq, s, e.index(0));
    e.ifElse(
        isClass,
        [&] {
          e.loop(0, cols, [&](Value c) {
            e.store(e.add(e.load(cls, {c}), e.load(pos, {s, c})), out, {r, c});
          });
        },
        [&] { addPatch(s); });
  });
  return success();
}

LogicalResult buildLayerNorm(Emitter &e, xg::LayerNormOp op, ArrayRef<Value> v,
                             Value lo, Value hi) {
  Value in = v[0], w = v[1], bias = v[2], out = v[3];
  int64_t cols = dim(in, 1);
  float eps = static_cast<float>(op.getEps().convertToDouble());
  Value n = e.f32(static_cast<float>(cols));
  e.loop(lo, hi, [&](Value r) {
    Value sum = e.reduce(0, cols, e.f32(0.0f), [&](Value c, Value acc) {
      return e.addReassoc(acc, e.load(in, {r, c}));
    });
    Value mean = e.div(sum, n);
    Value sq = e.reduce(0, cols, e.f32(0.0f), [&](Value c, Value acc) {
      Value d = e.sub(e.load(in, {r, c}), mean);
      return e.addReassoc(acc, e.mul(d, d));
    });
    Value var = e.div(sq, n);
    Value rstd = e.div(e.f32(1.0f), e.builder().create<math::SqrtOp>(
                                        e.loc(), e.add(var, e.f32(eps))));
    e.loop(0, cols, [&](Value c) {
      Value d = e.mul(e.sub(e.load(in, {r, c}), mean), rstd);
      e.store(e.add(e.mul(d, e.load(w, {c})), e.load(bias, {c})), out, {r, c});
    });
  });
  return success();
}

LogicalResult buildGelu(Emitter &e, xg::GeluOp op, ArrayRef<Value> v, Value lo,
                        Value hi) {
  Value in = v[0], out = v[1];
  int64_t cols = dim(in, 1);
  StringRef approx = op.getApproximate();
  OpBuilder &b = e.builder();
  e.loop(lo, hi, [&](Value r) {
    e.loop(0, cols, [&](Value c) {
      Value x = e.load(in, {r, c});
      Value y;
      if (approx == "quick") {
        // x * sigmoid(1.702 x)
        Value neg = b.create<arith::NegFOp>(e.loc(), e.mul(x, e.f32(1.702f)));
        y = e.div(x, e.add(e.f32(1.0f), b.create<math::ExpOp>(e.loc(), neg)));
      } else if (approx == "tanh") {
        // x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
        Value x3 = e.mul(e.mul(x, x), x);
        Value inner = e.mul(e.f32(0.7978845608028654f),
                            e.add(x, e.mul(e.f32(0.044715f), x3)));
        Value t = b.create<math::TanhOp>(e.loc(), inner);
        y = e.mul(e.mul(e.f32(0.5f), x), e.add(e.f32(1.0f), t));
      } else {
        // x/2 * (1 + erf(x / sqrt(2)))
        Value t = b.create<math::ErfOp>(e.loc(),
                                        e.mul(x, e.f32(0.7071067811865476f)));
        y = e.mul(e.mul(e.f32(0.5f), x), e.add(e.f32(1.0f), t));
      }
      e.store(y, out, {r, c});
    });
  });
  return success();
}

LogicalResult buildSkipRows(Emitter &e, xg::SkipRowsOp op, ArrayRef<Value> v,
                            Value lo, Value hi) {
  Value in = v[0], out = v[1];
  int64_t group = op.getGroup(), skip = op.getSkip(), kept = group - skip,
          cols = dim(in, 1);
  e.loop(lo, hi, [&](Value r) {
    Value src = idxAdd(e, idxMul(e, idxDiv(e, r, kept), group),
                       idxAdd(e, idxRem(e, r, kept), e.index(skip)));
    e.loop(0, cols,
           [&](Value c) { e.store(e.load(in, {src, c}), out, {r, c}); });
  });
  return success();
}

// out[t] = cache[source[t]] for a source row inside the cache, else embeds[t].
LogicalResult buildMergeRows(Emitter &e, ArrayRef<Value> v, Value lo,
                             Value hi) {
  Value embeds = v[0], source = v[1], cache = v[2], out = v[3];
  int64_t rows = dim(cache, 0), cols = dim(cache, 1);
  e.loop(lo, hi, [&](Value t) {
    Value i = e.load(source, {t});
    Value valid = e.inRange(i, rows);
    Value safe =
        e.builder().create<arith::SelectOp>(e.loc(), valid, i, e.i32(0));
    Value row = e.toIndex(safe);
    e.ifElse(
        valid,
        [&] {
          e.loop(0, cols, [&](Value c) {
            e.store(e.load(cache, {row, c}), out, {t, c});
          });
        },
        [&] {
          e.loop(0, cols, [&](Value c) {
            e.store(e.load(embeds, {t, c}), out, {t, c});
          });
        });
  });
  return success();
}

// Concatenation of activations along columns (axis 1).
LogicalResult buildConcat(Emitter &e, xg::ConcatOp op, ArrayRef<Value> v,
                          Value lo, Value hi) {
  if (op.getAxis() != 1)
    return op.emitError() << "generated concat only joins columns (axis 1)";
  Value out = v.back();
  e.loop(lo, hi, [&](Value r) {
    int64_t offset = 0;
    for (Value in : v.drop_back()) {
      int64_t cols = dim(in, 1);
      e.loop(0, cols, [&](Value c) {
        e.store(e.load(in, {r, c}), out, {r, idxAdd(e, c, e.index(offset))});
      });
      offset += cols;
    }
  });
  return success();
}

} // namespace

bool isGeneratedDispatchOp(Operation *op) {
  return isa<xg::EmbeddingOp, xg::GatherRowsOp, xg::RmsNormOp, xg::RopeCosSinOp,
             xg::RopeOp, xg::SiluMulOp, xg::AddOp, xg::PatchifyOp,
             xg::VisionEmbedOp, xg::LayerNormOp, xg::GeluOp, xg::SkipRowsOp,
             xg::MergeRowsOp, xg::ConcatOp>(op);
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
      .Case<xg::EmbeddingOp>([&](xg::EmbeddingOp o) {
        auto table = o.getTable().getDefiningOp<xg::WeightOp>();
        if (table && table.getPackNr())
          return buildGatherPacked(e, table, views, wgBegin, wgEnd);
        return buildGatherRows(e, views, wgBegin, wgEnd);
      })
      .Case<xg::GatherRowsOp>(
          [&](auto) { return buildGatherRows(e, views, wgBegin, wgEnd); })
      .Case<xg::RmsNormOp>(
          [&](auto o) { return buildRmsNorm(e, o, views, wgBegin, wgEnd); })
      .Case<xg::RopeCosSinOp>(
          [&](auto) { return buildRopeCosSin(e, views, wgBegin, wgEnd); })
      .Case<xg::RopeOp>(
          [&](auto o) { return buildRope(e, o, views, wgBegin, wgEnd); })
      .Case<xg::SiluMulOp>(
          [&](auto) { return buildSiluMul(e, views, wgBegin, wgEnd); })
      .Case<xg::AddOp>([&](auto) { return buildAdd(e, views, wgBegin, wgEnd); })
      .Case<xg::PatchifyOp>(
          [&](auto o) { return buildPatchify(e, o, views, wgBegin, wgEnd); })
      .Case<xg::VisionEmbedOp>(
          [&](auto o) { return buildVisionEmbed(e, o, views, wgBegin, wgEnd); })
      .Case<xg::LayerNormOp>(
          [&](auto o) { return buildLayerNorm(e, o, views, wgBegin, wgEnd); })
      .Case<xg::GeluOp>(
          [&](auto o) { return buildGelu(e, o, views, wgBegin, wgEnd); })
      .Case<xg::SkipRowsOp>(
          [&](auto o) { return buildSkipRows(e, o, views, wgBegin, wgEnd); })
      .Case<xg::MergeRowsOp>(
          [&](auto) { return buildMergeRows(e, views, wgBegin, wgEnd); })
      .Case<xg::ConcatOp>(
          [&](auto o) { return buildConcat(e, o, views, wgBegin, wgEnd); })
      .Default([](Operation *o) {
        return o->emitError() << "no dispatch lowering for this op";
      });
}

} // namespace xcc

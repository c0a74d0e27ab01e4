//===- XGOps.cpp - shape rules and verifiers of xg ops --------------------===//
#include "dialects/XG/IR/XGOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace xcc::xg {
namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

// Merges two sizes that must agree: a static size wins over a dynamic one.
// Returns failure if both are static and differ.
FailureOr<int64_t> mergeDim(int64_t a, int64_t b) {
  if (a == kDyn)
    return b;
  if (b == kDyn || a == b)
    return a;
  return failure();
}

std::string dimStr(int64_t d) { return d == kDyn ? "?" : std::to_string(d); }

LogicalResult expectRank(std::optional<Location> loc, Value v, int64_t rank,
                         StringRef what) {
  auto t = cast<RankedTensorType>(v.getType());
  if (t.getRank() != rank)
    return emitOptionalError(loc, what, " must have rank ", rank, ", got ", t);
  return success();
}

LogicalResult expectDim(std::optional<Location> loc, int64_t actual,
                        int64_t expected, StringRef what) {
  if (failed(mergeDim(actual, expected)))
    return emitOptionalError(loc, what, " is ", dimStr(actual), ", expected ",
                             dimStr(expected));
  return success();
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

} // namespace

//===----------------------------------------------------------------------===//
// WeightOp
//===----------------------------------------------------------------------===//

SmallVector<StringRef> WeightOp::getSourceNames() {
  SmallVector<StringRef> out;
  if (auto sources = getSources()) {
    for (Attribute a : *sources)
      out.push_back(cast<StringAttr>(a).getValue());
  } else {
    out.push_back(getName());
  }
  return out;
}

LogicalResult WeightOp::verify() {
  auto type = getResult().getType();
  if (!type.hasStaticShape())
    return emitOpError() << "weight '" << getName()
                         << "' must have a static shape, got " << type;
  if (getName().empty())
    return emitOpError() << "weight name must not be empty";
  if (auto nr = getPackNr()) {
    if (*nr <= 0)
      return emitOpError() << "pack_nr must be positive, got " << *nr;
    if (type.getRank() != 2)
      return emitOpError() << "only rank-2 weights can be packed, got " << type;
  }
  if (auto sources = getSources()) {
    if (sources->empty())
      return emitOpError() << "sources must not be empty";
  }
  if (auto format = getFormat()) {
    xrt::WeightFormat f;
    if (!xrt::WeightFormatFromName(format->str(), &f))
      return emitOpError() << "unknown weight format '" << *format << "'";
    int block = xrt::WeightFormatBlockSize(f);
    if (f != xrt::WeightFormat::kF32 &&
        (type.getRank() != 2 || type.getDimSize(1) % block != 0))
      return emitOpError() << "a " << *format
                           << " weight must be [N, K] with K a multiple of "
                           << block << ", got " << type;
  }
  return success();
}

xrt::WeightFormat WeightOp::getWeightFormat() {
  xrt::WeightFormat f = xrt::WeightFormat::kF32;
  if (auto format = getFormat())
    xrt::WeightFormatFromName(format->str(), &f);
  return f;
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "concat needs at least one input");
  auto first = cast<RankedTensorType>(inputs.front().getType());
  int64_t rank = first.getRank();
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "axis ", axis, " out of range for rank ",
                             rank);
  SmallVector<int64_t> shape(first.getShape());
  for (Value in : inputs.drop_front()) {
    auto t = cast<RankedTensorType>(in.getType());
    if (t.getRank() != rank)
      return emitOptionalError(loc, "all inputs must have rank ", rank,
                               ", got ", t);
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis) {
        shape[d] = (shape[d] == kDyn || t.getDimSize(d) == kDyn)
                       ? kDyn
                       : shape[d] + t.getDimSize(d);
        continue;
      }
      auto merged = mergeDim(shape[d], t.getDimSize(d));
      if (failed(merged))
        return emitOptionalError(loc, "inputs disagree on dimension ", d, ": ",
                                 dimStr(shape[d]), " vs ",
                                 dimStr(t.getDimSize(d)));
      shape[d] = *merged;
    }
  }
  inferred.push_back(tensorOf(shape, first.getElementType()));
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().size() < 2)
    return emitOpError() << "needs at least two inputs";
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getTable(), 2, "table")) ||
      failed(expectRank(loc, adaptor.getIds(), 1, "ids")))
    return failure();
  auto table = cast<RankedTensorType>(adaptor.getTable().getType());
  inferred.push_back(
      tensorOf({shapeOf(adaptor.getIds())[0], table.getDimSize(1)},
               table.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// RmsNormOp
//===----------------------------------------------------------------------===//

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getWeight(), 1, "weight")))
    return failure();
  auto in = shapeOf(adaptor.getInput());
  if (failed(expectDim(loc, shapeOf(adaptor.getWeight())[0], in[1],
                       "weight size")))
    return failure();
  if (adaptor.getEps().convertToDouble() <= 0.0)
    return emitOptionalError(loc, "eps must be positive");
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getWeight(), 2, "weight")))
    return failure();
  auto in = shapeOf(adaptor.getInput());
  auto w = shapeOf(adaptor.getWeight());
  if (failed(expectDim(loc, w[1], in[1], "weight input features")))
    return failure();
  SmallVector<int64_t> out = {in[0], w[0]};
  if (Value bias = adaptor.getBias()) {
    if (failed(expectRank(loc, bias, 1, "bias")) ||
        failed(expectDim(loc, shapeOf(bias)[0], w[0], "bias size")))
      return failure();
  }
  if (Value acc = adaptor.getAccumulator()) {
    if (failed(expectRank(loc, acc, 2, "accumulator")))
      return failure();
    auto a = shapeOf(acc);
    auto rows = mergeDim(a[0], out[0]);
    if (failed(rows) || failed(mergeDim(a[1], out[1])))
      return emitOptionalError(loc, "accumulator shape ", dimStr(a[0]), "x",
                               dimStr(a[1]), " does not match the result ",
                               dimStr(out[0]), "x", dimStr(out[1]));
    out[0] = *rows;
  }
  inferred.push_back(tensorOf(
      out,
      cast<RankedTensorType>(adaptor.getInput().getType()).getElementType()));
  return success();
}

LogicalResult LinearOp::verify() {
  auto w = getWeight().getType();
  if (!w.hasStaticShape())
    return emitOpError() << "weight must have a static shape, got " << w;
  return success();
}

//===----------------------------------------------------------------------===//
// SplitOp
//===----------------------------------------------------------------------===//

LogicalResult SplitOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")))
    return failure();
  auto in = shapeOf(adaptor.getInput());
  ArrayRef<int64_t> sizes = adaptor.getSizes();
  if (sizes.empty())
    return emitOptionalError(loc, "sizes must not be empty");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s <= 0)
      return emitOptionalError(loc, "split sizes must be positive, got ", s);
    total += s;
  }
  if (failed(expectDim(loc, in[1], total, "input columns (sum of sizes)")))
    return failure();
  auto elementType =
      cast<RankedTensorType>(adaptor.getInput().getType()).getElementType();
  for (int64_t s : sizes)
    inferred.push_back(tensorOf({in[0], s}, elementType));
  return success();
}

//===----------------------------------------------------------------------===//
// RopeCosSinOp
//===----------------------------------------------------------------------===//

LogicalResult RopeCosSinOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getPositions(), 1, "positions")) ||
      failed(expectRank(loc, adaptor.getInvFreq(), 1, "inv_freq")))
    return failure();
  int64_t half = shapeOf(adaptor.getInvFreq())[0];
  if (half == kDyn || half <= 0)
    return emitOptionalError(loc, "inv_freq must have a static positive size");
  auto elementType =
      cast<RankedTensorType>(adaptor.getInvFreq().getType()).getElementType();
  inferred.push_back(
      tensorOf({shapeOf(adaptor.getPositions())[0], 2 * half}, elementType));
  return success();
}

//===----------------------------------------------------------------------===//
// RopeOp
//===----------------------------------------------------------------------===//

LogicalResult RopeOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getCosSin(), 2, "cos_sin")))
    return failure();
  int64_t hd = adaptor.getHeadDim();
  auto in = shapeOf(adaptor.getInput());
  if (hd <= 0 || hd % 2 != 0)
    return emitOptionalError(loc, "head_dim must be positive and even, got ",
                             hd);
  if (in[1] != kDyn && in[1] % hd != 0)
    return emitOptionalError(loc, "input columns ", in[1],
                             " are not a multiple of head_dim ", hd);
  auto cs = shapeOf(adaptor.getCosSin());
  if (failed(expectDim(loc, cs[0], in[0], "cos_sin rows")) ||
      failed(expectDim(loc, cs[1], hd, "cos_sin columns")))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// PagedAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult
PagedAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                   Adaptor adaptor,
                                   SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getQ(), 2, "q")) ||
      failed(expectRank(loc, adaptor.getK(), 2, "k")) ||
      failed(expectRank(loc, adaptor.getV(), 2, "v")))
    return failure();
  if (failed(expectRank(loc, adaptor.getSlotMapping(), 1, "slot_mapping")) ||
      failed(expectRank(loc, adaptor.getBlockTables(), 2, "block_tables")) ||
      failed(expectRank(loc, adaptor.getSeqLens(), 1, "seq_lens")) ||
      failed(expectRank(loc, adaptor.getQueryStartLoc(), 1, "query_start_loc")))
    return failure();
  int64_t h = adaptor.getNumHeads(), kvh = adaptor.getNumKvHeads(),
          hd = adaptor.getHeadDim();
  if (h <= 0 || kvh <= 0 || hd <= 0 || h % kvh != 0)
    return emitOptionalError(loc, "num_heads (", h,
                             ") must be a positive multiple of num_kv_heads (",
                             kvh, ") and head_dim (", hd, ") positive");
  auto q = shapeOf(adaptor.getQ()), k = shapeOf(adaptor.getK()),
       v = shapeOf(adaptor.getV());
  if (failed(expectDim(loc, q[1], h * hd, "q columns")) ||
      failed(expectDim(loc, k[1], kvh * hd, "k columns")) ||
      failed(expectDim(loc, v[1], kvh * hd, "v columns")) ||
      failed(expectDim(loc, k[0], q[0], "k rows")) ||
      failed(expectDim(loc, v[0], q[0], "v rows")) ||
      failed(expectDim(loc, shapeOf(adaptor.getSlotMapping())[0], q[0],
                       "slot_mapping size")))
    return failure();
  int64_t reqs = shapeOf(adaptor.getBlockTables())[0];
  if (failed(expectDim(loc, shapeOf(adaptor.getSeqLens())[0], reqs,
                       "seq_lens size")) ||
      failed(expectDim(loc, shapeOf(adaptor.getQueryStartLoc())[0],
                       reqs == kDyn ? kDyn : reqs + 1, "query_start_loc size")))
    return failure();
  inferred.push_back(adaptor.getQ().getType());
  return success();
}

LogicalResult PagedAttentionOp::verify() {
  if (getLayerAttr().getInt() < 0)
    return emitOpError() << "layer must be non-negative, got "
                         << getLayerAttr().getInt();
  if (!(getScale().convertToFloat() > 0.0f))
    return emitOpError() << "scale must be positive";
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise and gather
//===----------------------------------------------------------------------===//

static LogicalResult inferElementwise(std::optional<Location> loc, Value a,
                                      Value b,
                                      SmallVectorImpl<Type> &inferred) {
  auto ta = cast<RankedTensorType>(a.getType());
  auto tb = cast<RankedTensorType>(b.getType());
  if (ta.getRank() != tb.getRank())
    return emitOptionalError(loc, "operands must have the same rank, got ", ta,
                             " and ", tb);
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < ta.getRank(); ++d) {
    auto m = mergeDim(ta.getDimSize(d), tb.getDimSize(d));
    if (failed(m))
      return emitOptionalError(loc, "operand shapes differ: ", ta, " vs ", tb);
    shape.push_back(*m);
  }
  inferred.push_back(tensorOf(shape, ta.getElementType()));
  return success();
}

LogicalResult SiluMulOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, adaptor.getGate(), adaptor.getUp(), inferred);
}

LogicalResult AddOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  return inferElementwise(loc, adaptor.getLhs(), adaptor.getRhs(), inferred);
}

LogicalResult GatherRowsOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getIndices(), 1, "indices")))
    return failure();
  auto in = cast<RankedTensorType>(adaptor.getInput().getType());
  inferred.push_back(
      tensorOf({shapeOf(adaptor.getIndices())[0], in.getDimSize(1)},
               in.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Vision encoder ops
//===----------------------------------------------------------------------===//

namespace {

// `rows` split into groups of `group`: the number of groups, or failure.
FailureOr<int64_t> groupsOf(std::optional<Location> loc, int64_t rows,
                            int64_t group, StringRef what) {
  if (group <= 0)
    return emitOptionalError(loc, what, " must be positive, got ", group);
  if (rows == kDyn)
    return kDyn;
  if (rows % group != 0)
    return emitOptionalError(loc, "rows (", rows, ") are not a multiple of ",
                             what, " (", group, ")");
  return rows / group;
}

int64_t mulDyn(int64_t a, int64_t b) { return a == kDyn ? kDyn : a * b; }

} // namespace

LogicalResult PatchifyOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getPixels(), 2, "pixels")))
    return failure();
  int64_t c = adaptor.getChannels(), size = adaptor.getImageSize(),
          p = adaptor.getPatchSize();
  if (c <= 0 || size <= 0 || p <= 0 || size % p != 0)
    return emitOptionalError(loc, "channels (", c, "), image_size (", size,
                             ") and patch_size (", p,
                             ") must be positive, image_size a multiple of "
                             "patch_size");
  auto px = shapeOf(adaptor.getPixels());
  if (failed(expectDim(loc, px[1], c * size * size, "pixels columns")))
    return failure();
  int64_t grid = size / p;
  inferred.push_back(tensorOf(
      {mulDyn(px[0], grid * grid), c * p * p},
      cast<RankedTensorType>(adaptor.getPixels().getType()).getElementType()));
  return success();
}

LogicalResult VisionEmbedOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getPatches(), 2, "patches")) ||
      failed(expectRank(loc, adaptor.getPositions(), 2, "positions")))
    return failure();
  auto patches = shapeOf(adaptor.getPatches());
  auto pos = shapeOf(adaptor.getPositions());
  if (pos[0] == kDyn)
    return emitOptionalError(loc, "positions must have a static row count");
  if (failed(expectDim(loc, pos[1], patches[1], "positions columns")))
    return failure();
  int64_t perImage = pos[0];
  if (Value cls = adaptor.getClassEmbedding()) {
    if (failed(expectRank(loc, cls, 1, "class_embedding")) ||
        failed(expectDim(loc, shapeOf(cls)[0], patches[1],
                         "class_embedding size")))
      return failure();
    perImage -= 1;
  }
  auto images = groupsOf(loc, patches[0], perImage, "patches per image");
  if (failed(images))
    return failure();
  inferred.push_back(tensorOf(
      {mulDyn(*images, pos[0]), patches[1]},
      cast<RankedTensorType>(adaptor.getPatches().getType()).getElementType()));
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getWeight(), 1, "weight")) ||
      failed(expectRank(loc, adaptor.getBias(), 1, "bias")))
    return failure();
  auto in = shapeOf(adaptor.getInput());
  if (failed(expectDim(loc, shapeOf(adaptor.getWeight())[0], in[1],
                       "weight size")) ||
      failed(expectDim(loc, shapeOf(adaptor.getBias())[0], in[1], "bias size")))
    return failure();
  if (adaptor.getEps().convertToDouble() <= 0.0)
    return emitOptionalError(loc, "eps must be positive");
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult GeluOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult GeluOp::verify() {
  StringRef a = getApproximate();
  if (a != "none" && a != "tanh" && a != "quick")
    return emitOpError() << "approximate must be \"none\", \"tanh\" or "
                            "\"quick\", got \""
                         << a << "\"";
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getQ(), 2, "q")) ||
      failed(expectRank(loc, adaptor.getK(), 2, "k")) ||
      failed(expectRank(loc, adaptor.getV(), 2, "v")))
    return failure();
  int64_t h = adaptor.getNumHeads(), hd = adaptor.getHeadDim();
  if (h <= 0 || hd <= 0)
    return emitOptionalError(loc, "num_heads (", h, ") and head_dim (", hd,
                             ") must be positive");
  if (!(adaptor.getScale().convertToFloat() > 0.0f))
    return emitOptionalError(loc, "scale must be positive");
  auto q = shapeOf(adaptor.getQ()), k = shapeOf(adaptor.getK()),
       v = shapeOf(adaptor.getV());
  for (auto [shape, what] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}}) {
    if (failed(expectDim(loc, shape[1], h * hd,
                         (Twine(what) + " columns").str())) ||
        failed(expectDim(loc, shape[0], q[0], (Twine(what) + " rows").str())))
      return failure();
  }
  if (failed(groupsOf(loc, q[0], adaptor.getSeqLen(), "seq_len")))
    return failure();
  inferred.push_back(adaptor.getQ().getType());
  return success();
}

LogicalResult SkipRowsOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")))
    return failure();
  int64_t group = adaptor.getGroup(), skip = adaptor.getSkip();
  if (skip < 0 || skip >= group)
    return emitOptionalError(loc, "skip (", skip, ") must be in [0, group (",
                             group, "))");
  auto in = shapeOf(adaptor.getInput());
  auto groups = groupsOf(loc, in[0], group, "group");
  if (failed(groups))
    return failure();
  inferred.push_back(tensorOf(
      {mulDyn(*groups, group - skip), in[1]},
      cast<RankedTensorType>(adaptor.getInput().getType()).getElementType()));
  return success();
}

LogicalResult EncoderCacheOp::verify() {
  auto type = getResult().getType();
  if (!type.hasStaticShape() || type.getRank() != 2)
    return emitOpError() << "the encoder cache must be a static rank-2 tensor, "
                            "got "
                         << type;
  return success();
}

LogicalResult MergeRowsOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getEmbeds(), 2, "embeds")) ||
      failed(expectRank(loc, adaptor.getSource(), 1, "source")) ||
      failed(expectRank(loc, adaptor.getCache(), 2, "cache")))
    return failure();
  auto emb = shapeOf(adaptor.getEmbeds());
  if (failed(expectDim(loc, shapeOf(adaptor.getSource())[0], emb[0],
                       "source size")) ||
      failed(expectDim(loc, shapeOf(adaptor.getCache())[1], emb[1],
                       "cache columns")))
    return failure();
  inferred.push_back(adaptor.getEmbeds().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Multi-LoRA
//===----------------------------------------------------------------------===//

LogicalResult LoraSlotsOp::verify() {
  auto type = getResult().getType();
  if (!type.hasStaticShape() || type.getRank() != 3)
    return emitOpError() << "adapter slots must be a static rank-3 tensor "
                            "[num_slots, rank, features], got "
                         << type;
  if (getMatrix() != "a" && getMatrix() != "b")
    return emitOpError() << "matrix must be \"a\" or \"b\", got \""
                         << getMatrix() << "\"";
  if (getTarget().empty())
    return emitOpError() << "needs a target module";
  return success();
}

// The adapter slots `slots` of a LoRA op, when produced by xg.lora_slots.
static LoraSlotsOp slotsOp(Value v) { return v.getDefiningOp<LoraSlotsOp>(); }

LogicalResult LoraShrinkOp::inferReturnTypes(MLIRContext *ctx,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getA(), 3, "a")) ||
      failed(expectRank(loc, adaptor.getSlots(), 1, "slots")))
    return failure();
  auto x = shapeOf(adaptor.getInput());
  auto a = shapeOf(adaptor.getA());
  if (failed(expectDim(loc, a[2], x[1], "a features")) ||
      failed(
          expectDim(loc, shapeOf(adaptor.getSlots())[0], x[0], "slots size")))
    return failure();
  inferred.push_back(
      RankedTensorType::get({x[0], a[1]}, Float32Type::get(ctx)));
  return success();
}

LogicalResult LoraShrinkOp::verify() {
  if (auto a = slotsOp(getA()); a && a.getMatrix() != "a")
    return emitOpError() << "reads the \"" << a.getMatrix() << "\" slots of '"
                         << a.getTarget() << "', expected \"a\"";
  return success();
}

LogicalResult LoraExpandOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  if (failed(expectRank(loc, adaptor.getInput(), 2, "input")) ||
      failed(expectRank(loc, adaptor.getShrunk(), 2, "shrunk")) ||
      failed(expectRank(loc, adaptor.getBt(), 3, "bt")) ||
      failed(expectRank(loc, adaptor.getSlots(), 1, "slots")))
    return failure();
  auto y = shapeOf(adaptor.getInput());
  auto s = shapeOf(adaptor.getShrunk());
  auto bt = shapeOf(adaptor.getBt());
  if (failed(expectDim(loc, s[0], y[0], "shrunk rows")) ||
      failed(expectDim(loc, bt[1], s[1], "bt rank")) ||
      failed(expectDim(loc, bt[2], y[1], "bt features")) ||
      failed(
          expectDim(loc, shapeOf(adaptor.getSlots())[0], y[0], "slots size")))
    return failure();
  inferred.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult LoraExpandOp::verify() {
  if (auto b = slotsOp(getBt()); b && b.getMatrix() != "b")
    return emitOpError() << "reads the \"" << b.getMatrix() << "\" slots of '"
                         << b.getTarget() << "', expected \"b\"";
  return success();
}

} // namespace xcc::xg

#define GET_OP_CLASSES
#include "dialects/XG/IR/XGOps.cpp.inc"

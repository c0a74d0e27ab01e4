#include "compiler/model_builder.h"

#include <cmath>

#include "compiler/frontend/hf_config.h"
#include "dialects/XG/IR/XGOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "schemas/artifact_generated.h"

using namespace mlir;

namespace xcc {
namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

class DecoderBuilder {
 public:
  DecoderBuilder(MLIRContext* ctx, const DecoderConfig& c, const DecoderBuildOptions& o)
      : ctx_(ctx), b_(ctx), c_(c), o_(o), loc_(UnknownLoc::get(ctx)) {}

  OwningOpRef<ModuleOp> Build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
    b_.setInsertionPointToEnd(module->getBody());
    BuildStep();
    b_.setInsertionPointToEnd(module->getBody());
    BuildLogits();
    if (o_.vision) {
      b_.setInsertionPointToEnd(module->getBody());
      BuildVisionEncode(*o_.vision);
    }
    return module;
  }

 private:
  Type f32() { return b_.getF32Type(); }
  Type i32() { return b_.getI32Type(); }
  RankedTensorType T(ArrayRef<int64_t> shape, Type e) { return RankedTensorType::get(shape, e); }

  Value Weight(const std::string& name, ArrayRef<int64_t> shape) {
    return b_.create<xg::WeightOp>(NameLoc(name), T(shape, f32()), b_.getStringAttr(name), nullptr,
                                   nullptr, nullptr);
  }
  Location NameLoc(const std::string& name) { return mlir::NameLoc::get(b_.getStringAttr(name)); }
  std::string L(int64_t i, const char* rest) {
    return "model.layers." + std::to_string(i) + "." + rest;
  }

  Value Linear(Value x, const std::string& prefix, int64_t n, int64_t k, bool bias) {
    Value w = Weight(prefix + ".weight", {n, k});
    Value bv = bias ? Weight(prefix + ".bias", {n}) : Value();
    return b_.create<xg::LinearOp>(NameLoc(prefix), x, w, bv, Value());
  }

  Value RmsNorm(Value x, const std::string& weight) {
    return b_.create<xg::RmsNormOp>(NameLoc(weight), x, Weight(weight, {c_.hidden_size}),
                                    b_.getF64FloatAttr(c_.rms_norm_eps));
  }

  // A func.func entry with named, partly symbolic arguments, named after the
  // kind of executable it becomes (the emitter reads the kind back from it).
  struct Arg {
    const char* name;
    SmallVector<int64_t> shape;
    Type type;
    const char* symbolic;  // name of the bucket parameter bound to dim 0, or ""
  };
  func::FuncOp Entry(xpk::ExecutableKind kind, const char* param, ArrayRef<Arg> args,
                     const char* result_name) {
    SmallVector<Type> types;
    for (const Arg& a : args) types.push_back(T(a.shape, a.type));
    auto fn = b_.create<func::FuncOp>(loc_, xpk::EnumNameExecutableKind(kind),
                                      FunctionType::get(ctx_, types, {}));
    fn->setAttr(xg::kEntryAttr, b_.getUnitAttr());
    fn->setAttr(xg::kBucketParamAttr, b_.getStringAttr(param));
    for (auto [i, a] : llvm::enumerate(args)) {
      fn.setArgAttr(i, xg::kNameAttr, b_.getStringAttr(a.name));
      SmallVector<Attribute> dims(a.shape.size(), b_.getStringAttr(""));
      if (*a.symbolic) dims[0] = b_.getStringAttr(a.symbolic);
      fn.setArgAttr(i, xg::kSymbolicDimsAttr, b_.getArrayAttr(dims));
    }
    result_name_ = result_name;
    b_.setInsertionPointToStart(fn.addEntryBlock());
    return fn;
  }
  void Return(func::FuncOp fn, Value v) {
    b_.create<func::ReturnOp>(loc_, v);
    fn.setFunctionType(FunctionType::get(ctx_, fn.getArgumentTypes(), {v.getType()}));
    fn.setResultAttr(0, xg::kNameAttr, b_.getStringAttr(result_name_));
  }

  void BuildStep() {
    const int64_t D = c_.hidden_size, H = c_.num_attention_heads, KV = c_.num_key_value_heads,
                  hd = c_.head_dim, F = c_.intermediate_size, R = o_.max_num_reqs,
                  B = o_.max_blocks_per_req;
    func::FuncOp fn = Entry(xpk::ExecutableKind::lm_step, "num_tokens",
                            {{"token_ids", {kDyn}, i32(), "num_tokens"},
                             {"positions", {kDyn}, i32(), "num_tokens"},
                             {"slot_mapping", {kDyn}, i32(), "num_tokens"},
                             {"block_tables", {R, B}, i32(), ""},
                             {"seq_lens", {R}, i32(), ""},
                             {"query_start_loc", {R + 1}, i32(), ""},
                             {"embed_source", {kDyn}, i32(), "num_tokens"},
                             {"lora_slot", {kDyn}, i32(), "num_tokens"}},
                            "hidden_states");
    Value ids = fn.getArgument(0), pos = fn.getArgument(1), slots = fn.getArgument(2),
          tables = fn.getArgument(3), lens = fn.getArgument(4), qsl = fn.getArgument(5);

    Value x =
        b_.create<xg::EmbeddingOp>(NameLoc("model.embed_tokens"),
                                   Weight("model.embed_tokens.weight", {c_.vocab_size, D}), ids);
    if (o_.vision) {
      // Image placeholder tokens take their feature row from the encoder cache.
      Value cache = b_.create<xg::EncoderCacheOp>(NameLoc("encoder_cache"),
                                                  T({o_.encoder_cache_rows, D}, f32()));
      x = b_.create<xg::MergeRowsOp>(NameLoc("merge_image_rows"), x, fn.getArgument(6), cache);
    }
    // The rotary angles depend on the position only: their cosines and sines
    // are computed once per step for every layer's q and k.
    Value cos_sin = b_.create<xg::RopeCosSinOp>(NameLoc("rope_cos_sin"), pos,
                                                Weight(kRopeInvFreqWeight, {hd / 2}));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      Value h = RmsNorm(x, L(l, "input_layernorm.weight"));
      Value q = Linear(h, L(l, "self_attn.q_proj"), H * hd, D, c_.attention_bias);
      Value k = Linear(h, L(l, "self_attn.k_proj"), KV * hd, D, c_.attention_bias);
      Value v = Linear(h, L(l, "self_attn.v_proj"), KV * hd, D, c_.attention_bias);
      auto hd_attr = b_.getI64IntegerAttr(hd);
      q = b_.create<xg::RopeOp>(NameLoc(L(l, "rope_q")), q, cos_sin, hd_attr);
      k = b_.create<xg::RopeOp>(NameLoc(L(l, "rope_k")), k, cos_sin, hd_attr);
      Value o = b_.create<xg::PagedAttentionOp>(
          NameLoc(L(l, "self_attn")), q, k, v, slots, tables, lens, qsl, b_.getI64IntegerAttr(l),
          b_.getI64IntegerAttr(H), b_.getI64IntegerAttr(KV), hd_attr, b_.getF32FloatAttr(scale));
      Value attn_out = Linear(o, L(l, "self_attn.o_proj"), D, H * hd, c_.attention_output_bias);
      x = b_.create<xg::AddOp>(NameLoc(L(l, "residual_attn")), x, attn_out);
      h = RmsNorm(x, L(l, "post_attention_layernorm.weight"));
      Value gate = Linear(h, L(l, "mlp.gate_proj"), F, D, false);
      Value up = Linear(h, L(l, "mlp.up_proj"), F, D, false);
      Value act = b_.create<xg::SiluMulOp>(NameLoc(L(l, "mlp.act")), gate, up);
      Value down = Linear(act, L(l, "mlp.down_proj"), D, F, false);
      x = b_.create<xg::AddOp>(NameLoc(L(l, "residual_mlp")), x, down);
    }
    Return(fn, x);
  }

  void BuildLogits() {
    const int64_t D = c_.hidden_size;
    func::FuncOp fn = Entry(xpk::ExecutableKind::lm_logits, "num_reqs",
                            {{"hidden_states", {o_.max_token_bucket, D}, f32(), ""},
                             {"logits_indices", {kDyn}, i32(), "num_reqs"}},
                            "logits");
    Value rows =
        b_.create<xg::GatherRowsOp>(NameLoc("logits_gather"), fn.getArgument(0), fn.getArgument(1));
    Value h = RmsNorm(rows, "model.norm.weight");
    std::string head = c_.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
    Value logits = Linear(h, head, c_.vocab_size, D, false);
    Return(fn, logits);
  }

  Value LayerNorm(Value x, const std::string& prefix, int64_t n, double eps) {
    return b_.create<xg::LayerNormOp>(NameLoc(prefix), x, Weight(prefix + ".weight", {n}),
                                      Weight(prefix + ".bias", {n}), b_.getF64FloatAttr(eps));
  }
  Value Gelu(Value x, const std::string& name, const std::string& act) {
    return b_.create<xg::GeluOp>(NameLoc(name), x, b_.getStringAttr(GeluApproximation(act)));
  }

  // The vision tower (CLIP / SigLIP) up to the deepest selected hidden state,
  // the feature selection and the projector, over num_images images.
  void BuildVisionEncode(const VisionConfig& v) {
    const int64_t D = v.hidden_size, F = v.intermediate_size, C = v.num_channels, S = v.image_size,
                  p = v.patch_size, L = v.seq_len(), H = v.num_attention_heads, hd = D / H,
                  Dt = c_.hidden_size;
    func::FuncOp fn =
        Entry(xpk::ExecutableKind::vision_encode, "num_images",
              {{"pixel_values", {kDyn, C * S * S}, f32(), "num_images"}}, "image_features");
    const std::string tower = "vision_tower.vision_model.";
    const std::string emb = tower + "embeddings.";
    Value patches =
        b_.create<xg::PatchifyOp>(NameLoc("patchify"), fn.getArgument(0), b_.getI64IntegerAttr(C),
                                  b_.getI64IntegerAttr(S), b_.getI64IntegerAttr(p));
    // The patch convolution [D, C, p, p] as a linear over flattened patches.
    Value x = Linear(patches, emb + "patch_embedding", D, C * p * p, !v.has_class_token());
    Value cls = v.has_class_token() ? Weight(emb + "class_embedding", {D}) : Value();
    x = b_.create<xg::VisionEmbedOp>(NameLoc(emb + "position_embedding"), x,
                                     Weight(emb + "position_embedding.weight", {L, D}), cls);
    if (v.has_class_token()) x = LayerNorm(x, tower + "pre_layrnorm", D, v.layer_norm_eps);
    std::vector<Value> hidden = {x};  // hidden_states[i]
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int64_t l = 0; l < v.layers_used(); ++l) {
      const std::string pre = tower + "encoder.layers." + std::to_string(l) + ".";
      Value h = LayerNorm(x, pre + "layer_norm1", D, v.layer_norm_eps);
      Value q = Linear(h, pre + "self_attn.q_proj", D, D, true);
      Value k = Linear(h, pre + "self_attn.k_proj", D, D, true);
      Value val = Linear(h, pre + "self_attn.v_proj", D, D, true);
      Value o = b_.create<xg::AttentionOp>(NameLoc(pre + "self_attn"), q, k, val,
                                           b_.getI64IntegerAttr(L), b_.getI64IntegerAttr(H),
                                           b_.getI64IntegerAttr(hd), b_.getF32FloatAttr(scale));
      x = b_.create<xg::AddOp>(NameLoc(pre + "residual_attn"), x,
                               Linear(o, pre + "self_attn.out_proj", D, D, true));
      h = LayerNorm(x, pre + "layer_norm2", D, v.layer_norm_eps);
      h = Gelu(Linear(h, pre + "mlp.fc1", F, D, true), pre + "mlp.act", v.hidden_act);
      x = b_.create<xg::AddOp>(NameLoc(pre + "residual_mlp"), x,
                               Linear(h, pre + "mlp.fc2", D, F, true));
      hidden.push_back(x);
    }
    SmallVector<Value> selected;
    for (int64_t index : v.feature_layers) selected.push_back(hidden[index]);
    Value feats = selected.size() == 1 ? selected.front()
                                       : b_.create<xg::ConcatOp>(NameLoc("vision_features"),
                                                                 selected, b_.getI64IntegerAttr(1))
                                             .getResult();
    if (v.select_strategy == "default")
      feats = b_.create<xg::SkipRowsOp>(NameLoc("drop_class_rows"), feats, b_.getI64IntegerAttr(L),
                                        b_.getI64IntegerAttr(1));
    const int64_t in = D * static_cast<int64_t>(v.feature_layers.size());
    Value y = Linear(feats, "multi_modal_projector.linear_1", Dt, in, v.projector_bias);
    y = Gelu(y, "multi_modal_projector.act", v.projector_act);
    y = Linear(y, "multi_modal_projector.linear_2", Dt, Dt, v.projector_bias);
    Return(fn, y);
  }

  MLIRContext* ctx_;
  OpBuilder b_;
  const DecoderConfig& c_;
  const DecoderBuildOptions& o_;
  Location loc_;
  const char* result_name_ = "";
};

}  // namespace

OwningOpRef<ModuleOp> BuildDecoderModule(MLIRContext* ctx, const DecoderConfig& config,
                                         const DecoderBuildOptions& options) {
  ctx->loadDialect<xg::XGDialect, func::FuncDialect>();
  return DecoderBuilder(ctx, config, options).Build();
}

std::vector<float> RopeInverseFrequencies(const DecoderConfig& c) {
  const int64_t dim = c.head_dim;
  std::vector<float> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) {
    // As HF computes it in float32: 1 / base ** (arange(0, dim, 2) / dim).
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "freq_factors") {
    for (int64_t i = 0; i < dim / 2; ++i) inv[i] = inv[i] / s.freq_factors[i];
  } else if (s.type == "linear") {
    for (float& f : inv) f = f / static_cast<float>(s.factor);
  } else if (s.type == "llama3") {
    const float factor = static_cast<float>(s.factor);
    const float low = static_cast<float>(s.low_freq_factor);
    const float high = static_cast<float>(s.high_freq_factor);
    const float old_len = static_cast<float>(s.original_max_position_embeddings);
    const float low_wavelen = old_len / low, high_wavelen = old_len / high;
    const float pi = 3.14159265358979323846f;
    for (float& f : inv) {
      float wavelen = 2.0f * pi / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      float smooth = (old_len / wavelen - low) / (high - low);
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

}  // namespace xcc

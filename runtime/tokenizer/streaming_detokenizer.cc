#include "runtime/tokenizer/streaming_detokenizer.h"

#include "runtime/tokenizer/utf8.h"

namespace xrt {

std::string StreamingDetokenizer::Push(int32_t id) {
  std::string out;
  if (id < 0 || id >= tokenizer_->vocab_size()) return out;
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return out;
  if (const DecoderChain* chain = tokenizer_->decoder_chain()) {
    chain->Push(&chain_state_, tokenizer_->DecoderPiece(id), &out);
    return out;
  }
  pending_ += tokenizer_->TokenBytes(id);
  const size_t consumed = utf8::AppendLossy(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  if (const DecoderChain* chain = tokenizer_->decoder_chain()) {
    chain->Finish(&chain_state_, &out);
    return out;
  }
  utf8::AppendLossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace xrt

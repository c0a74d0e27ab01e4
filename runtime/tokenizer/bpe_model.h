// BpeModel: BPE over one pre-tokenized word, as Hugging Face `tokenizers`
// models::bpe does it: start from one symbol per byte (byte-level spec) or per
// character (otherwise; a character without a token becomes its bytes'
// "<0xNN>" tokens with byte_fallback, else unk_id), then repeatedly merge the
// adjacent pair with the lowest merge rank (leftmost first on ties) until no
// pair has a rank.
//
// Merges are a hash map from (left id, right id) to (rank, merged id); results
// per word are cached. Immutable after Create except for the cache, which is
// guarded by a mutex: Encode is thread-safe. Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

namespace xrt {

class BpeModel {
 public:
  // `token_bytes[id]` is the byte string of each id ("" for holes; added
  // tokens may be included). Validates that every merge names two known
  // tokens whose concatenation is a token.
  static Expected<BpeModel> Create(const TokenizerSpec& spec,
                                   const std::vector<std::string>& token_bytes);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of `word` (raw bytes; valid UTF-8 when not byte-level).
  // Pieces without a token become unk_id if the spec has one (one unk_id for
  // a run of them with fuse_unk) and are dropped otherwise (as `tokenizers`).
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Cache;
  struct MergeInfo {
    int32_t rank;
    int32_t merged_id;
  };
  BpeModel();
  void Merge(std::string_view word, std::vector<int32_t>* ids) const;
  // The initial symbols of `word`, before merging.
  void InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::unordered_map<uint64_t, MergeInfo> merges_;
  // Byte-level: token bytes -> id; otherwise vocabulary text -> id.
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  // Byte-level: the token of each byte; otherwise the "<0xNN>" token of each
  // byte (byte_fallback). -1: none.
  int32_t byte_ids_[256];
  int32_t unk_id_ = -1;
  bool ignore_merges_ = false;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  std::unique_ptr<Cache> cache_;
};

}  // namespace xrt

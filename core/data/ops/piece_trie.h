// A byte trie over a fixed set of keys (SentencePiece pieces, user-defined symbols), each with
// an int value, answering "which keys are prefixes of this text" in one walk.
//
//   PieceTrie trie({{"\xe2\x96\x81the", 7}, {"\xe2\x96\x81t", 9}});
//   trie.ForEachPrefix(text, [&](size_t length, int value) { ... });  // shortest first
//
// Nodes are stored flat: a node's children are a contiguous run of (byte, child) edges sorted
// by byte, found by binary search; the root's by a 256-entry table.
//
// Thread safety: immutable after construction; any number of threads may search at once.
#ifndef SLUICE_CORE_DATA_OPS_PIECE_TRIE_H_
#define SLUICE_CORE_DATA_OPS_PIECE_TRIE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace sluice {

class PieceTrie {
 public:
  // Keys may repeat (the last value wins) and be empty (ignored).
  explicit PieceTrie(std::vector<std::pair<std::string, int>> keys);

  bool empty() const { return nodes_.size() <= 1; }
  // Whether some key starts with `byte`.
  bool HasKeyStartingWith(uint8_t byte) const { return root_children_[byte] >= 0; }

  // Calls visit(length, value) for each key that is a prefix of `text`, shorter keys first.
  template <typename Visit>
  void ForEachPrefix(absl::string_view text, Visit&& visit) const {
    if (text.empty()) return;
    int32_t node = root_children_[static_cast<uint8_t>(text[0])];
    size_t i = 1;
    while (node >= 0) {
      const Node& n = nodes_[static_cast<size_t>(node)];
      if (n.value >= 0) visit(i, n.value);
      if (i == text.size()) return;
      node = Child(n, static_cast<uint8_t>(text[i]));
      ++i;
    }
  }

 private:
  struct Node {
    uint32_t first_edge = 0;
    uint32_t num_edges = 0;
    int32_t value = -1;
  };

  int32_t Child(const Node& n, uint8_t byte) const {
    const uint8_t* begin = edge_bytes_.data() + n.first_edge;
    const uint8_t* end = begin + n.num_edges;
    const uint8_t* it = std::lower_bound(begin, end, byte);
    if (it == end || *it != byte) return -1;
    return edge_children_[static_cast<size_t>(it - edge_bytes_.data())];
  }

  std::vector<Node> nodes_;  // [0] is the root
  std::vector<uint8_t> edge_bytes_;
  std::vector<int32_t> edge_children_;
  std::array<int32_t, 256> root_children_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_PIECE_TRIE_H_

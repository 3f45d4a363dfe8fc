#include "core/data/ops/piece_trie.h"

namespace sluice {

PieceTrie::PieceTrie(std::vector<std::pair<std::string, int>> keys) {
  // Sorted by key (bytes compare unsigned), equal keys in input order so the last one wins.
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  root_children_.fill(-1);
  nodes_.emplace_back();
  // An explicit stack rather than recursion: a hostile model's piece may be very long.
  struct Work {
    int32_t node;
    size_t begin, end, depth;  // keys [begin, end) share their first `depth` bytes
  };
  std::vector<Work> stack = {{0, 0, keys.size(), 0}};
  while (!stack.empty()) {
    const Work w = stack.back();
    stack.pop_back();
    size_t i = w.begin;
    for (; i < w.end && keys[i].first.size() == w.depth; ++i) {
      if (w.depth > 0) nodes_[static_cast<size_t>(w.node)].value = keys[i].second;
    }
    const uint32_t first_edge = static_cast<uint32_t>(edge_bytes_.size());
    while (i < w.end) {
      const uint8_t byte = static_cast<uint8_t>(keys[i].first[w.depth]);
      size_t j = i;
      while (j < w.end && static_cast<uint8_t>(keys[j].first[w.depth]) == byte) ++j;
      const int32_t child = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (w.depth == 0) {
        root_children_[byte] = child;
      } else {
        edge_bytes_.push_back(byte);
        edge_children_.push_back(child);
      }
      stack.push_back({child, i, j, w.depth + 1});
      i = j;
    }
    Node& n = nodes_[static_cast<size_t>(w.node)];
    n.first_edge = first_edge;
    n.num_edges = static_cast<uint32_t>(edge_bytes_.size()) - first_edge;
  }
}

}  // namespace sluice

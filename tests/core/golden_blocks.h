// Reads the line-oriented golden files that tools/golden/gen_composite_goldens.py and
// gen_composite_differential.py write (test-only, header-only):
//   @records <name>        a set of serialized records, then one "@record <hex>" line each
//   @case <name>           starts a block; "@<tag> <value>" lines set its fields
//   @element               the lines up to the next "@..." line are one element's text
//   @end                   ends the block
#ifndef SLUICE_TESTS_CORE_GOLDEN_BLOCKS_H_
#define SLUICE_TESTS_CORE_GOLDEN_BLOCKS_H_

#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"

namespace sluice::golden {

struct Block {
  std::map<std::string, std::string> fields;  // "@spec X" -> fields["spec"] == "X"
  std::vector<std::string> elements;
  std::string Field(const std::string& tag) const {
    auto it = fields.find(tag);
    return it == fields.end() ? "" : it->second;
  }
};

struct File {
  bool read = false;  // the file opened
  std::vector<std::pair<std::string, std::vector<std::string>>> record_sets;  // name, records
  std::vector<Block> blocks;
};

// `path` relative to the source root (where CTest runs the tests).
inline File ReadFile(const std::string& path) {
  std::ifstream in(path);
  File f;
  f.read = in.good();
  Block block;
  std::string* text = nullptr;  // the element being read
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '@') {
      if (text != nullptr) *text += text->empty() ? line : "\n" + line;
      continue;
    }
    text = nullptr;
    const size_t space = line.find(' ');
    const std::string tag = line.substr(1, space == std::string::npos ? std::string::npos
                                                                      : space - 1);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (tag == "records") {
      f.record_sets.emplace_back(value, std::vector<std::string>());
    } else if (tag == "record" && !f.record_sets.empty()) {
      f.record_sets.back().second.push_back(absl::HexStringToBytes(value));
    } else if (tag == "case") {
      block = Block();
      block.fields["case"] = value;
    } else if (tag == "element") {
      block.elements.emplace_back();
      text = &block.elements.back();
    } else if (tag == "end") {
      f.blocks.push_back(block);
    } else {
      block.fields[tag] = value;
    }
  }
  return f;
}

}  // namespace sluice::golden

#endif  // SLUICE_TESTS_CORE_GOLDEN_BLOCKS_H_

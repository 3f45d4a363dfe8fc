#include "core/io/object_store_response.h"

#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sluice {

// The text of every <tag>...</tag> in `xml`, unescaped. Enough for S3's flat list and error
// documents.
std::vector<std::string> XmlValues(absl::string_view xml, absl::string_view tag) {
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = xml.find(open, at)) != absl::string_view::npos) {
    const size_t begin = at + open.size();
    const size_t end = xml.find(close, begin);
    if (end == absl::string_view::npos) break;
    absl::string_view raw = xml.substr(begin, end - begin);
    std::string text;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '&') {
        text.push_back(raw[i]);
        continue;
      }
      const size_t semi = raw.find(';', i);
      if (semi == absl::string_view::npos) {
        text.push_back(raw[i]);
        continue;
      }
      absl::string_view entity = raw.substr(i + 1, semi - i - 1);
      uint32_t code = 0;
      if (entity == "amp") {
        text.push_back('&');
      } else if (entity == "lt") {
        text.push_back('<');
      } else if (entity == "gt") {
        text.push_back('>');
      } else if (entity == "quot") {
        text.push_back('"');
      } else if (entity == "apos") {
        text.push_back('\'');
      } else if (absl::ConsumePrefix(&entity, "#x") && absl::SimpleHexAtoi(entity, &code) &&
                 code < 128) {
        text.push_back(static_cast<char>(code));
      } else if (absl::ConsumePrefix(&entity, "#") && absl::SimpleAtoi(entity, &code) &&
                 code < 128) {
        text.push_back(static_cast<char>(code));
      } else {
        absl::StrAppend(&text, raw.substr(i, semi - i + 1));
      }
      i = semi;
    }
    out.push_back(std::move(text));
    at = end + close.size();
  }
  return out;
}

// The status for a response that is not a success: the code by HTTP status, the message naming
// what was done to which URL and what the store said.
absl::Status ResponseError(const HttpResponse& r, absl::string_view what) {
  std::string detail;
  const std::vector<std::string> codes = XmlValues(r.body, "Code");
  const std::vector<std::string> messages = XmlValues(r.body, "Message");
  if (!codes.empty()) absl::StrAppend(&detail, " ", codes[0]);
  if (!messages.empty()) absl::StrAppend(&detail, ": ", messages[0]);
  const std::string message = absl::StrCat(what, ": HTTP ", r.status, detail);
  if (r.status == 404) return absl::NotFoundError(message);
  if (r.status == 401 || r.status == 403) return absl::PermissionDeniedError(message);
  if (IsRetryableHttpStatus(r.status)) {
    return absl::UnavailableError(absl::StrCat(message, " (retries spent)"));
  }
  if (r.status == 301 || r.status == 307 || r.status == 308) {
    return absl::InvalidArgumentError(absl::StrCat(
        message, " (the bucket is elsewhere: set AWS_REGION or the endpoint to its region)"));
  }
  return absl::InvalidArgumentError(message);
}

}  // namespace sluice

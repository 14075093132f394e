#include "server/multipart.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace jasper::server {
namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("multipart/form-data: ", what));
}

// The value of `key` among `;`-separated parameters (after the first item), unquoted; whether
// it was there.
bool Param(absl::string_view header, absl::string_view key, std::string* value) {
  bool first = true;
  for (absl::string_view item : absl::StrSplit(header, ';')) {
    if (first) {
      first = false;
      continue;
    }
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) continue;
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(item.substr(0, eq)), key)) continue;
    absl::string_view v = absl::StripAsciiWhitespace(item.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      // A quoted string: backslash escapes one character.
      value->clear();
      for (size_t i = 1; i + 1 < v.size(); ++i) {
        if (v[i] == '\\' && i + 2 < v.size()) ++i;
        value->push_back(v[i]);
      }
    } else {
      value->assign(v.data(), v.size());
    }
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> FormBoundary(absl::string_view content_type) {
  const absl::string_view media =
      absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';')));
  if (!absl::EqualsIgnoreCase(media, "multipart/form-data")) {
    return Bad(absl::StrCat("the request's Content-Type is '", media.substr(0, 100),
                            "', not multipart/form-data"));
  }
  std::string boundary;
  if (!Param(content_type, "boundary", &boundary)) return Bad("no boundary in the Content-Type");
  if (boundary.empty() || boundary.size() > 70) return Bad("the boundary is not 1-70 characters");
  return boundary;
}

absl::StatusOr<std::vector<FormPart>> ParseMultipart(absl::string_view body,
                                                     absl::string_view boundary) {
  const std::string delimiter = absl::StrCat("--", boundary);
  // The first delimiter (a preamble before it is allowed and ignored).
  size_t pos;
  if (absl::StartsWith(body, delimiter)) {
    pos = delimiter.size();
  } else {
    pos = body.find(absl::StrCat("\r\n", delimiter));
    if (pos == absl::string_view::npos) return Bad("no opening boundary");
    pos += 2 + delimiter.size();
  }
  const std::string next = absl::StrCat("\r\n", delimiter);
  std::vector<FormPart> parts;
  while (true) {
    // After a delimiter: "--" closes, else transport padding and CRLF start a part.
    if (body.substr(pos, 2) == "--") return parts;
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") return Bad("a boundary not followed by CRLF");
    pos += 2;
    const size_t header_end = body.find("\r\n\r\n", pos);
    if (header_end == absl::string_view::npos) {
      return Bad(body.size() - pos > kMaxFormPartHeaderBytes ? "a part's headers are too long"
                                                             : "a part without its headers");
    }
    if (header_end - pos > kMaxFormPartHeaderBytes) return Bad("a part's headers are too long");
    if (parts.size() >= static_cast<size_t>(kMaxFormParts)) {
      return Bad(absl::StrCat("more than ", kMaxFormParts, " parts"));
    }
    FormPart part;
    bool form_data = false;
    for (absl::string_view line :
         absl::StrSplit(body.substr(pos, header_end - pos), "\r\n", absl::SkipEmpty())) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) return Bad("a part header without ':'");
      const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
      const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "content-disposition")) {
        const absl::string_view kind = absl::StripAsciiWhitespace(value.substr(0, value.find(';')));
        form_data = absl::EqualsIgnoreCase(kind, "form-data") && Param(value, "name", &part.name);
        Param(value, "filename", &part.filename);
      } else if (absl::EqualsIgnoreCase(name, "content-type")) {
        part.content_type = std::string(value);
      }
    }
    if (!form_data) return Bad("a part without 'Content-Disposition: form-data; name=...'");
    const size_t data_begin = header_end + 4;
    const size_t data_end = body.find(next, data_begin);
    if (data_end == absl::string_view::npos) return Bad("no closing boundary");
    part.data = body.substr(data_begin, data_end - data_begin);
    parts.push_back(std::move(part));
    pos = data_end + next.size();
  }
}

}  // namespace jasper::server
